"""Injected faults without Ray: the random crash plan follows the seed, and a bad ``faults`` block names its field
(the crashes themselves, in real worker processes: tests/system/test_failures_crashes.py)."""
from __future__ import annotations

import numpy as np
import pytest

from privsilo.simulator.engine.faults import CRASH_POINTS, crash_plan
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from tests.support.scenarios import small_scenario


def test_random_failures_follow_the_seed():
    faults = validate_scenario(small_scenario(faults={"silo_failure_rate": 0.3})).faults
    plans = [crash_plan(faults, seed=seed, num_silos=5, rounds=20).crashes for seed in (0, 0, 1)]
    assert plans[0] == plans[1] != plans[2]
    rate = np.mean([len(crash_plan(faults, seed=s, num_silos=5, rounds=20).crashes) / 100 for s in range(20)])
    assert 0.25 < rate < 0.35
    assert {at for plan in plans for at in plan.values()} == set(CRASH_POINTS)


@pytest.mark.parametrize(
    ("faults", "field"),
    [
        ({"crashes": [{"silo": 4, "round": 1, "at": "setup"}]}, "faults.crashes[0].silo"),
        ({"crashes": [{"silo": 0, "round": 4, "at": "setup"}]}, "faults.crashes[0].round"),
        ({"crashes": [{"silo": 0, "round": 0, "at": "setup"}]}, "faults.crashes[0].round"),
        ({"crashes": [{"silo": 0, "round": 1, "at": "later"}]}, "faults.crashes[0].at"),
        ({"crashes": [{"silo": 0, "round": 1, "at": "setup"}, {"silo": 0, "round": 1, "at": "after_upload"}]}, "faults.crashes[1]"),
        ({"silo_failure_rate": 1.0}, "faults.silo_failure_rate"),
        ({"silo_failure_rate": -0.1}, "faults.silo_failure_rate"),
        ({"crash": []}, "faults"),
        ({"silo_failure_rate": 0.1, "attack": {}}, "faults"),
    ],
)
def test_bad_faults_name_the_field(faults, field):
    attack = {"attack": faults.pop("attack")} if "attack" in faults else {}
    scenario = small_scenario(data={"dataset": "digits", "partition": "iid", "silos": 4}, faults=faults, **attack)
    with pytest.raises(ScenarioError) as error:
        validate_scenario(scenario)
    assert str(error.value).startswith(field)
