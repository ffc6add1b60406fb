"""``uldp`` with ``weighting: private`` through real Ray actors on Fed-Heart-Disease, and the scenario checks
(exit 2 naming the field) for the private weighting protocol."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from privsilo.mechanisms.base import LocalTraining, PrivacyBudgetError, SiloContext
from privsilo.mechanisms.uldp.mechanism import Uldp
from privsilo.mechanisms.uldp.params import UldpParams
from privsilo.mechanisms.uldp.silo import PerUserSilo
from privsilo.protocols.private_weighting.layout import precision_bound
from privsilo.simulator.engine import run
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.models.builtin import build_model
from privsilo.simulator.scenario import validate_scenario

SILOS, USERS, CLIP, GLOBAL_LR = 4, 12, 0.5, 2.0


def _scenario(heart_disease_dir, **mechanism) -> dict:
    return {
        "name": "pwp_e2e",
        "seed": 11,
        "data": {"dataset": "heart_disease", "partition": "natural", "silos": SILOS, "path": str(heart_disease_dir),
                 "users": {"count": USERS, "records": "zipf", "silos": "zipf"}},
        "model": {"name": "logistic_regression"},
        "federation": {"rounds": 1, "local_steps": 3, "batch_size": 16, "lr": 0.05},
        "mechanism": {"name": "uldp", "variant": "avg_w", "noise_multiplier": 1.0, "max_grad_norm": CLIP,
                      "global_lr": GLOBAL_LR, **mechanism},
        "protocol": {"secure_aggregation": True},
        "resources": {"server": {"num_cpus": 0.25}, "silo": {"num_cpus": 0.25, "num_gpus": 0}},
    }


@pytest.mark.slow
def test_a_private_round_equals_the_plain_round_within_the_bound(ray_local, heart_disease_dir) -> None:
    """Same seed, same noise: the models after one round differ by at most eta_g / (|U| |S|) times the protocol's
    precision bound plus secure aggregation's rounding in the plain run (|S| 2^-25)."""
    plain = run(_scenario(heart_disease_dir, weighting="plain"))
    private = run(_scenario(heart_disease_dir, weighting="private", paillier_key_bits=2048, max_records_per_user=1000))
    bound = precision_bound(users=USERS, pairs=USERS * SILOS, num_silos=SILOS, fractional_bits=24, max_abs_delta=CLIP,
                            noise_abs_sum=100.0) + SILOS * 2.0**-25
    difference = max(float((private.model_state[k] - plain.model_state[k]).abs().max()) for k in plain.model_state)
    assert difference <= GLOBAL_LR / (USERS * SILOS) * bound + 1e-12
    assert private.privacy["epsilon"] == pytest.approx(plain.privacy["epsilon"], rel=1e-12)
    timing = private.timing
    for key in ("protocol_setup_silo_seconds", "protocol_setup_server_seconds", "protocol_round_silo_seconds",
                "protocol_round_server_seconds"):
        assert timing[key] > 0
    assert timing["protocol_setup_silo_seconds"] + timing["protocol_setup_server_seconds"] <= timing["protocol_setup_seconds"]
    assert np.isfinite(private.final["accuracy"])


@pytest.mark.parametrize(
    ("mechanism", "field"),
    [
        ({"variant": "avg", "weighting": "private"}, "mechanism.weighting"),
        ({"weighting": "private", "paillier_key_bits": 1024}, "mechanism.paillier_key_bits"),
        ({"weighting": "private", "paillier_key_bits": 2048}, "mechanism.paillier_key_bits"),
        ({"weighting": "private", "max_records_per_user": 2100}, "mechanism.max_records_per_user"),
    ],
)
def test_bad_private_weighting_settings_name_the_field(mechanism, field) -> None:
    raw = {"data": {"dataset": "digits", "users": {"count": 20}}, "protocol": {"secure_aggregation": True},
           "mechanism": {"name": "uldp", **mechanism}}
    with pytest.raises(ScenarioError) as caught:
        validate_scenario(raw)
    assert caught.value.field == field


def test_a_user_beyond_max_records_per_user_is_refused_in_one_line() -> None:
    """The simulator sees every silo, so it checks N_u <= N_max before the protocol starts (a PrivacyBudgetError,
    which a run reports as one line, exit 2); the protocol's server would only notice at the weight conversion."""
    histogram = np.array([[3, 0, 1], [4, 2, 0]])
    user_ids = np.repeat(np.arange(3), histogram[0])
    model = build_model("logistic_regression", feature_shape=(4,), num_classes=2)
    context = SiloContext(
        silo_id=0, record_ids=np.arange(len(user_ids)), features=torch.zeros(len(user_ids), 4),
        labels=torch.zeros(len(user_ids), dtype=torch.long), model=model,
        training=LocalTraining(local_steps=1, batch_size=4, lr=0.1, rounds=1, client_rate=1.0),
        generator=torch.Generator().manual_seed(0), device=torch.device("cpu"), user_ids=user_ids, user_histogram=histogram,
    )
    params = UldpParams(weighting="private", max_records_per_user=6)
    with pytest.raises(PrivacyBudgetError, match=r"^mechanism\.max_records_per_user: got 6; a user has 7 records"):
        PerUserSilo(context, params)
    PerUserSilo(context, UldpParams(weighting="private", max_records_per_user=7))
    assert any("N_u = 0" in item for item in Uldp(params).assumed_public())
    assert not any("N_u = 0" in item for item in Uldp(UldpParams()).assumed_public())


def test_the_silo_sizes_its_tables_for_the_scenarios_rounds() -> None:
    """``Uldp.silo_protocol`` hands ``federation.rounds`` to the protocol's silo, whose table plan depends on it."""
    histogram = np.array([[3, 0, 1], [4, 2, 0]])
    model = build_model("logistic_regression", feature_shape=(4,), num_classes=2)
    for rounds in (1, 400):
        context = SiloContext(
            silo_id=0, record_ids=np.arange(4), features=torch.zeros(4, 4), labels=torch.zeros(4, dtype=torch.long),
            model=model, training=LocalTraining(local_steps=1, batch_size=4, lr=0.1, rounds=rounds, client_rate=1.0),
            generator=torch.Generator().manual_seed(0), device=torch.device("cpu"), user_ids=np.array([0, 0, 0, 2]),
            user_histogram=histogram,
        )
        silo = Uldp(UldpParams(weighting="private")).silo_protocol(context, fractional_bits=24, min_participants=2)
        assert silo.planned_rounds == rounds

