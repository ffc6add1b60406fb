"""What a run reports, end to end through real Ray actors: every silo in ``epsilon_per_silo``, timings that add
up, and no epsilon where no accountant covers the mechanism (CLI line and sweep table)."""
from __future__ import annotations

import csv
import json

import pytest
import yaml

from privsilo.simulator.cli import main
from privsilo.simulator.engine import run
from privsilo.simulator.experiments.sweep import sweep
from tests.support.scenarios import small_scenario

DP_SGD = {"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5}


def test_dp_sgd_reports_silos_never_sampled_and_timings_that_add_up(ray_local, tmp_path):
    scenario = small_scenario(
        seed=10, mechanism=DP_SGD,
        federation={"rounds": 3, "client_rate": 0.4, "local_steps": 3, "batch_size": 16, "lr": 0.1},
    )
    result = run(scenario, out_dir=tmp_path / "out")
    sampled = {silo for record in result.rounds for silo in record.report.participants}
    assert sampled == {0, 1}  # seed 10: silo 2 is never sampled
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    per_silo = summary["privacy"]["epsilon_per_silo"]
    assert per_silo["2"] == 0.0 and set(per_silo) == {"0", "1", "2"}
    assert summary["privacy"]["epsilon"] == max(per_silo.values()) > 0

    timing = summary["timing"]
    parts = (timing["data_seconds"] + timing["workers_seconds"] + timing["protocol_setup_seconds"] + timing["rounds_seconds"]
             + timing["other_seconds"])
    assert 0 <= timing["silo_construction_seconds"] <= timing["workers_seconds"]
    assert parts == pytest.approx(timing["total_seconds"], rel=1e-12)
    assert timing["rounds_seconds"] == pytest.approx(timing["training_seconds"] + timing["accounting_seconds"], rel=1e-12)
    assert min(timing.values()) >= 0 and timing["accounting_seconds"] > 0
    with (tmp_path / "out" / "metrics.csv").open() as handle:
        wall = [float(row["wall_seconds"]) for row in csv.DictReader(handle)]
    assert sum(wall) == pytest.approx(timing["rounds_seconds"], abs=len(wall) * 5e-5)  # 4 decimals per row
    assert (tmp_path / "out" / "privacy.png").is_file()


def test_expected_batch_normalisation_prints_no_epsilon(ray_local, tmp_path, capsys):
    """No accountant covers the paper's data-dependent divisor: the CLI line and a sweep's table claim no epsilon."""
    base = small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 2},
        federation={"rounds": 1, "client_rate": 1.0, "local_steps": 2, "batch_size": 32, "lr": 0.1},
        mechanism={"name": "rpdp", "normalization": "expected_batch"},
    )
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    assert main(["run", str(tmp_path / "base.yaml"), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "epsilon =" not in line and "not covered: expected_batch normalisation" in line
    privacy = json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]
    assert privacy["epsilon"] is None and privacy["paper_accounting"]["epsilon"] > 0
    assert not (tmp_path / "run" / "privacy.png").exists()

    grid = {"name": "paper", "base": "base.yaml", "seeds": [0], "axes": {"mechanism.normalization": {"Paper": "expected_batch", "Public": "public"}}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    sweep(tmp_path / "grid.yaml", out_dir=tmp_path / "sweep")
    rows = (tmp_path / "sweep" / "table.md").read_text().splitlines()
    assert rows[2].startswith("| Paper |") and rows[2].endswith("| 1 | - |")
    assert rows[3].startswith("| Public |") and not rows[3].endswith("| - |")
