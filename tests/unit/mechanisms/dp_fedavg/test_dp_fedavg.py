"""``dp_fedavg`` (client-level DP-FedAvg): its accountant against Google's dp_accounting (RDP and PLD) and Opacus,
the silo's clipping, the server's noise and divisor, and a run through real Ray actors."""
from __future__ import annotations

import logging

import dp_accounting
import numpy as np
import pytest
from opacus.accountants import RDPAccountant as OpacusRdp

from privsilo.mechanisms.dp_fedavg.accountant import ClientLevelAccountant
from privsilo.mechanisms.dp_fedavg.mechanism import DpFedAvgServer, clip_to_norm
from privsilo.mechanisms.dp_fedavg.params import DpFedAvgParams
from privsilo.mechanisms.events import ClientLevelGaussianEvent
from privsilo.mechanisms.rdp import DEFAULT_ORDERS
from privsilo.mechanisms.canaries import SiloCanaries
from privsilo.mechanisms.dp_fedavg.mechanism import ClipNorm, DpFedAvg
from tests.support.dp_fedavg import DELTA, client_level_accountant
from tests.support.paths import REPO
from tests.support.scenarios import tiny_silo_context

SETTINGS = [(1.0, 1.0, 10), (0.5, 1.0, 30), (0.1, 0.8, 200), (0.01, 1.2, 1000)]  # (q, z, rounds)


def _google(q: float, z: float, rounds: int, accountant) -> float:
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
    return accountant.get_epsilon(DELTA)


@pytest.mark.parametrize(("q", "z", "rounds"), SETTINGS)
def test_rdp_epsilon_against_dp_accounting_and_opacus(q, z, rounds, caplog) -> None:
    """Never below dp_accounting's PLD (the tightest of the references), within 2 % of its RDP, equal to Opacus' RDP
    (same orders, same conversion), and equal to dp_accounting's RDP over the integer orders both evaluate exactly."""
    caplog.set_level(logging.ERROR)  # dp_accounting warns where its fractional-order series gives up
    ours = client_level_accountant(q, z, rounds).report()["epsilon"]
    opacus = OpacusRdp()
    opacus.history = [(z, q, rounds)]
    assert ours == pytest.approx(opacus.get_epsilon(DELTA), rel=1e-9)
    assert ours >= _google(q, z, rounds, dp_accounting.pld.PLDAccountant())
    assert ours == pytest.approx(_google(q, z, rounds, dp_accounting.rdp.RdpAccountant()), rel=0.02)
    integer_orders = [order for order in DEFAULT_ORDERS if float(order).is_integer()]
    assert ours <= _google(q, z, rounds, dp_accounting.rdp.RdpAccountant(orders=integer_orders)) * (1 + 1e-9)


@pytest.mark.parametrize(("q", "z", "rounds"), SETTINGS)
def test_pld_epsilon_never_below_dp_accounting(q, z, rounds) -> None:
    """At q = 1 ours is the exact Gaussian figure (Balle and Wang 2018), which dp_accounting's grid exceeds by 1e-9."""
    report = client_level_accountant(q, z, rounds, accountant="pld").report()
    google = _google(q, z, rounds, dp_accounting.pld.PLDAccountant())
    assert google * (1 - (1e-8 if q == 1.0 else 0.0)) <= report["epsilon"] <= google * 1.01
    assert report["epsilon"] == report["epsilon_pld"] <= report["epsilon_rdp"]


def test_report_is_client_level_and_gives_the_servers_view() -> None:
    report = client_level_accountant(0.5, 1.0, 30).report()
    assert report["guarantee"].startswith("client-level") and report["rounds_accounted"] == 30
    assert report["epsilon_without_sampling"] == pytest.approx(client_level_accountant(1.0, 1.0, 30).report()["epsilon"], rel=1e-12)
    assert "epsilon_without_sampling" not in client_level_accountant(1.0, 1.0, 30).report()


def test_rounds_without_uploads_are_accounted_at_q() -> None:
    """A held round counts whether or not any silo was sampled: given that a round ran, a silo was in it with
    probability q / (1 - (1 - q)^N) > q, so accounting only the rounds with uploads at q would be below the truth."""
    account = ClientLevelAccountant(delta=DELTA, noise_multiplier=1.0)
    for round_index in range(20):
        account.round_held(round_index, client_rate=0.1)
        if round_index % 5 == 0:  # uploads in 4 of the 20 rounds
            account.record(0, ClientLevelGaussianEvent(round_index=round_index, sampling_rate=0.1, noise_multiplier=1.0))
    assert account.report()["rounds_accounted"] == 20
    assert account.report()["epsilon"] == pytest.approx(client_level_accountant(0.1, 1.0, 20).report()["epsilon"], rel=1e-12)
    with pytest.raises(ValueError, match="disagree about round 3"):
        account.record(0, ClientLevelGaussianEvent(round_index=3, sampling_rate=0.2, noise_multiplier=1.0))


def test_accountant_refuses_disagreeing_silos_and_other_events() -> None:
    account = client_level_accountant(0.5, 1.0, 1)
    with pytest.raises(ValueError, match="disagree"):
        account.record(1, ClientLevelGaussianEvent(round_index=0, sampling_rate=0.5, noise_multiplier=2.0))
    with pytest.raises(TypeError):
        account.record(0, object())
    assert client_level_accountant(1.0, 0.0, 3).report()["epsilon"] is None  # z = 0: no guarantee


def test_the_divisor_does_not_depend_on_the_number_of_uploads() -> None:
    """q as uploaded sums exactly over any number of silos (in silo order, as the plain sum adds), so the server's
    q N is the same bit for bit whoever took part; through a fixed-point codec too."""
    from privsilo.mechanisms.dp_fedavg.mechanism import public_rate
    from privsilo.protocols.fixed_point import FixedPointCodec

    codec = FixedPointCodec(fractional_bits=24, max_summands=1000)
    for q in (0.3, 1 / 3, 0.05, 0.001, 0.7):
        rates = set()
        for n in (1, 2, 3, 7, 10, 99, 1000):
            plain = 0.0
            for _ in range(n):
                plain += public_rate(q)
            secure = codec.decode(sum(codec.encode(np.array([public_rate(q)])) for _ in range(n)), summands=n)[0]
            rates |= {plain / n, secure / n}
        assert len(rates) == 1 and abs(rates.pop() - q) <= 2**-21


def test_clip_to_norm() -> None:
    rng = np.random.default_rng(0)
    for scale in (0.1, 1.0, 10.0):
        vector = rng.standard_normal(50) * scale
        clipped = clip_to_norm(vector, 1.0)
        assert np.linalg.norm(clipped) <= 1.0 + 1e-12
        assert np.allclose(clipped / np.linalg.norm(clipped), vector / np.linalg.norm(vector))
        if np.linalg.norm(vector) <= 1.0:
            assert np.array_equal(clipped, vector)


@pytest.mark.parametrize(("clipping", "z_delta"), [("fixed", 2.0), ("adaptive", 1 / np.sqrt(2.0**-2 - 6.0**-2))])
def test_server_adds_z_delta_c_noise_and_divides_by_q_n(clipping, z_delta) -> None:
    """The noise on the sum has standard deviation z_delta C (z itself with fixed clipping; 2.12 rather than 2 with
    sigma_b = 3), and the divisor is q N whatever the realised count."""
    adaptive = {"clipped_count_stddev": 3.0} if clipping == "adaptive" else {}
    params = DpFedAvgParams(noise_multiplier=2.0, clip_norm=0.5, clipping=clipping, **adaptive)
    assert params.update_noise_multiplier() == pytest.approx(z_delta, rel=1e-12)
    server = DpFedAvgServer(params, num_silos=40)
    d, q, participants = 200_000, 0.25, 7
    server.round_plan(np.random.default_rng(1), round_index=0)
    total = np.concatenate([np.full(d, 3.0), [0.5] * bool(adaptive), [q * participants]])
    (new,) = server.aggregate((np.zeros(d),), total, num_participants=participants)
    noise = new * (q * 40) - 3.0
    assert abs(noise.mean()) < 5 * z_delta * 0.5 / np.sqrt(d)
    assert noise.std() == pytest.approx(z_delta * 0.5, rel=0.01)


@pytest.mark.parametrize("z", [0.5, 1.0, 3.0])
def test_adaptive_round_is_one_gaussian_of_multiplier_z(z) -> None:
    """Andrew et al.'s accounting: the update (noise multiplier z_delta) and the centred count (sensitivity 1/2,
    noise sigma_b, so multiplier 2 sigma_b) composed by dp_accounting's PLD give the epsilon of one Gaussian of
    multiplier z."""
    sigma_b = 2.0 * z
    z_delta = DpFedAvgParams(noise_multiplier=z, clipping="adaptive", clipped_count_stddev=sigma_b).update_noise_multiplier()
    pair = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z_delta), dp_accounting.GaussianDpEvent(2 * sigma_b)])
    both, one = dp_accounting.pld.PLDAccountant(), dp_accounting.pld.PLDAccountant()
    both.compose(pair)
    one.compose(dp_accounting.GaussianDpEvent(z))
    assert both.get_epsilon(DELTA) == pytest.approx(one.get_epsilon(DELTA), rel=1e-3)


@pytest.mark.parametrize("quantile", [0.2, 0.5, 0.9])
def test_adaptive_clip_norm_tracks_the_target_quantile(quantile) -> None:
    """200 silos with fixed update norms (log-normal), all sampled: after 300 rounds of the server's geometric update
    the clip norm lies within 10 % of the norms' quantile, from a start 10x too large."""
    norms = np.exp(np.random.default_rng(0).normal(0.0, 0.5, 200))
    params = DpFedAvgParams(noise_multiplier=1.0, clip_norm=10 * float(np.quantile(norms, quantile)), clipping="adaptive",
                            target_quantile=quantile, clipped_count_stddev=1.0)
    server, rng, state = DpFedAvgServer(params, num_silos=200), np.random.default_rng(1), (np.zeros(1),)
    for round_index in range(300):
        clip = server.round_plan(rng, round_index=round_index).value
        unclipped = (norms <= clip).sum() - norms.size / 2  # the silos' b_i - 1/2, summed
        state = server.aggregate(state, np.array([0.0, unclipped, 1.0 * norms.size]), num_participants=norms.size)
    assert server.clip_norm == pytest.approx(np.quantile(norms, quantile), rel=0.1)


def test_params_refuse_bad_values() -> None:
    for bad in ({"clip_norm": 0.0}, {"noise_multiplier": -1.0}, {"delta": 1.0}, {"noise": "local"},
                {"clipping": "adaptive", "target_quantile": 1.0, "clipped_count_stddev": 5.0}):
        with pytest.raises(ValueError):
            DpFedAvgParams(**bad)
    with pytest.raises(ValueError, match="clipped_count_stddev: clipping 'adaptive' needs"):
        DpFedAvgParams(clipping="adaptive")
    with pytest.raises(ValueError, match="clipped_count_stddev: leaves no noise .* noise_multiplier / 2 = 0.5"):
        DpFedAvgParams(clipping="adaptive", clipped_count_stddev=0.5)
    with pytest.raises(ValueError, match="target_quantile: does nothing here"):
        DpFedAvgParams(target_quantile=0.3)


@pytest.mark.parametrize("clipping", ["fixed", "adaptive"])
def test_silo_uploads_its_clipped_update_and_canary_clients_add_c_u(clipping) -> None:
    """``[clip(delta, C), (b - 1/2), q]``; each hosted canary client adds C u_c and, with adaptive clipping, one
    unclipped member to the count (its norm is C)."""
    adaptive = {"clipped_count_stddev": 1.0} if clipping == "adaptive" else {}
    params = DpFedAvgParams(clip_norm=0.01, clipping=clipping, **adaptive)
    canaries = SiloCanaries(ids=np.array([3, 8]), seed=11)
    plan = ClipNorm(0.01) if adaptive else None
    contributions = []
    for hosted in (None, canaries):
        context = tiny_silo_context(canaries=hosted)
        start = np.concatenate([p.detach().reshape(-1).double().numpy() for p in context.model.parameters()])
        contributions.append(DpFedAvg(params).silo(context).contribute_with_plan((start,), round_index=4, plan=plan))
    without, with_canaries = contributions
    d = start.size
    assert np.linalg.norm(without.vector[:d]) == pytest.approx(0.01)  # local SGD moves more than 0.01: clipped
    assert without.vector[-1] == 1.0 and without.vector.size == d + 1 + bool(adaptive)
    if adaptive:
        assert without.vector[d] == -0.5 and with_canaries.vector[d] == -0.5 + 2 * 0.5
    added = with_canaries.vector[:d] - without.vector[:d]
    assert np.allclose(added, 0.01 * canaries.directions(d).astype(np.float64).sum(axis=0), atol=1e-9)
    assert without.events == with_canaries.events == (ClientLevelGaussianEvent(round_index=4, sampling_rate=1.0, noise_multiplier=1.0),)


def test_audit_refuses_client_sampling(tmp_path) -> None:
    from privsilo.simulator.errors import ScenarioError
    from privsilo.simulator.scenario import load_scenario_file, validate_scenario

    raw = load_scenario_file(REPO / "scenarios" / "audits" / "dp_fedavg_digits.yaml")
    raw["federation"] = {**raw["federation"], "client_rate": 0.5}
    with pytest.raises(ScenarioError, match="federation.client_rate"):
        validate_scenario(raw)


@pytest.mark.parametrize(("rate", "protocol", "refused"), [
    (4e-7, {"secure_aggregation": False}, True),  # rounds to 0 in 2^-20 steps
    (1e-3, {"secure_aggregation": True, "fractional_bits": 8}, True),  # rounds to 0 in the codec's 2^-8 steps
    (1e-3, {"secure_aggregation": True, "fractional_bits": 24}, False),
    (1e-3, {"secure_aggregation": False}, False),
])
def test_a_client_rate_that_rounds_to_zero_on_its_way_to_the_divisor_is_refused(rate, protocol, refused) -> None:
    from privsilo.simulator.errors import ScenarioError
    from privsilo.simulator.scenario import validate_scenario
    from tests.support.scenarios import small_scenario

    raw = small_scenario(mechanism={"name": "dp_fedavg"}, protocol=protocol)
    raw["federation"] = {**raw["federation"], "client_rate": rate}
    if not refused:
        validate_scenario(raw)
        return
    with pytest.raises(ScenarioError, match="federation.client_rate: got .*rounds to 0"):
        validate_scenario(raw)
