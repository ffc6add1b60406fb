"""``privsilo sweep``: a tiny rPDP grid on digits writes every file, honours seeds, and bad grids exit 2."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from simulator.cli import EXIT_USER_ERROR, main
from simulator.engine import run
from simulator.errors import ScenarioError
from simulator.sweep import load_grid, sweep
from tests.conftest import REPO, small_scenario

OUTPUT_FILES = ("runs.csv", "table.csv", "table.md", "comparison.png", "epsilon_curve.png", "budget_vs_spent.png")


def _write_grid(directory: Path, **changes) -> Path:
    base = small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 2},
        federation={"rounds": 2, "client_rate": 1.0, "local_steps": 2, "batch_size": 32, "lr": 0.1},
        mechanism={"name": "rpdp"},
    )
    (directory / "base.yaml").write_text(yaml.safe_dump(base))
    grid = {
        "name": "tiny",
        "base": "base.yaml",
        "seeds": [0, 1],
        "axes": {
            "mechanism.budgets": {"ThreeLevels": {"distribution": "three_levels"}},
            "mechanism.variant": {"rPDP": "rpdp", "Minimum": "minimum"},
        },
        **changes,
    }
    path = directory / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def test_sweep_writes_tables_and_plots_and_honours_seeds(ray_local, tmp_path):
    grid_path = _write_grid(tmp_path)
    result = sweep(grid_path, out_dir=tmp_path / "out")
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


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"base": "missing.yaml"}, "grid.base"),
        ({"axes": {"mechanism.variant": {}}}, "grid.axes.mechanism.variant"),
        ({"axes": {"federation.roundz": {"a": 1}}}, "federation.roundz"),
        ({"axes": {"mechanism.variant": {"bad": "nope"}}}, "mechanism.variant"),
    ],
)
def test_bad_grid_exits_2_naming_the_field(tmp_path, capsys, changes, field):
    grid_path = _write_grid(tmp_path, **changes)
    with pytest.raises(ScenarioError):  # every combination is checked before Ray starts
        sweep(grid_path, out_dir=tmp_path / "out")
    assert main(["sweep", str(grid_path), "--out", str(tmp_path / "out")]) == EXIT_USER_ERROR
    message = capsys.readouterr().err.strip()
    assert message.startswith(f"privsilo: error: {field}:") and "\n" not in message
    assert not (tmp_path / "out").exists()


def test_shipped_grids_load_and_every_combination_validates():
    grids = sorted((REPO / "scenarios").rglob("*_grid.yaml"))
    assert len(grids) == 3
    for path in grids:
        grid = load_grid(path)
        scenarios = [grid.scenario(labels, seed) for labels in grid.combinations() for seed in grid.seeds]
        assert len(scenarios) == 12 * len(grid.seeds)
