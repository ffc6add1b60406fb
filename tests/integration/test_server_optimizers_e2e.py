"""Server optimisers and FedProx through real Ray actors: reproducible runs, the defaults unchanged, the optimiser
applied per hypothesis on the server, and every accountant's report the same with and without them (both only
post-process what the privacy mechanism releases)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from privsilo.mechanisms.dprivacy.ifca import kmeans
from privsilo.mechanisms.server_optimizers import Momentum
from privsilo.simulator.engine import Federation, run
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario

QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
ADAM_AND_PROX = {"server_optimizer": {"name": "adam", "lr": 0.05}, "proximal_mu": 0.5}
# The quickstart's actor shape for the small scenarios too: the idle actors of one run host the next (resources only
# place actors), instead of new worker processes at each change of shape.
RESOURCES = {"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}}


def _outcome(result) -> tuple[list[tuple], dict[str, torch.Tensor]]:
    rows = [(r.report.participants, r.report.loss, r.report.accuracy, r.report.train_loss, r.epsilon) for r in result.rounds]
    return rows, dict(result.model_state)


def _same(a, b) -> bool:
    (rows_a, model_a), (rows_b, model_b) = a, b
    return rows_a == rows_b and model_a.keys() == model_b.keys() and all(torch.equal(model_a[k], model_b[k]) for k in model_a)


@pytest.fixture(scope="module")
def fedavg(ray_local) -> tuple[list[tuple], dict[str, torch.Tensor]]:
    """The quickstart's 3 rounds with the defaults (FedAvg), run once for every test that compares against it."""
    return _outcome(run(QUICKSTART, overrides=["federation.rounds=3"]))


def test_defaults_and_sgd_with_lr_one_are_fedavg_bit_for_bit(fedavg):
    plain = fedavg
    explicit = run(QUICKSTART, overrides=["federation.rounds=3", "federation.server_optimizer={name: sgd, lr: 1.0}", "federation.proximal_mu=0"])
    assert _same(plain, _outcome(explicit))


@pytest.mark.parametrize(
    "setting",
    ["federation.server_optimizer={name: adam}", "federation.server_optimizer={name: yogi}", "federation.proximal_mu=0.5"],
)
def test_fedadam_fedyogi_and_fedprox_runs_repeat_and_change_the_model(fedavg, setting):
    overrides = ["federation.rounds=3", setting]
    first, second = (_outcome(run(QUICKSTART, overrides=overrides)) for _ in range(2))
    assert _same(first, second)
    assert not _same(first, fedavg)
    assert first[0][-1][2] > 0.5  # still learns: test accuracy after 3 rounds (10 classes)


def test_the_server_steps_each_hypothesis_on_its_cluster_mean(ray_local):
    """dprivacy (IFCA): the server's momentum acts on each k-means centre minus its hypothesis."""
    scenario = small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 4, "rotations": [0, 180]},
        federation={"rounds": 2, "client_rate": 1.0, "local_steps": 5, "batch_size": 32, "lr": 0.1,
                    "server_optimizer": {"name": "momentum", "lr": 0.5, "beta1": 0.9}},
        mechanism={"name": "dprivacy", "hypotheses": 2, "nu": 5.0, "radius": 1.0, "local_epochs": 1},
        resources=RESOURCES,
    )
    reference = Momentum(lr=0.5, beta1=0.9)
    with Federation(scenario) as federation:
        for round_index in range(2):
            before = federation.global_state()
            federation.run_round(round_index)
            uploads = np.stack([message.values for _, message in sorted(federation.server_inbox().items())])
            _, centres = kmeans(uploads, initial_centres=np.stack(before))
            expected = reference.step(before, tuple(centres))
            for got, want in zip(federation.global_state(), expected, strict=True):
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "blocks",
    [
        {"mechanism": {"name": "dp_sgd", "noise_multiplier": 1.0}},
        {"mechanism": {"name": "rpdp"}},
        {"mechanism": {"name": "uldp", "variant": "group", "group_k": 2}, "data": {"dataset": "digits", "partition": "iid", "silos": 3, "users": {"count": 20}}},
        {"mechanism": {"name": "pldp", "perturb": "update", "ranges": 0.5, "budgets": 1.0}},
        {"mechanism": {"name": "dp_fedavg", "clipping": "adaptive", "clipped_count_stddev": 1.0}},
    ],
    ids=["dp_sgd", "rpdp", "uldp_group", "pldp_update", "dp_fedavg_adaptive"],
)
def test_the_privacy_report_is_the_same_with_a_server_optimizer_and_fedprox(ray_local, blocks):
    plain = run(small_scenario(**blocks, resources=RESOURCES))
    federation = {**small_scenario()["federation"], **ADAM_AND_PROX}
    optimised = run(small_scenario(**blocks, federation=federation, resources=RESOURCES))
    assert [r.epsilon for r in optimised.rounds] == [r.epsilon for r in plain.rounds]
    assert optimised.privacy == plain.privacy
    assert not _same(_outcome(plain), _outcome(optimised))
