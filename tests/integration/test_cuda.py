"""Local training on a CUDA device (issue 29): every mechanism family for one round, no host synchronisation inside
a step, the same seed giving the same release on the device, and whole runs with silos and server on GPU shares.

Marked ``cuda``: where torch sees no CUDA device every test here skips with that reason (run them with
``pytest -m cuda`` on a GPU machine). The CPU side of the same paths is ``tests/unit/mechanisms/test_device_draws.py``.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable

import numpy as np
import pytest
import torch

from privsilo.mechanisms.per_sample import noisy_step
from privsilo.simulator.models.builtin import build_model
from tests.support.scenarios import small_scenario
from tests.support.device_silos import FAMILIES, contribute, family_silo, released

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch.cuda.is_available() is False"),
]


def count_syncs(work: Callable[[], object]) -> int:
    """How many times ``work`` makes the host wait for the device (torch's sync debug mode, ``warn``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            work()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def test_the_counter_sees_each_synchronisation():
    """The method the tests below rest on: three reads of a device value are three waits."""
    value = torch.ones(3, device="cuda")
    assert count_syncs(lambda: [float(value.sum()) for _ in range(3)]) == 3


def test_a_dp_sgd_step_of_the_mnist_cnn_never_waits_for_the_device():
    """The McMahan CNN at batch 64: clip, canary-free noise from a device generator, update, under
    ``set_sync_debug_mode("error")`` (any synchronisation raises)."""
    torch.manual_seed(0)
    model = build_model("cnn", feature_shape=(1, 28, 28), num_classes=10).cuda()
    features, labels = torch.rand(64, 1, 28, 28, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    generator = torch.Generator(device="cuda").manual_seed(1)

    def step() -> None:
        noisy_step(model, features=features, labels=labels, max_grad_norm=1.0, noise_multiplier=1.0, lr=0.1,
                   divisor=64.0, generator=generator)

    step()  # warm-up: kernels and workspaces chosen, memory cached
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_trains_one_round_on_cuda_without_a_wait_per_step(family):
    """A round with 6 local steps makes the host wait as often as one with 2: no step waits for the device (and
    every round waits at least once, for the upload it hands to the host)."""
    def round_syncs(steps: int) -> int:
        silo, state = family_silo(family, device="cuda", draws_on_device=True, local_steps=steps)
        contribute(silo, state)  # warm-up round
        return count_syncs(lambda: contribute(silo, state))

    few = round_syncs(2)
    assert few > 0
    assert round_syncs(6) == few


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_same_seed_gives_the_same_release_on_cuda(family):
    def release(seed: int) -> np.ndarray:
        silo, state = family_silo(family, device="cuda", draws_on_device=True, seed=seed)
        return released(contribute(silo, state))

    first = release(9)
    assert np.all(np.isfinite(first))
    np.testing.assert_array_equal(first, release(9))
    assert not np.array_equal(first, release(10))


@pytest.mark.parametrize("mechanism", [
    {"name": "dp_sgd", "noise_multiplier": 1.0},
    {"name": "rpdp"},
    {"name": "uldp", "variant": "avg_w"},
    {"name": "pldp"},
    {"name": "dprivacy", "hypotheses": 2, "radius": 2.0},
])
def test_a_run_with_silos_and_server_on_gpu_shares_trains_on_cuda(ray_local, mechanism):
    from privsilo.simulator.engine import Federation

    data, protocol = {"dataset": "digits", "partition": "iid", "silos": 2}, {"secure_aggregation": False}
    if mechanism["name"] == "uldp":  # users' records; its noise is split across the silos: secure aggregation
        data["users"], protocol = {"count": 10}, {"secure_aggregation": True}
    scenario = small_scenario(
        data=data, model={"name": "cnn"}, mechanism=mechanism, protocol=protocol,
        federation={"rounds": 1, "client_rate": 1.0, "local_steps": 3, "batch_size": 16, "lr": 0.1},
        resources={"server": {"num_cpus": 0.25, "num_gpus": 0.2}, "silo": {"num_cpus": 0.25, "num_gpus": 0.2}},
    )
    with Federation(scenario) as federation:
        report = federation.run_round(0)
        placement = federation.placement
    assert all(p.device == "cuda" and not p.gpu_fallback for p in placement)
    assert math.isfinite(report.loss)


def test_secure_mode_on_cuda_draws_on_the_cpu_generator_and_trains():
    silo, state = family_silo("dp_sgd", device="cuda", draws_on_device=False)
    assert silo.context.training_generator().device.type == "cpu"
    assert np.all(np.isfinite(released(contribute(silo, state))))
