"""Every RDP path (dp_sgd, rPDP-FL, ULDP-FL user-level and GROUP-k) against an independent 30-digit evaluation over a
grid spanning each regime of noise and rate (SIGMAS, RATES), and every accountant failing closed on a curve no
correct evaluation gives.

How the grid check bounds the whole minimum with one reference evaluation per setting: privsilo's epsilon is
``rho(a*) + offset(a*)`` at its best order ``a*``. If ``rho(a*)`` is at least the reference RDP at ``a*``, then
privsilo's epsilon is at least the reference's value at ``a*``, which is at least the reference's minimum over the
same orders: no printed epsilon can be below the exact one. The tests also require agreement to 1e-9 relative at
``a*`` (the evaluation is exact, not merely conservative).
"""
from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import privsilo.mechanisms.accounting
import privsilo.mechanisms.rdp
import privsilo.mechanisms.rpdp.accountant
import privsilo.mechanisms.uldp.accountant
from privsilo.mechanisms.accounting import RdpAccountant
from privsilo.mechanisms.dp_fedavg.accountant import ClientLevelAccountant
from privsilo.mechanisms.events import ClientLevelGaussianEvent, PoissonGaussianEvent
from privsilo.mechanisms.rdp import DEFAULT_ORDERS, RdpError, check_rdp_curve, conversion_offset, epsilon_from_rdp, poisson_gaussian_rdp
from privsilo.mechanisms.rpdp import epsilon as rpdp_epsilon
from privsilo.mechanisms.rpdp import rdp_curve
from privsilo.mechanisms.uldp import epsilon as uldp_epsilon
from privsilo.mechanisms.uldp.accountant import group_exponent, group_rdp, user_level_epsilon
from tests.support.rdp_reference import balle_epsilon, step_rdp

# The grid spans each regime with its extreme and critical points (the 30-digit reference makes every point cost,
# and the accountants' own evaluation at ~150 orders runs twice per point); its best orders run from 1.1 (fractional)
# to 63 (the top of the order grid):
# - noise: 0.5 (the smallest: best orders 1.1-4.4, fractional), 2.0 (typical DP-SGD), 8.0 (where Opacus' fractional
#   series first breaks, from orders near 50: the onset of the regime the exact integer orders are for), 50.0 (the
#   largest: best order 63, and GROUP-k's record-level orders up to 64 x 63); sigma = 10 at large groups is also
#   checked against the review's values above;
# - rate: 0.001 (the smallest, deep amplification), 0.1 (moderate), 0.6 (past 1/2, where the series' split point
#   z0 = sigma^2 log(1/q - 1) + 1/2 is negative for sigma >= 2 and positive at 0.5), 0.9 (near 1: log(1 - q) large)
#   and 1.0 (no subsampling: the Gaussian mechanism's closed form, its own branch).
SIGMAS = (0.5, 2.0, 8.0, 50.0)
RATES = (0.001, 0.1, 0.6, 0.9, 1.0)
DELTA = 1e-5


def _agrees(ours: float, reference: float) -> bool:
    """At least the reference (up to rounding) and within 1e-9 of it."""
    slack = 1e-9 * abs(reference) + 1e-12
    return reference - slack <= ours <= reference + slack


def test_default_orders_are_opacus_orders() -> None:
    from opacus.accountants import RDPAccountant

    assert DEFAULT_ORDERS == tuple(RDPAccountant.DEFAULT_ALPHAS)


@pytest.mark.parametrize(
    ("group_k", "sigma", "q", "steps", "reference"),
    [(8, 10.0, 0.3, 100, 30.25), (16, 10.0, 0.2, 1, 3.617), (32, 10.0, 0.1, 500, 424.6)],
)
def test_group_k_at_large_sigma_is_the_exact_value(group_k, sigma, q, steps, reference) -> None:
    """The review's cases, where Opacus' series at fractional orders up to ~2,000 gave -973.7, -17.35, -12,846."""
    value = uldp_epsilon(
        variant="group", group_k=group_k, noise_multiplier=sigma, sampling_rate=q, local_steps=1, rounds=steps, delta=DELTA
    )
    assert value == pytest.approx(reference, rel=2e-4)


@pytest.mark.parametrize("group_k", [2, 4, 8, 16, 32, 64])
def test_group_k_never_below_the_exact_epsilon(group_k: int) -> None:
    c = group_exponent(group_k)
    for sigma in SIGMAS:
        for q in RATES:
            for steps in (1, 1000):
                schedule = [(q, sigma, steps)]
                value = uldp_epsilon(
                    variant="group", group_k=group_k, noise_multiplier=sigma, sampling_rate=q, local_steps=1,
                    rounds=steps, delta=DELTA,
                )
                betas, curve = group_rdp([schedule], group_k=group_k)
                again, beta = epsilon_from_rdp(betas, curve, DELTA)
                assert math.isfinite(value) and value >= 0.0 and value == again
                alpha = beta * 2**c
                assert float(alpha).is_integer() and beta >= 2.0
                assert (betas * 2**c >= 2 ** (c + 1)).all()  # Mironov's Prop. 2 holds at every order used
                with mpmath.workdps(30):
                    rho = 3**c * steps * step_rdp(q, sigma, alpha)
                reference = balle_epsilon(rho, beta, DELTA)
                assert _agrees(value, reference), (group_k, sigma, q, steps, value, reference)


@pytest.mark.parametrize("sigma", SIGMAS)
def test_dp_sgd_accountant_never_below_the_exact_epsilon(sigma: float) -> None:
    for q in RATES:
        for steps in (1, 1000):
            accountant = RdpAccountant(delta=DELTA)
            accountant.record(0, PoissonGaussianEvent(sampling_rate=q, noise_multiplier=sigma, steps=steps))
            value, order = accountant.epsilon(DELTA), accountant.best_order(DELTA)
            assert math.isfinite(value) and value >= 0.0
            with mpmath.workdps(30):
                reference = balle_epsilon(steps * step_rdp(q, sigma, order), order, DELTA)
            assert _agrees(value, reference), (sigma, q, steps, order, value, reference)


@pytest.mark.parametrize("sigma", SIGMAS)
def test_uldp_user_level_never_below_the_exact_epsilon(sigma: float) -> None:
    orders = np.asarray(DEFAULT_ORDERS)
    for user_rate in RATES:
        for rounds in (1, 500):
            value = user_level_epsilon(noise_multiplier=sigma, rounds=rounds, delta=DELTA, user_rate=user_rate)
            again, order = epsilon_from_rdp(orders, rounds * poisson_gaussian_rdp(np.array([user_rate]), sigma, orders)[:, 0], DELTA)
            assert math.isfinite(value) and value >= 0.0 and value == again
            with mpmath.workdps(30):
                reference = balle_epsilon(rounds * step_rdp(user_rate, sigma, order), order, DELTA)
            assert _agrees(value, reference), (sigma, user_rate, rounds, order, value, reference)


@pytest.mark.parametrize("sigma", SIGMAS)
def test_rpdp_third_party_never_below_the_exact_epsilon(sigma: float) -> None:
    """Theorem 1 for a third party: T rounds of Lemma 6's mixture of tau steps, at silo rate lambda = 0.5."""
    rates, rounds, local_steps, client_rate = np.array(RATES), 50, 4, 0.5
    setting = dict(noise_multiplier=sigma, rounds=rounds, local_steps=local_steps, client_rate=client_rate)
    values = rpdp_epsilon(rates, delta=DELTA, **setting)
    orders = np.asarray(DEFAULT_ORDERS)
    totals = rdp_curve(rates, **setting) + conversion_offset(orders, DELTA)[:, None]
    np.testing.assert_allclose(values, totals.min(axis=0), rtol=1e-12)  # the fast path finds the minimum
    for column, q in enumerate(RATES):
        order = float(orders[np.argmin(totals[:, column])])
        assert math.isfinite(values[column]) and values[column] >= 0.0
        with mpmath.workdps(30):
            a, lam = mpmath.mpf(order), mpmath.mpf(client_rate)
            rho_tau = local_steps * step_rdp(q, sigma, order)
            rho = rounds * mpmath.log(1 - lam + lam * mpmath.exp((a - 1) * rho_tau)) / (a - 1)
            reference = balle_epsilon(rho, order, DELTA)
        assert _agrees(float(values[column]), reference), (sigma, q, order, values[column], reference)


@pytest.mark.parametrize(
    "curve",
    [
        [0.1, float("nan"), 0.3],
        [0.1, -0.2, 0.3],
        [0.1, 0.3, 0.2],
        [-1e-3, 0.0, 0.0],
    ],
)
def test_an_impossible_curve_is_refused(curve) -> None:
    with pytest.raises(RdpError):
        epsilon_from_rdp(np.array([2.0, 3.0, 4.0]), np.array(curve), DELTA)


def test_possible_curves_pass() -> None:
    check_rdp_curve(np.array([2.0, 3.0, 4.0]), np.array([0.0, 0.0, 0.0]))
    check_rdp_curve(np.array([4.0, 2.0, 3.0]), np.array([0.3, 0.1, 0.2]))  # orders need not come sorted
    check_rdp_curve(np.array([2.0, 3.0, 4.0]), np.array([0.1, np.inf, np.inf]))
    assert epsilon_from_rdp(np.array([2.0, 3.0]), np.array([np.inf, np.inf]), DELTA) == (math.inf, pytest.approx(math.nan, nan_ok=True))


@pytest.mark.parametrize("factor", [-1.0, 0.5, 1.5])
def test_a_broken_fractional_series_is_refused(monkeypatch, factor) -> None:
    """A fractional-order value outside the bounds the exact integer orders put on it (convexity of (a-1) rho(a)
    and monotonicity of rho) is an error, not an epsilon: a negative value, half and one and a half times the
    true one at order 5.5 (q = 0.1, sigma = 2)."""
    series = privsilo.mechanisms.rdp._log_a_fractional
    monkeypatch.setattr(privsilo.mechanisms.rdp, "_log_a_fractional", lambda q, sigma, order: factor * series(q, sigma, order))
    with pytest.raises(RdpError, match="order 5.5"):
        poisson_gaussian_rdp(np.array([0.1]), 2.0, np.array([5.5]))


def test_no_spurious_refusal_at_the_default_orders() -> None:
    orders = np.array([order for order in DEFAULT_ORDERS if not float(order).is_integer()])
    rates = np.array([1e-9, 1e-6, 1e-3, 0.05, 0.3, 0.7, 0.99, 1 - 1e-9])
    for sigma in (0.1, 0.3, 1.0, 3.0, 10.0, 100.0):
        assert np.all(poisson_gaussian_rdp(rates, sigma, orders) >= 0.0)


def _dp_sgd_epsilon() -> float:
    accountant = RdpAccountant(delta=DELTA)
    accountant.record(0, PoissonGaussianEvent(sampling_rate=0.1, noise_multiplier=2.0, steps=10))
    return accountant.epsilon(DELTA)


def _dp_fedavg_epsilon() -> float:
    accountant = ClientLevelAccountant(delta=DELTA, noise_multiplier=2.0)
    accountant.record(0, ClientLevelGaussianEvent(round_index=0, sampling_rate=0.5, noise_multiplier=2.0))
    return accountant.report()["epsilon"]


def _negative_at_some_orders(rates, sigma, orders):
    """A broken evaluation: negative at integer orders 5 and 8 (ULDP GROUP-4's record-level alpha = 2 x 4) and at
    the fractional order 2.5 (reached by rPDP-FL's fast path only through its fractional rows)."""
    curve = poisson_gaussian_rdp(rates, sigma, orders)
    curve[np.isin(np.asarray(orders), (2.5, 5.0, 8.0))] = -0.1
    return curve


@pytest.mark.parametrize(
    ("module", "compute"),
    [
        (privsilo.mechanisms.accounting, lambda: _dp_sgd_epsilon()),
        (privsilo.mechanisms.accounting, lambda: uldp_epsilon(variant="avg_w", noise_multiplier=2.0, rounds=10, delta=DELTA)),
        (
            privsilo.mechanisms.uldp.accountant,
            lambda: uldp_epsilon(
                variant="group", group_k=1, noise_multiplier=2.0, sampling_rate=0.1, local_steps=1, rounds=10, delta=DELTA
            ),
        ),
        (
            privsilo.mechanisms.uldp.accountant,
            lambda: uldp_epsilon(
                variant="group", group_k=4, noise_multiplier=0.5, sampling_rate=0.5, local_steps=1, rounds=1000, delta=DELTA
            ),
        ),
        (
            privsilo.mechanisms.rpdp.accountant,
            lambda: rpdp_epsilon(0.5, noise_multiplier=0.5, rounds=100, local_steps=1, client_rate=1.0, delta=DELTA),
        ),
        (privsilo.mechanisms.accounting, _dp_fedavg_epsilon),
    ],
    ids=["dp_sgd", "uldp_user_level", "uldp_group_1", "uldp_group_4", "rpdp", "dp_fedavg"],
)
def test_every_accountant_fails_closed(monkeypatch, module, compute) -> None:
    monkeypatch.setattr(module, "poisson_gaussian_rdp", _negative_at_some_orders)
    with pytest.raises(RdpError):
        compute()


@pytest.mark.parametrize(("q", "sigma"), [(1e-11, 50.0), (1e-8, 1000.0), (1e-9, 0.3)])
def test_tiny_rates_give_an_epsilon_not_an_error(q, sigma) -> None:
    """Rounding of RDP values near 1e-26 must not read as an impossible curve."""
    accountant = RdpAccountant(delta=DELTA)
    accountant.record(0, PoissonGaussianEvent(sampling_rate=q, noise_multiplier=sigma, steps=1))
    assert 0.0 <= accountant.epsilon(DELTA) < math.inf


@pytest.mark.parametrize(("rates", "sigma"), [([0.1], 0.0), ([0.1], float("nan")), ([1.5], 1.0), ([float("nan")], 1.0)])
def test_the_evaluation_refuses_impossible_inputs(rates, sigma) -> None:
    with pytest.raises(ValueError):
        poisson_gaussian_rdp(np.array(rates), sigma, np.array([2.5]))
