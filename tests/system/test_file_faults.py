"""A full disk, a read-only file system or a directory without write permission, on a real mount: one line
naming the file and the error, exit status 4 (not 2, the input was fine), no partial file left, the last good
checkpoint kept and the command that resumes from it printed; resuming once there is room ends as the run that
never failed (:mod:`privsilo.simulator.run_dir.write_faults`)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from privsilo.simulator.run_dir.checkpoint import read_checkpoint
from privsilo.simulator.cli import main
from privsilo.simulator.run_dir.write_faults import EXIT_FILE_SYSTEM_FAULT
from tests.support.outputs import metrics_without_wall_times as _metrics
from tests.support.paths import REPO

QUICKSTART = str(REPO / "scenarios" / "quickstart.yaml")
# Four rounds, a checkpoint after each: the first (~40 KiB) fits a 96 KiB disk, the second beside it does not.
SETTINGS = ["--set", "federation.rounds=4", "--set", "checkpoint.every=1", "--no-progress"]


def _mount(point: Path, *options: str) -> None:
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(point)], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or 'mount failed'}); the test needs root")


def _remount(point: Path, *options: str) -> None:
    subprocess.run(["mount", "-o", ",".join(("remount", *options)), str(point)], check=True)


@pytest.fixture
def disk(tmp_path):
    """A 96 KiB tmpfs mounted at ``tmp_path/disk`` (unmounted after the test)."""
    point = tmp_path / "disk"
    point.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    _mount(point, "size=96k", "mode=0755")
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("privsilo: error: "), captured.err
    return lines[0]


def test_a_full_disk_then_read_only_then_resume_once_there_is_room(ray_local, disk, tmp_path, capsys):
    assert main(["run", QUICKSTART, "--out", str(tmp_path / "reference"), *SETTINGS]) == 0
    out = disk / "run"
    assert main(["run", QUICKSTART, "--out", str(out), *SETTINGS]) == EXIT_FILE_SYSTEM_FAULT
    line = _one_error_line(capsys)
    assert line == (f"privsilo: error: could not write {out}/checkpoint.pkl: No space left on device (ENOSPC); no results "
                    f"were written; continue from the last checkpoint with: privsilo resume {out}")
    assert sorted(p.name for p in out.iterdir()) == [".privsilo-output", "checkpoint.pkl"]  # no partial, no lock
    assert len(read_checkpoint(out)["records"]) == 1  # the last good one, whole

    _remount(disk, "ro")
    for argv, path in ((["resume", str(out), "--no-progress"], out / ".privsilo.lock"),
                       (["run", QUICKSTART, "--out", str(disk / "new"), *SETTINGS], disk / "new")):
        assert main(argv) == EXIT_FILE_SYSTEM_FAULT
        assert f"could not write {path}: Read-only file system (EROFS)" in _one_error_line(capsys)

    _remount(disk, "rw", "size=4m")  # room made
    assert main(["resume", str(out), "--no-progress"]) == 0
    assert _metrics(out) == _metrics(tmp_path / "reference")
    assert (out / "model.pt").read_bytes() == (tmp_path / "reference" / "model.pt").read_bytes()
    assert not (out / "checkpoint.pkl").exists()


def test_results_that_do_not_fit_leave_no_partial_file(ray_local, disk, capsys):
    """No checkpoint: the run's plot (~50 KiB) does not fit beside what a 16 KiB disk holds."""
    _remount(disk, "size=16k")
    out = disk / "run"
    argv = ["run", QUICKSTART, "--out", str(out), "--set", "federation.rounds=2", "--set", "checkpoint.every=0", "--no-progress"]
    assert main(argv) == EXIT_FILE_SYSTEM_FAULT
    line = _one_error_line(capsys)
    assert f"could not write {out}/metrics.png: No space left on device (ENOSPC)" in line
    assert line.endswith("no results were written and no checkpoint either (the run stopped before its first one); start it again")
    assert sorted(p.name for p in out.iterdir()) == [".privsilo-output", "metrics.csv"]  # the plot's partial removed


def test_a_directory_another_user_cannot_write():
    """Root passes every permission check, so this runs as user nobody (where nobody can run this Python)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root (to run as another user) and setpriv(1)")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*as_nobody, sys.executable, "-c", "import privsilo.simulator.cli"], cwd=REPO, capture_output=True)
    if probe.returncode != 0:
        pytest.skip("user nobody cannot run this Python or read this checkout (e.g. an interpreter under /root)")
    base = Path(tempfile.mkdtemp(prefix="privsilo-eacces-"))  # pytest's tmp_path is root's alone (0700)
    try:
        base.chmod(0o755)
        locked, home = base / "locked", base / "home"
        locked.mkdir(mode=0o755)
        home.mkdir()
        os.chown(home, 65534, 65534)
        env = {**os.environ, "HOME": str(home), "PRIVSILO_STATE_DIR": str(home / "state")}
        command = [sys.executable, "-m", "privsilo.simulator.cli", "run", QUICKSTART, "--out", str(locked / "out"), "--no-progress"]
        result = subprocess.run([*as_nobody, *command], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == EXIT_FILE_SYSTEM_FAULT, result.stderr
        assert result.stderr.strip() == (f"privsilo: error: could not write {locked / 'out'}: Permission denied (EACCES); "
                                         "no results were written")
        assert list(locked.iterdir()) == []
    finally:
        shutil.rmtree(base)


def test_an_attack_audit_sweep_or_merge_that_does_not_fit_leaves_nothing(disk):
    """Their files are written into a staging directory beside the target, which a failed write removes."""
    from privsilo.simulator.run_dir.write_faults import FileSystemFault
    from privsilo.simulator.run_dir.writers import atomic_directory

    with pytest.raises(FileSystemFault, match=rf"could not write {disk}/attack: No space left on device \(ENOSPC\)"):
        with atomic_directory(disk / "attack", kind="attack") as staging:
            (staging / "attack.png").write_bytes(bytes(200_000))
    assert list(disk.iterdir()) == []
