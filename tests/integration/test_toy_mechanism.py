"""Adding a mechanism is its module and one registry line: a mechanism of the tests' own
(``tests/support/toy_mechanism.py``, registered at run time, never shipped) runs a round, an attack and an audit through
the real code paths (Ray actors of the shared session), with nothing of the simulator naming it."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from privsilo.mechanisms import registry
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from tests.support.scenarios import small_scenario


@pytest.fixture(scope="module")
def toy():
    from tests.support import toy_mechanism

    toy_mechanism.register()
    yield toy_mechanism
    registry._LOCATIONS.pop(toy_mechanism.NAME)  # later tests see the shipped registry (messages list its names)


@pytest.mark.slow
def test_a_toy_mechanism_runs_a_round_an_attack_and_an_audit(ray_local, toy):
    from privsilo.simulator.attacks.runner import attack
    from privsilo.simulator.audit.runner import audit
    from privsilo.simulator.engine import run

    one_round = {"rounds": 1, "client_rate": 1.0, "local_steps": 2, "batch_size": 32, "lr": 0.1}
    noiseless = run(small_scenario(mechanism={"name": "toy"}, federation=one_round))
    fedavg = run(small_scenario(federation=one_round))
    assert noiseless.scenario.mechanism.plugin is toy.ToyMechanism and noiseless.privacy["epsilon"] is None
    for name, tensor in fedavg.model_state.items():  # without noise the toy trains exactly as FedAvg
        assert torch.equal(noiseless.model_state[name], tensor), name
    assert [r.report.accuracy for r in noiseless.rounds] == [r.report.accuracy for r in fedavg.rounds]

    report = attack(small_scenario(mechanism={"name": "toy", "noise_std": 1e-6},
                                   federation={"rounds": 1, "client_rate": 1.0, "local_steps": 1, "batch_size": 1, "lr": 0.1},
                                   attack={"iterations": 5, "seeds": [0]}))
    (attacked,) = report.runs
    assert attacked.target_silo == 0 and np.isfinite(attacked.figures["mse"])

    audited = audit(small_scenario(mechanism={"name": "toy", "noise_std": 0.5}, federation=one_round,
                                   audit={"canaries": 30, "view": "auto"}))
    assert audited.unit == "client" and audited.view == "uploads"  # canary clients; its weighted-delta uploads read
    assert audited.claims["claim_note"] == toy.CLAIM_NOTE and audited.claims["claimed_epsilon"] is None
    assert len(audited.groups) == 1 and audited.groups[0].scores.size == 30


def test_the_toy_mechanism_s_traits_decide_what_a_scenario_may_ask(toy):
    with pytest.raises(ScenarioError) as refused:
        validate_scenario(small_scenario(mechanism={"name": "toy"}, audit={"kind": "input"}))
    assert (refused.value.field, str(refused.value.value)) == ("audit.kind", "input")
    assert "input canaries are records of dp_sgd" in str(refused.value)
    with pytest.raises(ScenarioError) as refused:
        validate_scenario(small_scenario(mechanism={"name": "toy"}, audit={"unit": "record"}))
    assert "'toy' protects nothing; audit unit allowed: client" in str(refused.value)
    assert "toy" in registry.mechanism_names() and "toy" not in registry.MECHANISM_NAMES
