"""A run's output directory: finishing is one step (a real SIGKILL at each step of it leaves a resumable or a
finished run, never neither, and no checkpoint in a finished one), one writer at a time, ``--out`` always a
directory, results readable like any other output, and a checkpoint of the wrong structure refused in one line."""
from __future__ import annotations

import os
import pickle
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from privsilo.simulator.run_dir.checkpoint import CHECKPOINT_FILE, CheckpointError, write_checkpoint
from privsilo.simulator.cli import EXIT_USER_ERROR, main
from privsilo.simulator.engine import run
from privsilo.simulator.run_dir.writers import atomic_directory
from privsilo.simulator.run_dir.lifecycle import KILL_POINT_VARIABLE, is_finished
from privsilo.simulator.run_dir.lock import LOCK_FILE, locked
from tests.support.outputs import metrics_without_wall_times as _metrics
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario

PRIVSILO = [sys.executable, "-m", "privsilo.simulator.cli"]
FINISHING_STEPS = ("finish:start", "finish:metrics", "finish:summary-partial", "finish:summary", "finish:committed")
# Finishes a run's result (pickled at argv[2]) into argv[1] as engine.run does: holding the lock, after settling.
FINISH = """
import pickle, sys
from pathlib import Path
from privsilo.simulator.run_dir.writers import write_run
from privsilo.simulator.run_dir.lifecycle import settle
from privsilo.simulator.run_dir.lock import locked
directory = Path(sys.argv[1])
result = pickle.loads(Path(sys.argv[2]).read_bytes())
with locked(directory):
    settle(directory)
    write_run(result, directory)
"""


def _scenario(**blocks) -> dict:
    scenario = small_scenario(data={"dataset": "digits", "partition": "iid", "silos": 3},
                              federation={"rounds": 2, "client_rate": 1.0, "local_steps": 2, "batch_size": 32, "lr": 0.1},
                              mechanism={"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5},
                              resources={"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}, "silos_per_actor": 1})
    scenario.update(blocks)
    return scenario


def _same_outputs(directory: Path, reference: Path) -> None:
    assert _metrics(directory / "metrics.csv") == _metrics(reference / "metrics.csv")
    model, expected = torch.load(directory / "model.pt"), torch.load(reference / "model.pt")
    assert model.keys() == expected.keys() and all(torch.equal(model[k], expected[k]) for k in expected)


def test_a_kill_at_each_step_of_finishing_leaves_a_resumable_or_a_finished_run(ray_local, tmp_path):
    """The finishing of a real run, in a process SIGKILLed at each of its steps (``$PRIVSILO_TEST_KILL_AT``): the
    directory then holds either the checkpoint, from which ``privsilo resume`` finishes the run with the results
    of the uninterrupted one, or the finished results and no checkpoint."""
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(_scenario()))
    reference = tmp_path / "reference"
    result = run(scenario_file, out_dir=reference)  # its checkpoint, after the last round, is removed as it finishes
    assert is_finished(reference) and not (reference / CHECKPOINT_FILE).exists()
    pickled = tmp_path / "result.pkl"
    pickled.write_bytes(pickle.dumps(result))
    checkpointed = tmp_path / "checkpointed"
    run(scenario_file, checkpoint_dir=checkpointed)  # without out_dir the checkpoint stays: what a killed run leaves
    states = {}
    for step in FINISHING_STEPS:
        directory = tmp_path / step.replace(":", "_")
        directory.mkdir()
        (directory / CHECKPOINT_FILE).write_bytes((checkpointed / CHECKPOINT_FILE).read_bytes())
        killed = subprocess.run([sys.executable, "-c", FINISH, str(directory), str(pickled)], cwd=REPO,
                                env={**os.environ, KILL_POINT_VARIABLE: step}, capture_output=True, text=True, timeout=300)
        assert killed.returncode == -signal.SIGKILL, (step, killed.stderr)
        has_checkpoint, has_summary = (directory / CHECKPOINT_FILE).exists(), (directory / "summary.json").exists()
        assert has_checkpoint or has_summary, f"killed at {step}: neither resumable nor finished"
        if not has_checkpoint:
            assert is_finished(directory)
        states[step] = (has_checkpoint, has_summary)
        assert main(["resume", str(directory), "--no-progress"]) in (0, EXIT_USER_ERROR)  # finished: nothing to resume
        assert is_finished(directory) and not (directory / CHECKPOINT_FILE).exists(), step
        assert not [p.name for p in directory.iterdir() if ".partial-" in p.name], step
        _same_outputs(directory, reference)
    # Every kind of state occurred: resumable, written but not yet committed, finished.
    assert states["finish:start"] == (True, False) and states["finish:summary-partial"] == (True, False)
    assert states["finish:summary"] == (True, True) and states["finish:committed"] == (False, True)


def test_two_writers_the_second_refused_and_the_first_unharmed(tmp_path):
    """While ``privsilo run`` writes a directory (held still with SIGSTOP meanwhile, so that it cannot finish
    first), a second run and a resume on it exit with 2 and one line naming its pid; it then finishes as if alone."""
    scenario = _scenario()
    scenario["federation"]["rounds"] = 4
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "out"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    first = subprocess.Popen([*PRIVSILO, "run", str(scenario_file), "--out", str(out), "--no-progress"], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not (out / CHECKPOINT_FILE).exists():  # the first writer is at work
        assert first.poll() is None, first.communicate()[0]
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGSTOP)
    try:
        for command in (["run", str(scenario_file), "--out", str(out), "--overwrite"], ["resume", str(out)]):
            second = subprocess.run([*PRIVSILO, *command, "--no-progress"], cwd=REPO, env=env, capture_output=True,
                                    text=True, timeout=120)
            lines = second.stderr.strip().splitlines()
            assert second.returncode == EXIT_USER_ERROR and len(lines) == 1, second.stderr
            assert f"pid {first.pid}" in lines[0] and "another process is writing this directory" in lines[0]
    finally:
        os.kill(first.pid, signal.SIGCONT)
    output = first.communicate(timeout=600)[0]
    assert first.returncode == 0, output
    assert is_finished(out) and not (out / LOCK_FILE).exists()
    assert len(_metrics(out / "metrics.csv")) == 4


def test_the_lock_is_reentrant_and_names_its_holder_to_another_process(tmp_path):
    with locked(tmp_path / "d") as directory, locked(tmp_path / "d"):
        assert (directory / LOCK_FILE).read_text().strip() == str(os.getpid())
        other = subprocess.run([sys.executable, "-c", "import sys\nfrom privsilo.simulator.run_dir.lock import locked\n"
                                "with locked(sys.argv[1]): pass", str(directory)], cwd=REPO, capture_output=True, text=True,
                               timeout=60)
        assert other.returncode != 0 and f"pid {os.getpid()}" in other.stderr and "DirectoryInUse" in other.stderr
    assert not (tmp_path / "d").exists()  # created by the lock and left empty: removed again
    with locked(tmp_path / "d"):  # free again
        pass


def test_checkpoint_partials_of_live_writers_are_kept(tmp_path):
    """``write_checkpoint`` removes the temporary files of dead writers, never those of a live one."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    try:
        (tmp_path / f".{CHECKPOINT_FILE}.partial-{live.pid}").write_bytes(b"half")
        (tmp_path / f".{CHECKPOINT_FILE}.partial-{dead}").write_bytes(b"half")
        write_checkpoint(tmp_path, {"state": 1}, scenario={})
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([CHECKPOINT_FILE, f".{CHECKPOINT_FILE}.partial-{live.pid}"])
    finally:
        live.kill()
        live.wait()


def test_out_naming_a_file_is_refused_before_any_work(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(_scenario(checkpoint={"every": 0})))
    for args in (["run", str(scenario_file), "--out", str(notes)], ["run", str(scenario_file), "--out", str(notes / "below")],
                 ["resume", str(notes)], ["sweep", str(scenario_file), "--out", str(notes)],
                 ["attack", str(scenario_file), "--out", str(notes)]):
        assert main([*args, "--no-progress"]) == EXIT_USER_ERROR, args
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert str(notes) in line and "a file" in line and "directory" in line, line
    assert notes.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "scenario.yaml"]


def test_a_symlink_loop_and_resume_of_a_file_say_what_they_are(tmp_path, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(_scenario(checkpoint={"every": 0})))
    for args in (["run", str(scenario_file), "--out", str(loop)], ["attack", str(scenario_file), "--out", str(loop / "x")]):
        assert main([*args, "--no-progress"]) == EXIT_USER_ERROR, args
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "a symbolic link that leads nowhere (a loop, or a missing target)" in line and "a file" not in line, line
    assert main(["resume", str(scenario_file)]) == EXIT_USER_ERROR
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith("is a file; resume names the output directory of an interrupted run"), line


def test_resume_with_overwrite_and_a_checkpoint_of_another_structure_are_refused(tmp_path, capsys):
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(_scenario()))
    out = tmp_path / "out"
    assert main(["run", str(scenario_file), "--out", str(out), "--resume", "--overwrite"]) == EXIT_USER_ERROR
    assert "--overwrite" in capsys.readouterr().err
    from privsilo.simulator.scenario import resolve_scenario

    # A valid digest and header, but not a run's state (what a KeyError once reported).
    write_checkpoint(out, {"records": []}, scenario=resolve_scenario(scenario_file).to_dict(every_key=True))
    assert main(["resume", str(out), "--no-progress"]) == EXIT_USER_ERROR
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "not a checkpoint of a privsilo run" in line and "'accountant'" in line
    with pytest.raises(CheckpointError, match="not a checkpoint of a privsilo run"):
        run(scenario_file, out_dir=out, resume=True)


def test_results_have_the_umasks_permissions_and_the_checkpoint_stays_private(tmp_path):
    from privsilo.simulator.run_dir.checkpoint import checkpoint_path

    write_checkpoint(tmp_path / "run", {"state": 1}, scenario={})
    assert stat.S_IMODE(checkpoint_path(tmp_path / "run").stat().st_mode) == 0o600
    umask = os.umask(0o022)
    try:
        with atomic_directory(tmp_path / "attack", kind="attack") as staging:
            (staging / "attack.json").write_text("{}\n")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "attack").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "attack" / "attack.json").stat().st_mode) == 0o644


def test_stale_staging_directories_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    for name in (f".out.partial-{dead}-0a1b2c3d", f".out.previous-{dead}", f".out.partial-{os.getppid()}-0a1b2c3d"):
        (tmp_path / name).mkdir()
    with atomic_directory(tmp_path / "out", kind="sweep") as staging:
        (staging / "runs.csv").write_text("")
    with atomic_directory(tmp_path / "out", kind="sweep") as staging:  # replaces an existing directory
        (staging / "table.md").write_text("")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".out.partial-{os.getppid()}-0a1b2c3d", "out"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".privsilo-output", "table.md"]
