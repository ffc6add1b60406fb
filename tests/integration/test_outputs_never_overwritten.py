"""Results are never overwritten: a new ``runs/<name>/<UTC time>`` per run, a finished ``--out`` refused without
``--overwrite`` (an unfinished sweep still resumes), the invocation in summary.json, ``--log tensorboard``, and
the result line of a regression run."""
from __future__ import annotations

import json
import math
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

import privsilo.simulator.engine
from privsilo.simulator.cli import EXIT_INTERRUPTED, EXIT_USER_ERROR, main
from privsilo.simulator.engine import run
from privsilo.simulator.run_dir.ownership import new_directory
from tests.support.grids import write_grid
from tests.support.outputs import assert_tensorboard_equals_metrics, logged_steps
from tests.support.paths import QUICKSTART, REPO

SYNTHETIC_LINEAR = REPO / "scenarios" / "dprivacy" / "synthetic_linear.yaml"
STAMP = re.compile(r"\d{8}-\d{6}(-\d+)?")


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("privsilo: error: "), lines
    return lines[0]


def test_a_second_in_which_three_runs_start_gives_three_directories(tmp_path):
    now = datetime(2025, 3, 1, 12, 30, 5, tzinfo=timezone.utc)
    made = [new_directory(tmp_path / "quickstart", now=now) for _ in range(3)]
    assert [p.name for p in made] == ["20250301-123005", "20250301-123005-2", "20250301-123005-3"]
    assert all(p.is_dir() for p in made)


def test_runs_without_out_never_replace_each_other(ray_local, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["run", str(QUICKSTART), "--set", "federation.rounds=1", "--no-progress"]
    assert main(args) == 0
    assert main([*args, "--set", "seed=1"]) == 0
    written = re.findall(r"^results written to (.+)$", capsys.readouterr().out, flags=re.MULTILINE)
    directories = sorted((tmp_path / "runs" / "quickstart").iterdir())
    assert [str(Path("runs") / "quickstart" / p.name) for p in directories] == sorted(written)
    assert len(directories) == 2 and all(STAMP.fullmatch(p.name) for p in directories)
    seeds = [json.loads((p / "summary.json").read_text())["config"]["seed"] for p in directories]
    assert sorted(seeds) == [0, 1]


def test_a_failed_run_leaves_no_empty_default_directory(ray_local, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # breast_cancer's 455 training records leave some of 500 silos empty: the run fails (now at validation).
    code = main(["run", str(QUICKSTART), "--set", "data.dataset=breast_cancer", "--set", "data.silos=500", "--no-progress"])
    assert code == EXIT_USER_ERROR and "data.silos" in _error_line(capsys)
    runs = tmp_path / "runs"
    assert not runs.exists() or [path for path in runs.rglob("*") if path.is_file() or any(path.iterdir())] == []


def test_finished_out_is_refused_without_overwrite_and_tensorboard_matches_metrics(ray_local, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["run", str(QUICKSTART), "--set", "federation.rounds=2", "--out", str(out), "--no-progress"]
    assert main([*args, "--log", "tensorboard"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["invocation"]["argv"] == ["privsilo", *args, "--log", "tensorboard"]
    assert summary["invocation"]["overrides"] == ["federation.rounds=2"]
    assert {"config", "final", "privacy", "randomness", "timing", "placement"} <= set(summary)
    assert_tensorboard_equals_metrics(out)
    capsys.readouterr()

    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main(args) == EXIT_USER_ERROR
    line = _error_line(capsys)
    assert "--out" in line and str(out) in line and "--overwrite" in line
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before

    assert main([*args, "--overwrite", "--set", "seed=4"]) == 0
    assert json.loads((out / "summary.json").read_text())["config"]["seed"] == 4
    assert not (out / "tensorboard").exists()  # replaced as a whole, not merged
    marked = json.loads((out / ".privsilo-output").read_text())  # what privsilo wrote, summary.json aside
    assert marked["kind"] == "run" and {"metrics.csv", "metrics.png", "model.pt"} <= set(marked["files"])
    (out / "notes.md").write_text("mine\n")  # a file of the user's in privsilo's directory: never deleted
    capsys.readouterr()
    assert main([*args, "--overwrite"]) == EXIT_USER_ERROR
    assert "privsilo's output directory also holds files privsilo did not write (notes.md)" in _error_line(capsys)
    assert (out / "notes.md").read_text() == "mine\n" and (out / "summary.json").is_file()


def test_sweep_logs_one_tensorboard_run_per_grid_run(ray_local, tmp_path):
    grid_path = write_grid(tmp_path, seeds=[0])  # 2 runs
    assert main(["sweep", str(grid_path), "--out", str(tmp_path / "swept"), "--log", "tensorboard", "--no-progress"]) == 0
    runs = sorted(p.name for p in (tmp_path / "swept" / "tensorboard").iterdir())
    assert len(runs) == 2
    for name in runs:
        steps = logged_steps(tmp_path / "swept" / "tensorboard" / name)
        assert steps and steps == list(range(1, len(steps) + 1))
    assert not (tmp_path / "swept.unfinished").exists()


def test_api_runs_record_their_overrides_and_no_command_line(ray_local, tmp_path):
    # The quickstart, as the CLI runs above: their idle actors serve this run too (no new worker processes).
    run(QUICKSTART, overrides=["federation.rounds=1"], out_dir=tmp_path / "api")
    invocation = json.loads((tmp_path / "api" / "summary.json").read_text())["invocation"]
    assert invocation["argv"] is None and invocation["overrides"] == ["federation.rounds=1"]
    assert invocation["privsilo_version"]


def test_log_refuses_an_unknown_tracker_and_a_missing_tensorboard(tmp_path, monkeypatch, capsys):
    args = ["run", str(QUICKSTART), "--out", str(tmp_path / "out"), "--no-progress"]
    assert main([*args, "--log", "wandb"]) == EXIT_USER_ERROR
    assert _error_line(capsys) == "privsilo: error: --log: got 'wandb'; allowed: tensorboard"
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if the tracking extra were not installed
    assert main([*args, "--log", "tensorboard"]) == EXIT_USER_ERROR
    assert 'pip install -e ".[tracking]"' in _error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_attack_refuses_an_out_holding_a_finished_attack(tmp_path, capsys):
    from privsilo.simulator.run_dir.writers import atomic_directory

    out = tmp_path / "attacked"
    with atomic_directory(out, kind="attack") as staging:  # as privsilo attack writes it
        (staging / "attack.json").write_text("{}\n")
    assert main(["attack", str(QUICKSTART), "--out", str(out), "--no-progress"]) == EXIT_USER_ERROR
    line = _error_line(capsys)
    assert "--out" in line and str(out) in line and "attack.json" in line and "--overwrite" in line
    assert (out / "attack.json").read_text() == "{}\n"


def test_interrupted_default_sweep_resumes_and_its_finished_out_is_refused(ray_local, tmp_path, monkeypatch, capsys):
    grid_path = write_grid(tmp_path, seeds=[0])  # 2 runs
    monkeypatch.chdir(tmp_path)
    real_run, calls = privsilo.simulator.engine.run, []

    def interrupted_at_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_run(*args, **kwargs)

    monkeypatch.setattr(privsilo.simulator.engine, "run", interrupted_at_the_second)
    assert main(["sweep", str(grid_path), "--no-progress"]) == EXIT_INTERRUPTED
    (journal,) = (tmp_path / "runs" / "tiny").iterdir()  # the journal alone: the empty directory was removed
    assert journal.name.endswith(".unfinished") and STAMP.fullmatch(journal.name.removesuffix(".unfinished"))

    capsys.readouterr()
    assert main(["sweep", str(grid_path), "--no-progress"]) == 0
    assert "1 taken from the unfinished sweep's journal" in capsys.readouterr().out
    out = journal.with_name(journal.name.removesuffix(".unfinished"))
    assert sorted(p.name for p in (tmp_path / "runs" / "tiny").iterdir()) == [out.name]
    assert (out / "runs.csv").is_file() and len(calls) == 3

    assert main(["sweep", str(grid_path), "--out", str(out), "--no-progress"]) == EXIT_USER_ERROR
    line = _error_line(capsys)
    assert "--out" in line and str(out) in line and "runs.csv" in line


@pytest.mark.slow
def test_regression_result_line_shows_the_test_mse(ray_local, tmp_path, capsys):
    out = tmp_path / "regression"
    overrides = ["--set", "federation.rounds=2", "--set", "resources.silos_per_actor=25"]  # 4 workers for 100 silos
    assert main(["run", str(SYNTHETIC_LINEAR), *overrides, "--out", str(out), "--no-progress"]) == 0
    (line,) = [text for text in capsys.readouterr().out.splitlines() if text.startswith("synthetic_linear_dprivacy:")]
    loss = json.loads((out / "summary.json").read_text())["final"]["loss"]
    assert math.isfinite(loss)
    assert line.startswith(f"synthetic_linear_dprivacy: 2 rounds, test MSE {loss:.4f}; ")
    assert "accuracy" not in line and "nan" not in line
