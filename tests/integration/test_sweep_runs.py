"""Sweeps run through Ray: tables, plots and seeds, and resuming from the journal (grids and their checks without
Ray: tests/unit/simulator/experiments/test_sweep.py)."""
from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path

import pytest

from privsilo.simulator.engine import run
from privsilo.simulator.experiments.sweep import load_grid, sweep
from tests.support.grids import write_grid


OUTPUT_FILES = ("runs.csv", "table.csv", "table.md", "comparison.png", "epsilon_curve.png", "budget_vs_spent.png",
                "curves.csv", "accuracy_per_round.png")


@pytest.fixture(scope="module")
def whole_sweep(ray_local, tmp_path_factory):
    """The tiny grid swept once (4 runs) for every test that needs a finished sweep: (grid path, result, progress
    bar text)."""
    directory = tmp_path_factory.mktemp("whole_sweep")
    grid_path = write_grid(directory)
    progress = io.StringIO()
    with contextlib.redirect_stderr(progress):
        result = sweep(grid_path, out_dir=directory / "out", progress=True)
    return grid_path, result, progress.getvalue()


def test_sweep_writes_tables_and_plots_and_honours_seeds(whole_sweep):
    grid_path, result, progress = whole_sweep
    tmp_path = grid_path.parent
    for labels in ("ThreeLevels / rPDP, seed 0", "ThreeLevels / rPDP, seed 1", "ThreeLevels / Minimum, seed 1"):
        assert labels in progress  # the progress bar names the run in progress
    for name in OUTPUT_FILES:
        assert (tmp_path / "out" / name).stat().st_size > 0, name
    with (tmp_path / "out" / "runs.csv").open() as handle:
        runs = list(csv.DictReader(handle))
    assert len(runs) == 4 and {r["seed"] for r in runs} == {"0", "1"}
    with (tmp_path / "out" / "table.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert [r["mechanism.variant"] for r in table] == ["rPDP", "Minimum"]
    assert {"accuracy_mean", "accuracy_std", "seeds", "epsilon_mean"} <= set(table[0])
    assert all(r["seeds"] == "2" for r in table)
    assert "±" in (tmp_path / "out" / "table.md").read_text()

    grid = load_grid(grid_path)
    labels = {"mechanism.budgets": "ThreeLevels", "mechanism.variant": "rPDP"}
    direct = run(grid.scenario(labels, 1))
    swept = next(r for r in result.runs if r.labels == labels and r.seed == 1)
    assert swept.accuracy == direct.final["accuracy"]
    assert swept.epsilon == direct.privacy["epsilon"]
    assert swept.accuracy_per_round == tuple(record.report.accuracy for record in direct.rounds)
    with (tmp_path / "out" / "curves.csv").open() as handle:
        curves = [r for r in csv.DictReader(handle) if r["mechanism.variant"] == "rPDP" and r["seed"] == "1"]
    assert [float(r["accuracy"]) for r in curves] == list(swept.accuracy_per_round) and [r["round"] for r in curves] == ["1", "2"]


def _runs_without_timing(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return [{k: v for k, v in row.items() if k != "seconds"} for row in csv.DictReader(handle)]


def test_interrupted_sweep_resumes_from_its_journal(whole_sweep, tmp_path, monkeypatch):
    import privsilo.simulator.engine

    grid_path, whole, _ = whole_sweep
    real_run, calls = privsilo.simulator.engine.run, []

    def interrupted_after_two(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_run(*args, **kwargs)

    monkeypatch.setattr(privsilo.simulator.engine, "run", interrupted_after_two)
    with pytest.raises(KeyboardInterrupt):
        sweep(grid_path, out_dir=tmp_path / "resumed")
    assert not (tmp_path / "resumed").exists()
    assert len((tmp_path / "resumed.unfinished" / "runs.jsonl").read_text().splitlines()) == 2

    calls.clear()
    result = sweep(grid_path, out_dir=tmp_path / "resumed")
    assert len(calls) == 2 and result.resumed == 2
    assert not (tmp_path / "resumed.unfinished").exists()
    for name in OUTPUT_FILES:
        assert (tmp_path / "resumed" / name).stat().st_size > 0, name
    assert _runs_without_timing(tmp_path / "resumed" / "runs.csv") == _runs_without_timing(whole.out_dir / "runs.csv")
