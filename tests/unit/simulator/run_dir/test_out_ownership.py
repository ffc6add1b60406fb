"""privsilo deletes only what it wrote: every command that writes refuses, before any work, an ``--out`` that
holds files privsilo did not write (``--overwrite`` included), and ``--overwrite`` replaces only privsilo's own
output directories (:mod:`privsilo.simulator.run_dir.ownership`)."""
from __future__ import annotations

import json

import pytest
import yaml

from privsilo.simulator.run_dir.checkpoint import write_checkpoint
from privsilo.simulator.cli import EXIT_USER_ERROR, main
from privsilo.simulator.engine import run
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.run_dir.ownership import MARKER_FILE, claim, kind_of, write_marker
from privsilo.simulator.run_dir.writers import atomic_directory
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario

QUICKSTART = str(REPO / "scenarios" / "quickstart.yaml")
USER_FILES = {"my_secagg.yaml": "protocol: {secure_aggregation: true}\n", "mymodel.py": "import torch\n",
              "mydata.py": "def load(): ...\n"}
# Every command that writes an output directory, as a user would give it `--out .` (merge: its sweeps come
# after the refusal, so any two paths do). `data fetch` writes only its dataset's own files into --dir and
# removes nothing else there (see docs/datasets.md).
COMMANDS = {
    "run": ["run", QUICKSTART, "--out", "."],
    "run --overwrite": ["run", QUICKSTART, "--out", ".", "--overwrite"],
    "run --resume": ["run", "--resume", "--out", "."],
    "resume": ["resume", "."],
    "attack": ["attack", QUICKSTART, "--out", "."],
    "attack --overwrite": ["attack", QUICKSTART, "--out", ".", "--overwrite"],
    "audit": ["audit", QUICKSTART, "--out", "."],
    "audit --overwrite": ["audit", QUICKSTART, "--out", ".", "--overwrite"],
    "sweep": ["sweep", "GRID", "--out", "."],
    "sweep --overwrite": ["sweep", "GRID", "--out", ".", "--overwrite"],
    "merge": ["merge", "a", "b", "--out", "."],
    "merge --overwrite": ["merge", "a", "b", "--out", ".", "--overwrite"],
}


def _user_folder(path):
    path.mkdir(parents=True, exist_ok=True)
    for name, text in USER_FILES.items():
        (path / name).write_text(text)
    (path / "notes").mkdir()
    (path / "notes" / "plan.md").write_text("keep me\n")
    return path


def _contents(path):
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else None for p in sorted(path.rglob("*"))}


def _one_error_line(capsys):
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("privsilo: error: "), captured
    return lines[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_writing_command_refuses_a_folder_of_user_files(command, tmp_path, monkeypatch, capsys):
    folder = _user_folder(tmp_path / "project")
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "g", "base": QUICKSTART, "seeds": [0], "axes": {"seed": {"a": {"seed": 1}}}}))
    before = _contents(folder)
    monkeypatch.chdir(folder)
    argv = [str(grid) if word == "GRID" else word for word in COMMANDS[command]]
    assert main([*argv, "--no-progress"] if command.split()[0] not in ("merge",) else argv) == EXIT_USER_ERROR
    line = _one_error_line(capsys)
    if "resume" in command:  # resume writes only into a run directory holding a checkpoint
        assert "holds no checkpoint" in line
    else:
        assert "--out: got '.'" in line and "my_secagg.yaml, mydata.py, mymodel.py and 1 more" in line, line
    assert _contents(folder) == before  # not a byte changed, no lock or marker left
    assert not (tmp_path / "project.unfinished").exists()


def test_a_privsilo_directory_with_a_file_put_into_it_is_not_replaced(tmp_path, capsys):
    out = tmp_path / "out"
    with atomic_directory(out, kind="attack") as staging:
        (staging / "attack.json").write_text("{}\n")
    assert kind_of(out) == "attack" and json.loads((out / MARKER_FILE).read_text())["files"] == ["attack.json"]
    (out / "notes.md").write_text("mine\n")
    before = _contents(out)
    assert main(["attack", QUICKSTART, "--out", str(out), "--overwrite", "--no-progress"]) == EXIT_USER_ERROR
    line = _one_error_line(capsys)
    assert "privsilo's output directory also holds files privsilo did not write (notes.md)" in line
    with pytest.raises(ScenarioError, match="notes.md"):  # nor by the writer itself, whoever calls it
        with atomic_directory(out, kind="attack") as staging:
            (staging / "attack.json").write_text("{}\n")
    assert _contents(out) == before


def test_another_kind_of_output_is_replaced_only_with_overwrite(tmp_path):
    out = tmp_path / "out"
    with atomic_directory(out, kind="attack") as staging:
        (staging / "attack.json").write_text("{}\n")
    with pytest.raises(ScenarioError, match="holds privsilo's attack output; pass --overwrite"):
        claim(out, kind="run", overwrite=False)
    claim(out, kind="run", overwrite=True)
    for kind in ("run", "audit", "sweep", "merge"):  # an empty or missing directory is anyone's
        claim(tmp_path / "empty", kind=kind, overwrite=False)


def test_a_run_directory_written_before_the_marker_is_privsilos(tmp_path):
    """Recognised by its checkpoint's header or by summary.json's keys; a file of the same name is not enough."""
    legacy = tmp_path / "legacy"
    write_checkpoint(legacy, {"records": []}, scenario={})
    assert kind_of(legacy) == "run"
    claim(legacy, kind="run", overwrite=True)
    finished = tmp_path / "finished"
    finished.mkdir()
    (finished / "summary.json").write_text(json.dumps({"config": {}, "final": {}, "privacy": {}}))
    (finished / "metrics.csv").write_text("round\n")
    assert kind_of(finished) == "run"
    with pytest.raises(ScenarioError, match="already holds a finished result"):
        claim(finished, kind="run", overwrite=False)
    claim(finished, kind="run", overwrite=True)
    user = _user_folder(tmp_path / "user")
    (user / "checkpoint.pkl").write_bytes(b"my own pickle")
    (user / "summary.json").write_text("{}")
    assert kind_of(user) is None
    with pytest.raises(ScenarioError, match="checkpoint.pkl, my_secagg.yaml, mydata.py and 3 more"):
        claim(user, kind="run", overwrite=True)


def test_the_python_api_refuses_a_folder_of_user_files_before_any_work(tmp_path):
    folder = _user_folder(tmp_path / "project")
    (folder / "summary.json").write_text("{}")  # settle leaves a directory privsilo did not write alone
    (folder / "checkpoint.pkl").write_text("mine")
    before = _contents(folder)
    with pytest.raises(ScenarioError, match="holds files privsilo did not write"):
        run(small_scenario(), out_dir=folder)
    assert _contents(folder) == before


def test_the_marker_lists_what_privsilo_wrote(tmp_path):
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "metrics.csv").write_text("")
    (directory / ".summary.json.partial-12").write_text("")
    write_marker(directory, "run")
    marker = json.loads((directory / MARKER_FILE).read_text())
    assert marker["written_by"] == "privsilo" and marker["kind"] == "run" and marker["files"] == ["metrics.csv"]


def test_data_fetch_into_a_folder_of_user_files_adds_only_its_own(heart_disease_dir, tmp_path, monkeypatch, capsys):
    folder = _user_folder(tmp_path / "project")
    before = _contents(folder)
    monkeypatch.chdir(folder)
    assert main(["data", "fetch", "heart_disease", "--dir", ".", "--from", str(heart_disease_dir)]) == 0
    after = _contents(folder)
    assert {name: after[name] for name in before} == before
    assert sorted(set(after) - set(before)) == sorted(p.name for p in heart_disease_dir.glob("processed.*.data"))
