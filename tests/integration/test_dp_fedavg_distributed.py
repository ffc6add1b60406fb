"""``dp_fedavg`` with ``noise: distributed`` (Kairouz, Liu, Steinke, ICML 2021): the rotation, conditional
rounding's norm bound, the accountant against an mpmath evaluation of Proposition 14, the sum through real secure
aggregation, the refusals, and a run through real Ray actors."""
from __future__ import annotations

import dataclasses
import json
import math

import mpmath
import numpy as np
import pytest
import torch
from scipy.linalg import hadamard as hadamard_matrix

from privsilo.mechanisms.dp_fedavg.distributed import (
    BLOCK,
    DistributedSetting,
    conditional_round,
    hadamard,
    padded_dimension,
    reduce_signed,
    rotate,
    rounded_norm_bound,
    unrotate,
)
from privsilo.mechanisms.dp_fedavg.distributed_accountant import ORDERS, DistributedAccountant
from privsilo.mechanisms.dp_fedavg.mechanism import DistributedDpFedAvgServer, DistributedPlan, DpFedAvg
from privsilo.mechanisms.dp_fedavg.params import DpFedAvgParams
from privsilo.mechanisms.events import DistributedDiscreteGaussianEvent
from privsilo.protocols.fixed_point import FixedPointCodec
from privsilo.simulator.engine import run
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from tests.support.scenarios import tiny_silo_context
from tests.support.secagg_rounds import federation, run_round

DELTA = 1e-5


@pytest.mark.parametrize("size", [1, 2, 5, 64, 1000, 2049, 9738])
def test_rotation_is_orthonormal_and_inverted_by_the_server(size) -> None:
    rng = np.random.default_rng(size)
    for seed in range(3):
        vector = rng.normal(size=size) * rng.choice([1e-3, 1.0, 1e3], size=size)
        rotated = rotate(vector, seed)
        assert rotated.size == padded_dimension(size) >= size
        assert np.linalg.norm(rotated) == pytest.approx(np.linalg.norm(vector), rel=1e-12)
        assert np.allclose(unrotate(rotated, seed, size), vector, rtol=0, atol=1e-9 * np.abs(vector).max())
    width = padded_dimension(size)
    block = min(width, BLOCK)  # beyond BLOCK, one Hadamard matrix per block of BLOCK coordinates
    assert width % block == 0 and width - size < block
    for row in range(0, width, max(1, width // 16)):
        expected = np.zeros(width)
        start = row // block * block
        expected[start:start + block] = hadamard_matrix(block)[row - start] / math.sqrt(block)
        unit = np.zeros(width)
        unit[row] = 1.0
        assert np.allclose(hadamard(unit), expected)


def test_rotation_flattens_a_spike_and_depends_on_the_seed() -> None:
    spike = np.zeros(1024)
    spike[7] = 32.0
    assert np.abs(rotate(spike, 1)).max() == pytest.approx(1.0)  # 32 / sqrt(1024) on every coordinate
    assert not np.array_equal(rotate(np.ones(1024), 1), rotate(np.ones(1024), 2))


@pytest.mark.parametrize("beta", [0.0, math.exp(-0.5), 0.01])
def test_conditional_rounding_meets_theorem_1s_bound(beta) -> None:
    """Against vectors chosen to make rounding's norm large: every fraction 1/2 (the largest variance), fractions
    just above 0 (rounded up rarely, by almost 1), one spike, and random directions, at several norms c / gamma."""
    rng = np.random.default_rng(4)
    dimension = 256
    for scaled_clip in (1.0, 16.0, 160.0, 1600.0):
        bound = rounded_norm_bound(scaled_clip, dimension, beta)
        assert bound <= scaled_clip + math.sqrt(dimension)
        direction = rng.normal(size=dimension)
        candidates = {
            "halves": np.floor(np.full(dimension, scaled_clip / math.sqrt(dimension))) + 0.5,
            "just_above": np.full(dimension, 1e-3),
            "spike": np.eye(dimension)[0] * scaled_clip,
            "random": direction / np.linalg.norm(direction) * scaled_clip,
        }
        for name, vector in candidates.items():
            if np.linalg.norm(vector) > scaled_clip:  # the silo clips first
                vector = vector * (scaled_clip / np.linalg.norm(vector))
            for _ in range(20):
                rounded = conditional_round(vector, bound, rng)
                assert np.array_equal(rounded, np.rint(rounded)), name
                assert np.linalg.norm(rounded) <= bound, name
                assert np.all(np.abs(rounded - vector) < 1.0), name


def test_one_rounding_meets_the_bound_with_probability_at_least_one_minus_beta() -> None:
    """Theorem 1: plain randomized rounding lands within the beta bound with probability >= 1 - beta (measured on
    the worst case, every fraction 1/2)."""
    rng = np.random.default_rng(5)
    dimension, beta = 1024, 0.3
    vector = np.full(dimension, 0.5)
    scaled_clip = float(np.linalg.norm(vector))
    bound = rounded_norm_bound(scaled_clip, dimension, beta)
    low = np.floor(vector)
    within = np.mean([np.linalg.norm(low + (rng.random(dimension) < vector - low)) <= bound for _ in range(2000)])
    assert within >= 1 - beta


def _mp_epsilon(rounds: list[tuple[float, float, float, int, int]], delta: float) -> float:
    """Proposition 14 and Balle et al.'s conversion evaluated in mpmath at 50 digits, independently of the code:
    ``rounds`` of (sigma, Delta_2, Delta_1, d, n)."""
    mpmath.mp.dps = 50
    best = mpmath.inf
    taus = {(sigma, n): 10 * mpmath.fsum(mpmath.exp(-2 * mpmath.pi**2 * mpmath.mpf(sigma)**2 * k / (k + 1))
                                         for k in range(1, n)) for sigma, _, _, _, n in rounds}
    for order in range(2, 64):
        a = mpmath.mpf(order)
        total = mpmath.mpf(0)
        for sigma, l2, l1, d, n in rounds:
            tau, s = taus[sigma, n], mpmath.sqrt(n) * mpmath.mpf(sigma)
            total += min(a / 2 * l2**2 / s**2 + tau * d,
                         a / 2 * (l2**2 / s**2 + 2 * l1 * tau / s + tau**2 * d),
                         a / 2 * (l2 / s + tau * mpmath.sqrt(d)) ** 2)
        eps = total + mpmath.log((a - 1) / a) - (mpmath.log(delta) + mpmath.log(a)) / (a - 1)
        best = min(best, eps)
    return float(best)


def _event(round_index: int, sigma: float, l2: float, l1: float, d: int) -> DistributedDiscreteGaussianEvent:
    return DistributedDiscreteGaussianEvent(round_index=round_index, sigma=sigma, l2_bound=l2, l1_bound=l1, dimension=d)


@pytest.mark.parametrize("sigma, l2, l1, d, uploads", [
    (0.6, 3.0, 9.0, 16, [2, 2, 3]),  # tau matters: sigma near 1/2
    (1.0, 10.0, 40.0, 64, [5, 4, 5, 5]),
    (2560.0, 12800.7, 1.6e6, 16384, [100] * 30 + [90] * 5),  # the shipped scenario's setting, with dropouts
])
def test_accountant_against_mpmath(sigma, l2, l1, d, uploads) -> None:
    account = DistributedAccountant(delta=DELTA)
    for round_index, count in enumerate(uploads):
        for silo in range(count):
            account.record(silo, _event(round_index, sigma, l2, l1, d))
    expected = _mp_epsilon([(sigma, l2, l1, d, n) for n in uploads], DELTA)
    report = account.report()
    assert report["epsilon"] == pytest.approx(expected, rel=1e-9)
    assert report["rounds_accounted"] == len(uploads) and report["fewest_uploads"] == min(uploads)
    assert report["guarantee"].startswith("client-level")


def test_large_sigma_is_the_gaussian_of_multiplier_sqrt_n_sigma_over_delta() -> None:
    """With tau negligible the bound is the Gaussian mechanism's alpha / (2 z^2), z = sqrt(n) sigma / Delta_2."""
    account = DistributedAccountant(delta=DELTA)
    for silo in range(10):
        account.record(silo, _event(0, 100.0, 200.0, 200.0 * 32, 1024))
    z = math.sqrt(10) * 100.0 / 200.0
    assert np.allclose(account.rdp(), ORDERS / (2 * z**2), rtol=1e-12, atol=0)


def test_dropouts_raise_epsilon_and_disagreeing_silos_are_refused() -> None:
    def epsilon(uploads: int) -> float:
        account = DistributedAccountant(delta=DELTA)
        for silo in range(uploads):
            account.record(silo, _event(0, 1.0, 10.0, 40.0, 64))
        return account.report()["epsilon"]

    assert epsilon(3) > epsilon(4) > epsilon(8)
    account = DistributedAccountant(delta=DELTA)
    account.record(0, _event(0, 1.0, 10.0, 40.0, 64))
    with pytest.raises(ValueError, match="disagree"):
        account.record(1, _event(0, 1.1, 10.0, 40.0, 64))
    with pytest.raises(ValueError, match="sigma >= 1/2"):
        account.record(1, _event(1, 0.4, 10.0, 40.0, 64))


@pytest.mark.parametrize("silos, drops", [(5, {}), (7, {2: "protect", 5: "unmask"})])
def test_sum_through_secure_aggregation_is_the_integer_sum_mod_m(silos, drops) -> None:
    """The silos' noisy integer vectors (as the silo makes them, at a tiny modulus so the sum wraps) through the real
    SecAgg protocol: the server's reduction of the decoded sum is the plaintext integer sum mod m, in [-m/2, m/2)."""
    rng = np.random.default_rng(silos)
    codec = FixedPointCodec(max_summands=silos)
    setting = DpFedAvgParams(noise="distributed", noise_multiplier=1.0).distributed_setting(silos, 300)
    uploads = {}
    for i in range(silos):
        rotated = rotate(rng.normal(size=300) * 0.05 / setting.gamma, 11)
        integers = conditional_round(rotated, setting.l2_bound, rng)
        uploads[i] = integers + np.rint(rng.normal(scale=setting.sigma, size=setting.dimension))
        assert np.abs(uploads[i]).max() <= min(setting.upload_bound, codec.max_abs_value)
    silo_parties, server = federation(silos, codec=codec)
    outcome = run_round(silo_parties, server, uploads, round_index=0, drops=drops)
    members = [i for i in range(silos) if i not in drops or drops[i] == "unmask"]
    assert outcome.uploaders == tuple(members)
    plain = sum(uploads[i].astype(np.int64) for i in members)
    assert np.array_equal(outcome.total, plain.astype(np.float64))  # exact: the codec carries integers unchanged
    for modulus in (setting.modulus, 2**12):
        reduced = reduce_signed(outcome.total, modulus)
        assert np.array_equal(reduced, ((plain + modulus // 2) % modulus - modulus // 2).astype(np.float64))
    assert np.array_equal(reduce_signed(outcome.total, setting.modulus), plain)  # the chosen m never wraps


def _context(silo_id: int):
    """A tiny silo whose generator is its own (silos with one seed would add the same noise)."""
    context = tiny_silo_context(silo_id=silo_id)
    return dataclasses.replace(context, generator=torch.Generator().manual_seed(100 + silo_id),
                               training=dataclasses.replace(context.training, num_silos=3))


def test_silos_and_server_recover_the_mean_update() -> None:
    """Three real silo mechanisms and the server: the applied update is the mean clipped update, within the noise."""
    params = DpFedAvgParams(noise="distributed", noise_multiplier=0.01, clip_norm=0.05)
    mechanism = DpFedAvg(params)
    server = mechanism.server_for(num_silos=3, num_users=None)
    assert isinstance(server, DistributedDpFedAvgServer)
    plan = server.round_plan(np.random.default_rng(0), round_index=0)
    assert isinstance(plan, DistributedPlan) and not hasattr(plan, "num_silos")  # silos take N from the scenario
    contexts = [_context(i) for i in range(3)]
    start = np.concatenate([p.detach().numpy().ravel() for p in contexts[0].model.parameters()]).astype(np.float64)
    setting = params.distributed_setting(3, start.size)
    total, clipped = np.zeros(setting.dimension), []
    for ctx in contexts:
        contribution = mechanism.silo(ctx).contribute_with_plan((start,), round_index=0, plan=plan)
        assert np.array_equal(contribution.vector, np.rint(contribution.vector))
        assert contribution.vector.size == setting.dimension
        (event,) = contribution.events
        assert event.sigma == setting.sigma and event.l2_bound == setting.l2_bound
        total += contribution.vector
    from privsilo.mechanisms.fedavg import local_sgd
    from privsilo.mechanisms.dp_fedavg.mechanism import clip_to_norm

    for i in range(3):  # the same local training again, from a fresh context with the same seed
        delta, _ = local_sgd(_context(i), start)
        clipped.append(clip_to_norm(delta, params.clip_norm))
    (after,) = server.aggregate((start,), total, num_participants=3)
    error = after - start - np.mean(clipped, axis=0)
    # per coordinate: the summed noise z C (the silos' shares in units of gamma) and three roundings (each within
    # gamma / 2 in standard deviation), un-rotated (orthonormal) and divided by N = 3
    per_coordinate = math.hypot(params.noise_multiplier * params.clip_norm, math.sqrt(3) * setting.gamma / 2) / 3
    assert 0.8 < np.linalg.norm(error) / (per_coordinate * math.sqrt(start.size)) < 1.2
    # the predicted error is 0.102 of the mean here (0.122 at the bound above): the mean update stands out
    assert np.linalg.norm(error) < 0.15 * np.linalg.norm(np.mean(clipped, axis=0))


def test_params_refuse_what_distributed_noise_does_not_cover() -> None:
    with pytest.raises(ValueError, match="clipping: adaptive clipping is implemented for noise 'central' only"):
        DpFedAvgParams(noise="distributed", clipping="adaptive", clipped_count_stddev=1.0)
    with pytest.raises(ValueError, match="accountant: distributed noise is accounted by RDP"):
        DpFedAvgParams(noise="distributed", accountant="pld")
    with pytest.raises(ValueError, match="rounding_beta: does nothing here"):
        DpFedAvgParams(rounding_beta=0.1)


def _scenario(**changes) -> dict:
    scenario = {
        "name": "dp_fedavg_distributed_e2e", "seed": 0,
        "data": {"dataset": "digits", "partition": "iid", "silos": 4},
        "model": {"name": "logistic_regression"},
        "federation": {"rounds": 2, "client_rate": 1.0, "local_steps": 20, "batch_size": 16, "lr": 0.1},
        "mechanism": {"name": "dp_fedavg", "noise": "distributed", "noise_multiplier": 0.01, "clip_norm": 1.0,
                      "delta": DELTA},
        "protocol": {"secure_aggregation": True},
        "resources": {"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}},
    }
    for key, value in changes.items():
        block, _, field = key.partition("__")
        scenario[block] = {**scenario[block], field: value}
    return scenario


@pytest.mark.parametrize("changes, field, value, allowed", [
    ({"protocol__secure_aggregation": False}, "protocol.secure_aggregation", "false", "set it to true"),
    ({"federation__client_rate": 0.5}, "federation.client_rate", "0.5", "set it to 1.0"),
    ({"protocol__fractional_bits": 40, "mechanism__noise_multiplier": 10.0}, "protocol.fractional_bits", "40", "lower it"),
    ({"mechanism__noise_multiplier": 0.0}, "mechanism.noise_multiplier", "0.0", "raise it"),
    ({"mechanism__clipping": "adaptive", "mechanism__clipped_count_stddev": 1.0}, "mechanism.clipping", "'adaptive'",
     "use 'fixed'"),
])
def test_scenario_refusals_name_the_field_value_and_what_is_allowed(changes, field, value, allowed) -> None:
    with pytest.raises(ScenarioError) as refused:
        validate_scenario(_scenario(**changes))
    message = str(refused.value)
    assert message.startswith(f"{field}: got {value};"), message
    assert allowed in message and "\n" not in message


@pytest.mark.slow
def test_run_through_ray_sums_under_secure_aggregation(ray_local, tmp_path) -> None:
    """At z = 0.01 the model learns (the sum was reduced, un-rotated and rescaled right). Silo 3 crashes before
    uploading in round 2: that round's sum has four silos' noise, and the epsilon is the accountant's for five
    uploads, then four."""
    scenario = _scenario(data__silos=5, resources__silos_per_actor=1)
    scenario["faults"] = {"crashes": [{"silo": 3, "round": 2, "at": "before_upload"}]}
    run(scenario, out_dir=tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    privacy = summary["privacy"]
    setting = DpFedAvgParams(noise="distributed", noise_multiplier=0.01, delta=DELTA).distributed_setting(5, 650)
    account = DistributedAccountant(delta=DELTA)
    for round_index, uploads in enumerate([5, 4]):
        for silo in range(uploads):
            account.record(silo, _event(round_index, setting.sigma, setting.l2_bound, setting.l1_bound, setting.dimension))
    assert privacy["rounds_accounted"] == 2 and privacy["fewest_uploads"] == 4
    assert privacy["epsilon"] == pytest.approx(account.report()["epsilon"], rel=1e-12)
    assert "secure aggregation" in privacy["guarantee"]
    assert summary["final"]["accuracy"] > 0.5, summary["final"]


def test_audit_with_client_canaries_refuses_distributed_noise() -> None:
    from privsilo.simulator.scenario import load_scenario_file
    from tests.support.paths import REPO

    raw = load_scenario_file(REPO / "scenarios" / "audits" / "dp_fedavg_digits.yaml")
    raw["mechanism"] = {**raw["mechanism"], "noise": "distributed"}
    raw["protocol"] = {**raw.get("protocol", {}), "secure_aggregation": True}
    with pytest.raises(ScenarioError) as refused:
        validate_scenario(raw)
    assert str(refused.value).startswith("mechanism.noise: got 'distributed';"), str(refused.value)
