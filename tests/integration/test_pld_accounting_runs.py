"""A DP-SGD run through Ray reports the PLD epsilon beside the RDP one (the accountant itself:
tests/unit/mechanisms/test_pld_accounting.py)."""
from __future__ import annotations

import json

from tests.support.scenarios import small_scenario


def test_dp_sgd_run_reports_pld_beside_rdp(ray_local, tmp_path):
    from privsilo.simulator.engine import run
    from privsilo.simulator.run_dir.writers import privacy_line

    scenario = small_scenario(
        federation={"rounds": 2, "client_rate": 1.0, "local_steps": 5, "batch_size": 32, "lr": 0.1},
        mechanism={"name": "dp_sgd", "noise_multiplier": 1.0, "accountant": "pld"},
    )
    result = run(scenario, out_dir=tmp_path / "run")
    privacy = json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]
    assert privacy["accountant"] == "pld"
    assert privacy["epsilon"] == privacy["epsilon_pld"] <= privacy["epsilon_rdp"]
    assert privacy["epsilon_per_silo"] == privacy["epsilon_per_silo_pld"]
    assert all(privacy["epsilon_per_silo_pld"][silo] <= privacy["epsilon_per_silo_rdp"][silo] for silo in ("0", "1", "2"))
    assert result.rounds[-1].epsilon == privacy["epsilon"]  # metrics.csv's epsilon is the chosen accountant's
    assert privacy_line(privacy, mechanism="dp_sgd").endswith(f"(PLD accountant; RDP gives {privacy['epsilon_rdp']:.4g})")
