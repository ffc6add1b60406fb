"""The ``uldp`` sweep plots (the mechanism's ``sweep_plotter`` hook): accuracy per round by variant and epsilon
per round, from the per-round curves a sweep keeps for every run."""
from __future__ import annotations

import csv

import numpy as np
import pytest
import yaml
from matplotlib.image import imread

import privsilo.mechanisms.uldp as uldp
from privsilo.mechanisms.uldp.plots import curve_stats, group_runs, plot_sweep
from privsilo.simulator.experiments.sweep import SweepRun, sweep
from tests.support.scenarios import small_scenario

AXES = ["data.users.count", "mechanism.variant"]


def _run(users: str, variant: str, seed: int, accuracy: list[float], epsilon: list[float | None]) -> SweepRun:
    return SweepRun({"data.users.count": users, "mechanism.variant": variant}, seed, accuracy[-1], 1.0, epsilon[-1], None, 1.0,
                    accuracy_per_round=tuple(accuracy), epsilon_per_round=tuple(epsilon))


def test_one_panel_per_other_axis_one_line_per_variant_mean_and_std_over_seeds(tmp_path) -> None:
    runs = [
        _run("U50", "AVG", 0, [0.5, 0.6], [1.0, 2.0]),
        _run("U50", "AVG", 1, [0.7, 0.8], [1.0, 2.0]),
        _run("U50", "GROUP-median", 0, [0.4, 0.5], [None, None]),
        _run("U200", "AVG", 0, [0.6, 0.7], [1.0, 2.0]),
    ]
    panels = group_runs(runs, axes=AXES)
    assert list(panels) == ["U50", "U200"] and list(panels["U50"]) == ["AVG", "GROUP-median"]
    mean, std = curve_stats(panels["U50"]["AVG"], "accuracy_per_round")
    np.testing.assert_allclose(mean, [0.6, 0.7])
    np.testing.assert_allclose(std, [0.1, 0.1])
    assert curve_stats(panels["U200"]["AVG"], "accuracy_per_round")[1] is None  # one seed: no spread
    assert np.isnan(curve_stats(panels["U50"]["GROUP-median"], "epsilon_per_round")[0]).all()
    without_variant = group_runs(runs, axes=["data.users.count"])
    assert list(without_variant) == ["all runs"] and list(without_variant["all runs"]) == ["U50", "U200"]
    plot_sweep(runs, axes=AXES, title="t", out_dir=tmp_path)
    for name in ("accuracy_per_round.png", "epsilon_per_round.png"):
        assert imread(tmp_path / name).shape[1] > 800  # two panels side by side
    with (tmp_path / "per_round.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 8 and rows[2] == {"data.users.count": "U50", "mechanism.variant": "AVG", "seed": "1", "round": "1",
                                          "accuracy": "0.7", "epsilon": "1.0"}
    assert rows[4]["epsilon"] == ""  # GROUP-median: no epsilon


def test_a_uldp_sweep_keeps_every_runs_curves_and_draws_them(ray_local, tmp_path) -> None:
    """Through the real sweep: 2 variants x 1 seed x 2 rounds on digits."""
    base = small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 2, "users": {"count": 30, "records": "zipf", "silos": "zipf"}},
        federation={"rounds": 2, "client_rate": 1.0, "local_steps": 2, "batch_size": 32, "lr": 0.1},
        mechanism={"name": "uldp", "variant": "naive", "noise_multiplier": 5.0, "max_grad_norm": 0.1},
    )
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    variants = {"NAIVE": {"mechanism.variant": "naive"}, "GROUP-max": {"mechanism.variant": "group", "mechanism.group_k": "max"}}
    grid = {"name": "tiny_uldp", "base": "base.yaml", "seeds": [0], "axes": {"variant": variants}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid, sort_keys=False))
    result = sweep(tmp_path / "grid.yaml", out_dir=tmp_path / "out")
    naive, group = result.runs
    assert naive.epsilon_per_round == pytest.approx(
        [uldp.epsilon(variant="naive", noise_multiplier=5.0, rounds=r, delta=1e-5) for r in (1, 2)], rel=1e-12
    )
    assert group.epsilon_per_round == (None, None)  # k from the data: no epsilon
    assert len(naive.accuracy_per_round) == 2 and naive.accuracy_per_round[-1] == naive.accuracy
    for name in ("accuracy_per_round.png", "epsilon_per_round.png", "per_round.csv"):
        assert (tmp_path / "out" / name).is_file()
