"""summary.json names the data-dependent quantities each guarantee treats as public (issue 14, item 4)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from privsilo.mechanisms.dp_sgd import RECORD_COUNTS_PUBLIC
from privsilo.mechanisms.rpdp.estimator import SamplingProbabilityEstimator
from privsilo.mechanisms.rpdp.mechanism import Rpdp, RpdpParams, _planned_rates
from privsilo.simulator.engine import run
from tests.support.scenarios import small_scenario

BUDGETS = "per-record budgets"


def _summary(tmp_path, mechanism: dict) -> dict:
    scenario = small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 2},
        federation={"rounds": 1, "client_rate": 1.0, "local_steps": 1, "batch_size": 16, "lr": 0.1},
        mechanism=mechanism,
    )
    run(scenario, out_dir=tmp_path / "run")
    return json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]


def _assert_declares(public: list[str] | tuple[str, ...], needles: list[str]) -> None:
    assert len(public) == len(needles)
    for declared, needle in zip(public, needles):
        assert needle in declared


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"variant": "rpdp"}, [BUDGETS]),
        ({"variant": "minimum"}, [BUDGETS, "smallest budget"]),
        ({"variant": "dropout"}, [BUDGETS, "mean budget"]),
        ({"variant": "rpdp", "normalization": "expected_batch"}, [BUDGETS, "expected batch size"]),
        ({"variant": "dropout", "normalization": "expected_batch"}, [BUDGETS, "mean budget", "expected batch size"]),
        ({"variant": "privacy_free"}, []),
    ],
)
def test_each_rpdp_variant_declares_what_its_rates_and_divisor_depend_on(params, expected):
    _assert_declares(Rpdp(RpdpParams(**params)).assumed_public(), expected)


@pytest.mark.parametrize(
    ("mechanism", "expected"),
    [({"name": "dp_sgd"}, [RECORD_COUNTS_PUBLIC]), ({"name": "rpdp", "variant": "dropout"}, [BUDGETS, "mean budget"])],
    ids=["dp_sgd", "rpdp-dropout"],
)
def test_summary_lists_what_the_guarantee_treats_as_public(ray_local, tmp_path, mechanism, expected):
    _assert_declares(_summary(tmp_path, mechanism)["assumed_public"], expected)


def test_without_a_guarantee_nothing_is_declared(ray_local, tmp_path):
    privacy = _summary(tmp_path, {"name": "rpdp", "variant": "privacy_free"})
    assert privacy["guarantee"] == "none" and "assumed_public" not in privacy


def test_why_dropout_declares_the_mean_budget_public_one_record_changes_the_others_rates():
    """The paper's Dropout rate is set by the silo's mean budget: adding one budget-5 record stops three others."""
    estimator = SamplingProbabilityEstimator(
        noise_multiplier=1.0, rounds=5, local_steps=5, client_rate=1.0, delta=1e-3, conversion="opacus"
    )
    budgets = np.array([1.0, 1.0, 1.0, 1.2, 1.2, 1.2])
    before = _planned_rates("dropout", budgets, estimator)
    after = _planned_rates("dropout", np.append(budgets, 5.0), estimator)[:-1]
    assert (before[3:] > 0).all() and (after[3:] == 0).all()
