"""``pldp`` end to end through real Ray actors (digits, 3 clients, 2 rounds): the honest account in summary.json
counts every participation, and secure aggregation carries the perturbed uploads to the same model."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from privsilo.simulator.engine import run
from tests.support.scenarios import small_scenario

D = 64 * 10 + 10  # logistic regression on 8x8 digits
BUDGETS = [0.2, 0.5, 1.0]


def _scenario(*, secure: bool) -> dict:
    return small_scenario(
        federation={"rounds": 2, "client_rate": 0.7, "local_steps": 3, "batch_size": 16, "lr": 0.1},
        mechanism={"name": "pldp", "ranges": "tau1", "budgets": BUDGETS, "centers": [0.0, 0.1, -0.1]},
        protocol={"secure_aggregation": secure, "min_participants": 2},
    )


def test_summary_reports_both_figures_per_client_and_secure_aggregation_gives_the_same_model(ray_local, tmp_path) -> None:
    plain = run(_scenario(secure=False), out_dir=tmp_path / "plain")
    secure = run(_scenario(secure=True), out_dir=tmp_path / "secure")
    privacy = json.loads((tmp_path / "plain" / "summary.json").read_text())["privacy"]
    participations = [r.report.participants for r in plain.rounds]
    for client, eps in enumerate(BUDGETS):
        uploads = sum(client in p for p in participations)
        assert privacy["uploads"][str(client)] == uploads
        assert privacy["epsilon_per_coordinate"][str(client)] == eps
        assert privacy["epsilon_per_client"][str(client)] == pytest.approx(uploads * D * eps, rel=1e-12)
    assert privacy["epsilon"] == max(privacy["epsilon_per_client"].values()) > 0
    assert (tmp_path / "plain" / "epsilon_per_client.png").is_file()
    assert [r.report.participants for r in secure.rounds] == participations
    assert secure.privacy["epsilon_per_client"] == plain.privacy["epsilon_per_client"]
    for name, value in plain.model_state.items():  # same perturbed uploads, summed in fixed point (2^-24)
        assert torch.allclose(secure.model_state[name], value, rtol=0, atol=1e-5), name
    assert np.isfinite(plain.final["accuracy"])
