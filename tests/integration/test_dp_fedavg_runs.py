"""DP-FedAvg through Ray: the run's reported epsilon is the accountant's, and a client-level audit stays below the
claim (the unit side: tests/unit/mechanisms/dp_fedavg/test_dp_fedavg.py)."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import yaml

from privsilo.simulator.audit.runner import audit
from privsilo.simulator.engine import run
from tests.support.dp_fedavg import DELTA, client_level_accountant
from tests.support.paths import REPO


@pytest.mark.parametrize("clipping", [{}, {"clipping": "adaptive", "clipped_count_stddev": 1.0}], ids=["fixed", "adaptive"])
def test_run_through_ray_reports_the_accountants_epsilon(ray_local, tmp_path, clipping) -> None:
    """Adaptive clipping is accounted at the same z: the count's noise is inside it (Andrew et al.)."""
    scenario = {
        "name": "dp_fedavg_e2e", "seed": 0,
        "data": {"dataset": "digits", "partition": "iid", "silos": 6},
        "model": {"name": "logistic_regression"},
        "federation": {"rounds": 3, "client_rate": 0.5, "local_steps": 2, "batch_size": 16, "lr": 0.1},
        "mechanism": {"name": "dp_fedavg", "noise_multiplier": 1.5, "clip_norm": 1.0, "delta": DELTA, **clipping},
        "resources": {"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}},
    }
    run(scenario, out_dir=tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    privacy = summary["privacy"]
    assert privacy["rounds_accounted"] == 3  # every round held, whoever was sampled
    assert privacy["epsilon"] == pytest.approx(client_level_accountant(0.5, 1.5, 3).report()["epsilon"], rel=1e-12)
    with open(tmp_path / "out" / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 and all(row["train_loss"] == "" for row in rows)  # not privatised: never written
    assert privacy["guarantee"].startswith("client-level")
    assert any("number of silos" in item for item in privacy["assumed_public"])
    assert np.isfinite(summary["final"]["accuracy"])


def test_client_level_audit_bound_is_positive_and_below_the_claim(ray_local) -> None:
    """The shipped audit at a smaller size (three silos, 300 canaries, logistic regression)."""
    report = audit(REPO / "scenarios" / "audits" / "dp_fedavg_digits.yaml",
                   overrides=["model.name=logistic_regression", "audit.canaries=300", "data.silos=3"])
    assert 0.0 < report.lower_bound < report.claims["claimed_epsilon"]
    written = report.to_json()
    assert written["unit"] == "client"
    scenario = yaml.safe_load((REPO / "scenarios" / "audits" / "dp_fedavg_digits.yaml").read_text())
    rounds, z = scenario["federation"]["rounds"], scenario["mechanism"]["noise_multiplier"]
    assert written["gdp_mu_star"] == pytest.approx(rounds**0.5 / z, rel=1e-6)  # rate 1: exactly sqrt(T) / z
