"""RdpAccountant against Opacus' RDPAccountant and Google's dp_accounting; composition across silos and rounds."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import dp_accounting
import numpy as np
import pytest
from opacus.accountants import RDPAccountant

from privsilo.mechanisms.accounting import DEFAULT_ORDERS, RdpAccountant
from privsilo.mechanisms.base import NoGuarantee
from privsilo.mechanisms.events import PoissonGaussianEvent

SETTINGS = [  # (q, sigma, steps, delta)
    (0.01, 1.1, 1000, 1e-5),
    (0.004, 0.8, 10_000, 1e-6),
    (0.1, 2.0, 50, 1e-5),
    (0.25, 5.0, 7, 1e-3),
    (1.0, 3.0, 20, 1e-5),
]


def _opacus_epsilon(schedule: list[tuple[float, float, int]], delta: float) -> float:
    accountant = RDPAccountant()
    for q, sigma, steps in schedule:
        for _ in range(steps):
            accountant.step(noise_multiplier=sigma, sample_rate=q)
    return accountant.get_epsilon(delta)


def _google_epsilon(q: float, sigma: float, steps: int, delta: float, *, orders: tuple[float, ...]) -> float:
    accountant = dp_accounting.rdp.RdpAccountant(orders=list(orders))
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize(("q", "sigma", "steps", "delta"), SETTINGS)
def test_single_silo_matches_opacus_rdp_accountant(q: float, sigma: float, steps: int, delta: float) -> None:
    accountant = RdpAccountant(delta=1e-5)
    accountant.record(0, PoissonGaussianEvent(sampling_rate=q, noise_multiplier=sigma, steps=steps))
    assert accountant.epsilon(delta) == pytest.approx(_opacus_epsilon([(q, sigma, steps)], delta), rel=1e-9, abs=0)


@pytest.mark.parametrize(("q", "sigma", "steps", "delta"), SETTINGS)
def test_single_silo_agrees_with_google_dp_accounting(q: float, sigma: float, steps: int, delta: float) -> None:
    """Both libraries convert RDP to DP with Balle et al. 2020, Thm. 21 and agree on log A_alpha at integer orders
    (Mironov et al. 2019, Sec. 3.2), so over integer orders epsilon matches to 1e-9. At fractional orders (Sec. 3.3)
    dp_accounting sums the *absolute values* of the alternating binomial series (gammaln is log|Gamma|), a
    conservative upper bound, while Opacus keeps the signs; with the default orders our epsilon is therefore never
    above dp_accounting's and within 1e-4 relative of it (observed up to 8e-6 for q=0.004, sigma=0.8)."""
    event = PoissonGaussianEvent(sampling_rate=q, noise_multiplier=sigma, steps=steps)
    integer_orders = tuple(float(order) for order in DEFAULT_ORDERS if float(order).is_integer())
    on_integers = RdpAccountant(delta=delta, orders=integer_orders)
    on_integers.record(3, event)
    want = _google_epsilon(q, sigma, steps, delta, orders=integer_orders)
    assert on_integers.epsilon(delta) == pytest.approx(want, rel=1e-9, abs=0)

    default = RdpAccountant(delta=1e-5)
    default.record(3, event)
    google = _google_epsilon(q, sigma, steps, delta, orders=DEFAULT_ORDERS)
    assert default.epsilon(delta) <= google * (1 + 1e-12)
    assert default.epsilon(delta) == pytest.approx(google, rel=1e-4, abs=0)


def test_rounds_accumulate_and_equal_events_merge() -> None:
    accountant = RdpAccountant(delta=1e-5)
    schedule = [(0.02, 1.0, 30), (0.02, 1.0, 30), (0.05, 1.5, 10), (0.02, 1.0, 5)]
    for q, sigma, steps in schedule:
        accountant.record(0, PoissonGaussianEvent(sampling_rate=q, noise_multiplier=sigma, steps=steps))
    assert accountant.history(0) == ((0.02, 1.0, 60), (0.05, 1.5, 10), (0.02, 1.0, 5))
    assert accountant.epsilon(1e-5) == pytest.approx(_opacus_epsilon(schedule, 1e-5), rel=1e-9, abs=0)

    one_round = RdpAccountant(delta=1e-5)
    one_round.record(0, PoissonGaussianEvent(sampling_rate=0.02, noise_multiplier=1.0, steps=30))
    assert accountant.epsilon(1e-5) > one_round.epsilon(1e-5)


def test_silos_compose_in_parallel_by_max() -> None:
    accountant = RdpAccountant(delta=1e-5)
    events = {
        0: PoissonGaussianEvent(sampling_rate=0.01, noise_multiplier=1.0, steps=100),
        1: PoissonGaussianEvent(sampling_rate=0.05, noise_multiplier=1.0, steps=100),
        2: PoissonGaussianEvent(sampling_rate=0.01, noise_multiplier=2.0, steps=100),
    }
    for silo, event in events.items():
        accountant.record(silo, event)
    # Silo 1 takes part in a second round; silo 0 and 2 do not, so they add nothing.
    accountant.record(1, events[1])

    per_silo = accountant.epsilon_per_silo(1e-5)
    assert per_silo[0] == pytest.approx(_opacus_epsilon([(0.01, 1.0, 100)], 1e-5), rel=1e-9)
    assert per_silo[1] == pytest.approx(_opacus_epsilon([(0.05, 1.0, 200)], 1e-5), rel=1e-9)
    assert per_silo[2] == pytest.approx(_opacus_epsilon([(0.01, 2.0, 100)], 1e-5), rel=1e-9)
    assert accountant.epsilon(1e-5) == max(per_silo.values()) == per_silo[1]
    opacus = RDPAccountant()
    for _ in range(200):
        opacus.step(noise_multiplier=1.0, sample_rate=0.05)
    assert accountant.best_order(1e-5) == opacus.get_privacy_spent(delta=1e-5)[1]


def test_empty_accountant_and_no_noise() -> None:
    accountant = RdpAccountant(delta=1e-5)
    assert accountant.epsilon(1e-5) == 0.0
    assert accountant.epsilon_per_silo(1e-5) == {}
    assert math.isnan(accountant.best_order(1e-5))
    accountant.record(0, PoissonGaussianEvent(sampling_rate=0.5, noise_multiplier=1.0, steps=0))
    accountant.record(0, PoissonGaussianEvent(sampling_rate=0.0, noise_multiplier=1.0, steps=10))
    assert accountant.epsilon_per_silo(1e-5) == {}
    accountant.record(1, PoissonGaussianEvent(sampling_rate=0.5, noise_multiplier=0.0, steps=1))
    assert accountant.epsilon(1e-5) == math.inf


@dataclass(frozen=True)
class _LaplaceEvent:
    scale: float


@pytest.mark.parametrize(
    ("silo_id", "event", "error"),
    [
        (0, _LaplaceEvent(scale=1.0), TypeError),
        ("0", PoissonGaussianEvent(sampling_rate=0.1, noise_multiplier=1.0, steps=1), TypeError),
        (0, PoissonGaussianEvent(sampling_rate=0.1, noise_multiplier=1.0, steps=1.5), TypeError),
        (0, PoissonGaussianEvent(sampling_rate="0.1", noise_multiplier=1.0, steps=1), TypeError),
        (0, PoissonGaussianEvent(sampling_rate=1.1, noise_multiplier=1.0, steps=1), ValueError),
        (0, PoissonGaussianEvent(sampling_rate=-0.1, noise_multiplier=1.0, steps=1), ValueError),
        (0, PoissonGaussianEvent(sampling_rate=0.1, noise_multiplier=-1.0, steps=1), ValueError),
        (0, PoissonGaussianEvent(sampling_rate=0.1, noise_multiplier=math.nan, steps=1), ValueError),
        (0, PoissonGaussianEvent(sampling_rate=0.1, noise_multiplier=1.0, steps=-2), ValueError),
    ],
)
def test_invalid_events_raise_without_changing_state(silo_id: object, event: object, error: type) -> None:
    accountant = RdpAccountant(delta=1e-5)
    accountant.record(0, PoissonGaussianEvent(sampling_rate=0.1, noise_multiplier=1.0, steps=10))
    before = accountant.epsilon(1e-5)
    with pytest.raises(error):
        accountant.record(silo_id, event)
    assert accountant.history(0) == ((0.1, 1.0, 10),)
    assert accountant.epsilon(1e-5) == before


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5])
def test_invalid_delta_raises(delta: float) -> None:
    accountant = RdpAccountant(delta=1e-5)
    with pytest.raises(ValueError, match="delta"):
        accountant.epsilon(delta)


def test_report_is_json_ready_at_the_target_delta() -> None:
    accountant = RdpAccountant(delta=1e-6)
    assert accountant.report()["epsilon"] == 0.0
    accountant.record(4, PoissonGaussianEvent(sampling_rate=0.01, noise_multiplier=1.1, steps=100))
    report = accountant.report()
    assert report["delta"] == 1e-6
    assert report["epsilon"] == accountant.epsilon(1e-6) == report["epsilon_per_silo"]["4"]
    assert report["best_order"] == accountant.best_order(1e-6)
    json.dumps(report, allow_nan=False)
    accountant.record(5, PoissonGaussianEvent(sampling_rate=0.01, noise_multiplier=0.0, steps=1))
    assert accountant.report()["epsilon"] is None
    with pytest.raises(ValueError, match="delta"):
        RdpAccountant(delta=0.0)


def test_incremental_accountant_equals_opacus_from_scratch_over_random_events() -> None:
    """A seeded random sequence of 30 rounds over 4 silos, alternating between three (q, sigma) with random step
    counts: at checkpoints, every silo's epsilon and the best order equal a from-scratch Opacus RDPAccountant
    over that silo's history (its steps per (sigma, q) summed: RDP composition is a sum)."""
    rng = np.random.default_rng(11)
    settings = [(0.01, 1.1), (0.02, 1.0), (0.01, 0.7)]
    accountant = RdpAccountant(delta=1e-5)
    steps_by_silo: dict[int, dict[tuple[float, float], int]] = {}
    changes = 0
    for event_index in range(1, 31):
        silo = int(rng.integers(4))
        q, sigma = settings[int(rng.integers(len(settings)))]
        steps = int(rng.integers(1, 60))
        accountant.record(silo, PoissonGaussianEvent(sampling_rate=q, noise_multiplier=sigma, steps=steps))
        history = steps_by_silo.setdefault(silo, {})
        changes += bool(history) and (sigma, q) not in history
        history[(sigma, q)] = history.get((sigma, q), 0) + steps
        if event_index % 15:
            continue
        per_silo = accountant.epsilon_per_silo(1e-5)
        spent = {}
        for other, totals in steps_by_silo.items():
            opacus = RDPAccountant()
            opacus.history = [(sigma_, q_, n) for (sigma_, q_), n in totals.items()]
            spent[other] = opacus.get_privacy_spent(delta=1e-5)
            assert per_silo[other] == pytest.approx(spent[other][0], rel=1e-9, abs=0)
        assert accountant.best_order(1e-5) == max(spent.values())[1]
    assert len(steps_by_silo) == 4 and changes > 4  # every silo took part, under alternating (q, sigma)


def test_one_step_rdp_is_computed_once_per_rate_and_sigma(monkeypatch) -> None:
    """RDP composes additively: reading epsilon after every round must not recompute the history."""
    import privsilo.mechanisms.accounting

    calls = []
    original = privsilo.mechanisms.accounting.poisson_gaussian_rdp

    def counted(rates, sigma, orders):
        calls.extend((float(q), sigma) for q in rates)
        return original(rates, sigma, orders)

    monkeypatch.setattr(privsilo.mechanisms.accounting, "poisson_gaussian_rdp", counted)
    accountant = RdpAccountant(delta=1e-5)
    for round_index in range(6):
        for silo in range(3):
            q = 0.01 if silo < 2 else 0.02
            accountant.record(silo, PoissonGaussianEvent(sampling_rate=q, noise_multiplier=1.0, steps=50))
        accountant.report()
    assert sorted(calls) == [(0.01, 1.0), (0.02, 1.0)]
    assert accountant.epsilon_per_silo(1e-5)[2] == pytest.approx(_opacus_epsilon([(0.02, 1.0, 300)], 1e-5), rel=1e-9)


def test_enrolled_silos_that_never_took_part_are_reported_with_zero() -> None:
    accountant = RdpAccountant(delta=1e-5)
    accountant.enrol([0, 1, 2])
    assert accountant.report()["epsilon_per_silo"] == {"0": 0.0, "1": 0.0, "2": 0.0}
    accountant.record(1, PoissonGaussianEvent(sampling_rate=0.01, noise_multiplier=1.0, steps=100))
    report = accountant.report()
    assert report["epsilon_per_silo"]["0"] == report["epsilon_per_silo"]["2"] == 0.0
    assert report["epsilon"] == report["epsilon_per_silo"]["1"] == pytest.approx(_opacus_epsilon([(0.01, 1.0, 100)], 1e-5), rel=1e-9)
    assert report["best_order"] == accountant.best_order(1e-5) > 1
    with pytest.raises(TypeError):
        accountant.enrol([3, "4"])
    assert set(accountant.report()["epsilon_per_silo"]) == {"0", "1", "2"}


def test_no_guarantee_lists_every_silo_without_an_epsilon() -> None:
    accountant = NoGuarantee()
    accountant.enrol([2, 0, 1])
    assert accountant.report() == {"guarantee": "none", "epsilon": None, "delta": None, "epsilon_per_silo": {"0": None, "1": None, "2": None}}
