"""Logical silos hosted by worker actors: the same results whatever the packing, and no silo reaching another."""
from __future__ import annotations

import gc
import types

import numpy as np
import pytest
import torch

from privsilo.protocols.secure_aggregation import SecAggServer
from privsilo.simulator.engine.actors import SiloWorker
from privsilo.simulator.runtime.cluster import Capacity, worker_count
from privsilo.simulator.data import load_dataset
from privsilo.simulator.engine import pack_silos, run
from privsilo.simulator.engine.protocol_setup import server_protocol
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from privsilo.simulator.engine.silo import SiloSpec
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario
from tests.support.cli import one_error_line, privsilo

PACKINGS = (1, 3, 2)  # one silo per worker, every silo in one worker, uneven (two and one)
CASES = {
    "none": {},
    "dp_sgd_secure_aggregation": {
        "mechanism": {"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5},
        "protocol": {"secure_aggregation": True},
    },
    "rpdp_client_sampling": {
        "mechanism": {"name": "rpdp", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5,
                      "budgets": {"distribution": "three_levels", "levels": [1.0, 2.0, 4.0]}},
        "federation": {"rounds": 4, "client_rate": 0.7, "local_steps": 3, "batch_size": 16, "lr": 0.1},
    },
}


def _packed(blocks: dict, silos_per_actor: int) -> dict:
    resources = {"server": {"num_cpus": 0.25}, "silo": {"num_cpus": 0.25, "num_gpus": 0}, "silos_per_actor": silos_per_actor}
    return small_scenario(**blocks, resources=resources)


@pytest.mark.parametrize("case", CASES)
def test_metrics_and_model_are_identical_whatever_the_packing(ray_local, case):
    results = [run(_packed(CASES[case], packing)) for packing in PACKINGS]
    assert [r.packing for r in results] == [((0,), (1,), (2,)), ((0, 1, 2),), ((0, 1), (2,))]
    reference = results[0]
    for result in results[1:]:
        for mine, theirs in zip(result.rounds, reference.rounds):
            assert (mine.report.participants, mine.report.loss, mine.report.accuracy, mine.epsilon) == (
                theirs.report.participants, theirs.report.loss, theirs.report.accuracy, theirs.epsilon)
            assert mine.report.train_loss == theirs.report.train_loss or np.isnan(theirs.report.train_loss)
        assert result.privacy == reference.privacy
        assert all(torch.equal(result.model_state[k], reference.model_state[k]) for k in reference.model_state)
    if case == "rpdp_client_sampling":
        assert any(len(r.report.participants) < 3 for r in reference.rounds)  # sampling did leave silos out


def _reachable(roots: list[object]) -> dict[int, object]:
    """Every object reachable from ``roots`` through references, not entering modules, classes or functions
    (shared code, not data)."""
    seen: dict[int, object] = {}
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
            continue
        seen[id(obj)] = obj
        stack.extend(gc.get_referents(obj))
    return seen


def test_a_silo_reaches_nothing_of_another_silo_in_its_worker(ray_local):
    scenario = validate_scenario(_packed(CASES["dp_sgd_secure_aggregation"], 2))
    digits = load_dataset("digits")
    specs = tuple(SiloSpec(silo_id=i, record_ids=np.arange(i * 50, i * 50 + 50), seed=i) for i in range(2))
    worker = SiloWorker(num_cpus=1)  # the actor's class, in this process: the test walks its objects
    worker.host(specs=specs, features=digits.x_train, labels=digits.y_train, scenario=scenario,
                feature_shape=digits.feature_shape, num_classes=10)
    mechanism = scenario.mechanism.build()
    server = server_protocol(scenario, mechanism, num_silos=2, num_users=None, length=0)  # dp_sgd brings no protocol: SecAgg+
    assert isinstance(server, SecAggServer)
    inbound: dict = {}
    for stage in server.setup_stages:  # real key agreement, so each silo holds its keys and pairwise secrets
        inbound = dict(server.relay(stage, worker.setup_reply(stage, inbound)))
    first, second = worker.silos[0], worker.silos[1]
    owned_by_second = {id(obj): obj for obj in (second, second.mechanism, second.protocol, *vars(second.protocol).values(),
                                                 *(v for v in vars(second.mechanism).values() if isinstance(v, (torch.Tensor, torch.Generator, torch.nn.Module))))
                       if not isinstance(obj, (int, float, str, bool, type(None)))}
    reachable = _reachable([first])
    assert len(reachable) > 50  # the walk did enter the silo's model, data and keys
    assert not set(owned_by_second) & set(reachable)
    assert id(worker) not in reachable and id(worker.silos) not in reachable


@pytest.mark.parametrize(("silos", "packing", "capacity", "expected"), [
    (10, 3, Capacity(cpus=2, gpus=None), 4),
    (10, "auto", Capacity(cpus=2, gpus=None), 3),   # (2 - 0.5) / 0.5 workers fit
    (3, "auto", Capacity(cpus=2, gpus=None), 3),    # every silo its own worker
    (10, "auto", Capacity(cpus=0.5, gpus=None), 1),  # at least one
    (8, "auto", Capacity(cpus=64, gpus=1), 4),      # four quarter-GPU shares fit one GPU
])
def test_worker_count(silos, packing, capacity, expected):
    gpus = 0.25 if capacity.gpus else 0.0
    assert worker_count(silos=silos, silos_per_actor=packing, server_cpus=0.5, server_gpus=0.0, silo_cpus=0.5,
                        silo_gpus=gpus, capacity=capacity) == expected


def test_pack_silos_gives_balanced_consecutive_blocks():
    assert pack_silos(5, 2) == ((0, 1, 2), (3, 4))
    assert pack_silos(3, 3) == ((0,), (1,), (2,))
    assert [len(block) for block in pack_silos(1000, 7)] in ([143] * 6 + [142], [143] * 5 + [142] * 2)


@pytest.mark.parametrize("value", [0, -1, 1.5, "two", True, 4])
def test_bad_silos_per_actor_is_refused_naming_the_field(value):
    with pytest.raises(ScenarioError, match=r"resources\.silos_per_actor"):
        validate_scenario(small_scenario(resources={"silos_per_actor": value}))


def test_bad_silos_per_actor_exits_2_with_one_line():
    line = one_error_line(privsilo("validate", str(REPO / "scenarios" / "quickstart.yaml"), "--set", "resources.silos_per_actor=6"))
    assert "resources.silos_per_actor" in line and "6" in line and "data.silos = 5" in line
