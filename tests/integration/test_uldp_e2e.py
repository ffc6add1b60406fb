"""``uldp`` end to end through real Ray actors on Fed-Heart-Disease (4 hospitals, users split inside them):
the reported user-level epsilon equals ``privsilo.mechanisms.uldp.epsilon`` for the realised settings."""
from __future__ import annotations

import json

import numpy as np
import pytest

import privsilo.mechanisms.uldp as uldp
from privsilo.simulator.engine import run

ROUNDS, LOCAL_STEPS, BATCH = 2, 2, 16


def _scenario(heart_disease_dir, **mechanism) -> dict:
    return {
        "name": "uldp_e2e",
        "seed": 3,
        "data": {"dataset": "heart_disease", "partition": "natural", "silos": 4, "path": str(heart_disease_dir),
                 "users": {"count": 50, "records": "zipf", "silos": "zipf"}},
        "model": {"name": "logistic_regression"},
        "federation": {"rounds": ROUNDS, "local_steps": LOCAL_STEPS, "batch_size": BATCH, "lr": 0.01},
        "mechanism": {"name": "uldp", "noise_multiplier": 5.0, "max_grad_norm": 0.5, "delta": 1e-5, **mechanism},
        "protocol": {"secure_aggregation": True},  # avg, avg_w and sgd split their noise across silos
        # The shape the sweep tests before these leave idle (0.5 CPU; resources only place actors): fewer new workers.
        "resources": {"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}},
    }


@pytest.mark.parametrize(("variant", "user_rate"), [("naive", 1.0), ("avg", 1.0), ("avg_w", 0.5), ("sgd", 1.0)])
def test_user_level_variants_report_the_accountants_epsilon(ray_local, heart_disease_dir, tmp_path, variant, user_rate) -> None:
    run(_scenario(heart_disease_dir, variant=variant, user_rate=user_rate), out_dir=tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    privacy = summary["privacy"]
    want = uldp.epsilon(variant=variant, noise_multiplier=5.0, rounds=ROUNDS, delta=1e-5, user_rate=user_rate)
    assert privacy["epsilon"] == pytest.approx(want, rel=1e-12)
    assert privacy["variant"] == variant and privacy["rounds_accounted"] == ROUNDS
    if user_rate < 1.0:  # the server and silos know the sample: their view is the unamplified composition
        assert privacy["epsilon_without_sampling"] == pytest.approx(
            uldp.epsilon(variant=variant, noise_multiplier=5.0, rounds=ROUNDS, delta=1e-5), rel=1e-12
        )
        assert "third party" in privacy["guarantee"]
    users = summary["users"]
    assert users["count"] == 50 and users["users_with_records"] + users["dropped_users"] == 50
    assert len(users["users_per_silo"]) == 4
    assert "users_sampled_per_round" not in privacy  # the sample's sizes would condition the amplified epsilon
    assert np.isfinite(summary["final"]["accuracy"])


def test_group_k_from_the_data_reports_no_epsilon(ray_local, heart_disease_dir, tmp_path) -> None:
    """k = max depends on every user (and never truncates), so no group size covers all neighbours: the paper's
    figure is kept apart and epsilon is null."""
    run(_scenario(heart_disease_dir, variant="group", group_k="max", noise_multiplier=1.0), out_dir=tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    privacy = summary["privacy"]
    k = summary["users"]["records_per_user"]["max"]
    assert privacy["group_k"] == k and privacy["group_size_accounted"] == 2 ** int(np.ceil(np.log2(k)))
    want = uldp.epsilon(variant="group", noise_multiplier=1.0, rounds=ROUNDS, delta=1e-5, group_k=k,
                        sampling_rate=privacy["record_sampling_rate_max"], local_steps=LOCAL_STEPS)
    assert privacy["epsilon"] is None and privacy["guarantee"].startswith("not covered")
    assert privacy["paper_epsilon"] == pytest.approx(want, rel=1e-12)
    # k = max keeps every record: the busiest silo's rate is the batch over its record count
    smallest_silo = min(p["records"] for p in summary["placement"])
    assert privacy["record_sampling_rate_max"] == pytest.approx(min(1.0, BATCH / smallest_silo))


def test_group_with_a_public_k_reports_group_privacy(ray_local, heart_disease_dir, tmp_path) -> None:
    run(_scenario(heart_disease_dir, variant="group", group_k=3, noise_multiplier=1.0), out_dir=tmp_path / "out")
    privacy = json.loads((tmp_path / "out" / "summary.json").read_text())["privacy"]
    assert privacy["group_k"] == 3 and privacy["group_size_accounted"] == 4
    want = uldp.epsilon(variant="group", noise_multiplier=1.0, rounds=ROUNDS, delta=1e-5, group_k=3,
                        sampling_rate=privacy["record_sampling_rate_max"], local_steps=LOCAL_STEPS)
    assert privacy["epsilon"] == pytest.approx(want, rel=1e-12)
    assert any("k-per-user" in item for item in privacy["assumed_public"])
