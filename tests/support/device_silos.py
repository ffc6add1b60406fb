"""Every mechanism family's silo, built in process (no Ray) on a chosen device, for the device tests
(``tests/unit/mechanisms/test_device_draws.py`` on the CPU, ``tests/integration/test_cuda.py`` on a GPU)."""
from __future__ import annotations

import numpy as np
import torch

from privsilo.mechanisms.base import GlobalState, LocalTraining, SiloContext, SiloContribution, model_to_vector
from privsilo.mechanisms.canaries import SiloCanaries
from privsilo.mechanisms.registry import mechanism_class
from privsilo.simulator.models.builtin import build_model
from privsilo.simulator.engine.silo import deterministic_kernels

RECORDS, USERS, SILOS, SHAPE, CLASSES = 48, 6, 2, (1, 8, 8), 10

# family -> (mechanism name, its parameters, hosts canary records or clients)
FAMILIES: dict[str, tuple[str, dict, bool]] = {
    "none": ("none", {}, False),
    "dp_sgd": ("dp_sgd", {"noise_multiplier": 1.0}, False),
    "dp_sgd_canaries": ("dp_sgd", {"noise_multiplier": 1.0, "sampling_rate": 0.2}, True),
    "rpdp": ("rpdp", {}, False),
    "uldp_avg_w": ("uldp", {"variant": "avg_w"}, False),
    "uldp_sgd": ("uldp", {"variant": "sgd"}, True),
    "uldp_naive": ("uldp", {"variant": "naive"}, False),
    "uldp_group": ("uldp", {"variant": "group", "group_k": 2}, False),
    "uldp_private": ("uldp", {"weighting": "private", "max_records_per_user": 50}, False),
    "pldp": ("pldp", {}, True),
    "dprivacy": ("dprivacy", {"hypotheses": 2, "radius": 2.0}, True),
}


def family_silo(
    family: str, *, device: torch.device | str, draws_on_device: bool, local_steps: int = 3, seed: int = 9,
    model: str = "cnn",
) -> tuple[object, GlobalState]:
    """The silo mechanism of ``family`` on ``device`` (40-odd random 8x8 records, users for ULDP, canaries
    where the family takes them) and the global state of its first round."""
    name, params, with_canaries = FAMILIES[family]
    device = torch.device(device)
    deterministic_kernels(device)  # as a Silo does
    mechanism = mechanism_class(name)(mechanism_class(name).Params(**params))
    data = np.random.default_rng(0)
    user_ids = np.arange(RECORDS) % USERS
    histogram = np.stack([np.bincount(user_ids, minlength=USERS)] * SILOS)
    canaries = None
    if with_canaries:
        canaries = SiloCanaries(ids=np.arange(3), seed=5, weights=np.full(3, 0.5), budgets=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        states = tuple(model_to_vector(build_model(model, feature_shape=SHAPE, num_classes=CLASSES))
                       for _ in range(mechanism.num_hypotheses()))
        network = build_model(model, feature_shape=SHAPE, num_classes=CLASSES).to(device)
    context = SiloContext(
        silo_id=0,
        record_ids=np.arange(RECORDS),
        features=torch.tensor(data.normal(size=(RECORDS, *SHAPE)), dtype=torch.float32, device=device),
        labels=torch.tensor(data.integers(0, CLASSES, size=RECORDS), device=device),
        model=network,
        training=LocalTraining(local_steps=local_steps, batch_size=8, lr=0.1, rounds=3, client_rate=1.0),
        generator=torch.Generator().manual_seed(seed),
        device=device,
        user_ids=user_ids if name == "uldp" else None,
        user_histogram=histogram if name == "uldp" else None,
        canaries=canaries,
        draws_on_device=draws_on_device,
    )
    return mechanism.silo(context), states


def contribute(silo: object, state: GlobalState) -> SiloContribution:
    """One round of the silo's local training (ULDP: every user sampled)."""
    return silo.contribute_with_plan(state, round_index=0, plan=None)


def released(contribution: SiloContribution) -> np.ndarray:
    """What the silo hands its protocol, as one float64 vector (ULDP's private weighting: deltas and noise)."""
    payload = contribution.payload()
    if isinstance(payload, np.ndarray):
        return payload
    return np.concatenate([np.asarray(payload.deltas, dtype=np.float64).ravel(), np.asarray(payload.noise).ravel()])
