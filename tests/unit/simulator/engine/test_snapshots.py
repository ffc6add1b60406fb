"""Silo snapshots (crash recovery, checkpoints): no record, no model parameter and no secure-aggregation round secret
is written."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from privsilo.protocols.fixed_point import FixedPointCodec
from privsilo.protocols.secure_aggregation import SecAggServer, SecAggSilo
from privsilo.simulator.data.silos import run_seeds, silo_records
from privsilo.simulator.data.sources import scenario_dataset
from privsilo.simulator.scenario import validate_scenario
from privsilo.simulator.engine.silo import Silo, SiloSpec
from tests.support.scenarios import small_scenario

ULDP = {"name": "uldp", "noise_multiplier": 5.0, "max_grad_norm": 0.5, "delta": 1e-5}
MECHANISMS = [
    ({"name": "none"}, {}),
    ({"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5}, {}),
    ({"name": "rpdp", "budgets": {"distribution": "three_levels"}, "delta": 1e-3}, {}),
    ({"name": "pldp", "ranges": "tau1", "budgets": [0.2, 0.5, 1.0], "centers": [0.0, 0.1, -0.1]}, {}),
    ({"name": "dprivacy", "hypotheses": 2, "nu": 5.0, "radius": 1.0, "local_epochs": 1}, {}),
    *[({**ULDP, "variant": variant, **({"group_k": 2} if variant == "group" else {})}, {"users": {"count": 30}})
      for variant in ("naive", "group", "avg", "avg_w", "sgd")],
]


def _silos(mechanism: dict, data: dict) -> list[Silo]:
    secure = mechanism["name"] == "uldp" and mechanism["variant"] in ("avg", "avg_w", "sgd")
    scenario = validate_scenario(small_scenario(data={"dataset": "digits", "partition": "iid", "silos": 3, **data},
                                                mechanism=mechanism, protocol={"secure_aggregation": secure}))
    dataset = scenario_dataset(scenario.data, seed=scenario.seed)
    parts, users = silo_records(scenario, dataset)
    seeds = run_seeds(scenario.seed, scenario.data.silos)["silos"]
    return [
        Silo(SiloSpec(silo_id=i, record_ids=idx, seed=seeds[i], user_ids=None if users is None else users.silo_user_ids[i]),
             features=dataset.x_train[idx], labels=dataset.y_train[idx], scenario=scenario,
             feature_shape=dataset.feature_shape, num_classes=dataset.num_classes, device=torch.device("cpu"),
             user_histogram=None if users is None else users.histogram())
        for i, idx in enumerate(parts)
    ]


@pytest.mark.parametrize(("mechanism", "data"), MECHANISMS, ids=lambda v: v.get("variant", v.get("name", "")) if v else "")
def test_a_snapshot_holds_no_record_and_restores_the_silo(mechanism, data):
    for silo in _silos(mechanism, data):
        features = silo._records["features"].numpy()
        blob = silo.snapshot()
        for row in features[:: max(1, len(features) // 25)]:  # no record's bytes, copied or not, are in the snapshot
            assert row.tobytes() not in blob
        for parameter in silo._model.parameters():  # nor the model's parameters (each round loads the broadcast)
            assert parameter.detach().numpy().tobytes()[:64] not in blob
        restored = silo.restored(blob)
        assert restored._records["features"] is silo._records["features"]
        assert torch.equal(restored.mechanism.context.generator.get_state(), silo.mechanism.context.generator.get_state())


def test_a_secure_aggregation_snapshot_after_an_upload_carries_no_round_secret():
    """Taken after ``protect`` (as the worker writes it), a silo's snapshot holds none of the round's seeds, keys or
    shares: with its upload they would unmask it. The restored silo takes part in the next round."""
    codec = FixedPointCodec(max_summands=3)
    server = SecAggServer(codec=codec)
    silos = {i: SecAggSilo(i, codec=codec) for i in range(3)}
    vectors = {i: np.full(4, float(i + 1)) for i in silos}

    def one_round(round_index: int) -> np.ndarray:
        participants = tuple(silos)
        server.begin_round(round_index=round_index, participants=participants)
        inbound: dict = {}
        for stage in server.round_stages:
            replies = {i: silos[i].round_reply(stage, inbound.get(i), round_index=round_index) for i in silos}
            inbound = server.round_relay(stage, replies, round_index=round_index)
        uploads = {i: silos[i].protect(vectors[i], round_index=round_index, participants=participants) for i in silos}
        snapshots = {i: pickle.dumps(silos[i]) for i in silos}
        requests = server.unmask_requests(uploads, round_index=round_index)
        replies = {i: silos[i].unmask_reply(requests[i], round_index=round_index) for i in requests}
        total = server.combine(uploads, round_index=round_index, participants=tuple(sorted(uploads)), unmasking=replies)
        for i, blob in snapshots.items():
            assert pickle.loads(blob)._round is None and silos[i]._round is not None
            silos[i] = pickle.loads(blob)
        return total

    np.testing.assert_allclose(one_round(0), np.full(4, 6.0), atol=1e-6)
    np.testing.assert_allclose(one_round(1), np.full(4, 6.0), atol=1e-6)
    assert pickle.loads(pickle.dumps(server))._round is None
