"""Renyi DP of the Poisson-subsampled Gaussian mechanism, and its conversion to (epsilon, delta), failing closed.

Every accountant in privsilo (``dp_sgd``'s, rPDP-FL's, ULDP-FL's user-level and GROUP-k) gets its RDP from
[`poisson_gaussian_rdp`][privsilo.mechanisms.rdp.poisson_gaussian_rdp] and its epsilon from [`epsilon_from_rdp`][privsilo.mechanisms.rdp.epsilon_from_rdp], so one evaluation is checked once:

* one step at order ``a`` (Mironov, Talwar, Zhang 2019, Sec. 3; rPDP-FL Lemma 4): ``rho(a, q) = log A_a(q) / (a-1)``;
* **integer orders** are exact: ``A_a - 1`` is a finite sum of positive terms, summed in log space, so no
  cancellation can occur at any order, noise or rate (Opacus' fractional-order series, used at orders such as
  ``beta * 2^c`` by group privacy, returns negative or NaN values from orders near 50 at sigma >= 8);
* **fractional orders** use the two series of Mironov et al. 2019, Sec. 3.3. Each value must lie within the bounds
  the exact integer orders put on it (``(a - 1) rho(a)`` is convex in ``a`` and ``rho`` non-decreasing); a value
  that does not is an error, never an epsilon;
* [`check_rdp_curve`][privsilo.mechanisms.rdp.check_rdp_curve] refuses any curve with a NaN, a negative value or a value that decreases from one order
  to the next (beyond rounding), which every valid RDP curve, composed or not, satisfies.

Pure numpy/scipy (no torch, Opacus or Ray); vectorised over the sampling rate ``q``.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import special

# Opacus' RDPAccountant.DEFAULT_ALPHAS (tests check the two agree), written out so this module needs no torch.
DEFAULT_ORDERS: tuple[float, ...] = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))

# The fractional-order series stops after the first term whose two parts are both below exp(-30) (as Opacus).
_SERIES_STOP_LOG = -30.0
_FIRST_CHUNK = 16
_MAX_CHUNK = 1024
# Relative slack for rounding when comparing RDP values of neighbouring orders.
_ROUNDING = 1e-9


class RdpError(ArithmeticError):
    """An RDP value that no correct evaluation can produce (NaN, negative, decreasing in the order)."""


def _log_a_integer(q: np.ndarray, sigma: float, order: int) -> np.ndarray:
    """log A_a(q) at integer order a for 0 < q < 1, written as log(1 + sum of positive terms).

    Since the binomial weights sum to 1, ``A_a - 1 = sum_{l>=2} C(a,l) (1-q)^(a-l) q^l (exp(l(l-1)/(2 sigma^2)) - 1)``:
    every term is positive, so small rates keep full relative precision and large orders cannot cancel.
    """
    l = np.arange(2, order + 1, dtype=np.float64)
    log_binom = special.gammaln(order + 1.0) - special.gammaln(l + 1.0) - special.gammaln(order - l + 1.0)
    exponent = l * (l - 1.0) / (2.0 * sigma**2)
    log_expm1 = exponent + np.log(-np.expm1(-exponent))
    terms = log_binom + log_expm1 + np.log(q)[:, None] * l + np.log1p(-q)[:, None] * (order - l)
    return np.logaddexp(0.0, special.logsumexp(terms, axis=1))


def _log_a_fractional(q: np.ndarray, sigma: float, order: float) -> np.ndarray:
    """log A_a(q) at fractional order a for 0 < q < 1: the two series of Mironov, Talwar, Zhang 2019, Sec. 3.3.

    Term i of the first series is ``C(a,i) q^i (1-q)^(a-i) exp((i^2-i)/(2 sigma^2)) Phi((z0-i)/sigma)`` and of the
    second ``C(a,i) q^(a-i) (1-q)^i exp((j^2-j)/(2 sigma^2)) Phi((j-z0)/sigma)`` with ``j = a - i`` and
    ``z0 = sigma^2 log(1/q - 1) + 1/2``; the signs of C(a, i) alternate once i > a. Each rate runs, in chunks of
    terms, up to the first i whose two terms are both below exp(-30); positive and negative terms are summed
    separately in log space (their difference is checked by the caller against the integer orders).
    """
    log_q, log_1mq = np.log(q), np.log1p(-q)
    z0 = sigma**2 * (log_1mq - log_q) + 0.5
    neg_inf = np.full(q.shape, -np.inf)
    log_pos, log_neg = neg_inf.copy(), neg_inf.copy()
    active = np.arange(q.size)
    start, chunk = 0, _FIRST_CHUNK
    while active.size:
        i = np.arange(start, start + chunk, dtype=np.float64)
        j = order - i
        coef = special.binom(order, i)
        log_coef = np.log(np.abs(coef))
        lq, l1q, z = log_q[active, None], log_1mq[active, None], z0[active, None]
        s0 = log_coef + i * lq + j * l1q + (i * i - i) / (2 * sigma**2) + special.log_ndtr((z - i) / sigma)
        s1 = log_coef + j * lq + i * l1q + (j * j - j) / (2 * sigma**2) + special.log_ndtr((j - z) / sigma)
        small = np.maximum(s0, s1) < _SERIES_STOP_LOG
        done = small.any(axis=1)
        last = np.where(done, small.argmax(axis=1), chunk - 1)
        keep = np.arange(chunk) <= last[:, None]
        both = np.where(keep, np.logaddexp(s0, s1), -np.inf)
        positive = coef > 0
        log_pos[active] = np.logaddexp(log_pos[active], special.logsumexp(np.where(positive, both, -np.inf), axis=1))
        log_neg[active] = np.logaddexp(log_neg[active], special.logsumexp(np.where(positive, -np.inf, both), axis=1))
        active = active[~done]
        start += chunk
        chunk = min(2 * chunk, _MAX_CHUNK)
    with np.errstate(invalid="ignore"):  # log_neg > log_pos (a broken series) gives NaN: the caller refuses it
        return log_pos + np.log1p(-np.exp(log_neg - log_pos))


def _integer_rdp(rates: np.ndarray, sigma: float, order: int) -> np.ndarray:
    """Exact one-step RDP at integer ``order`` (>= 2) for rates in (0, 1); 0 at order 1 (the KL limit's floor)."""
    if order < 2:
        return np.zeros(rates.shape)
    return _log_a_integer(rates, sigma, order) / (order - 1.0)


def _fractional_rdp(rates: np.ndarray, sigma: float, order: float) -> np.ndarray:
    """One-step RDP at fractional ``order`` for rates in (0, 1), checked against the exact integer orders.

    ``G(a) = (a - 1) rho(a)`` is a log-moment-generating function, hence convex in ``a``, with ``G(1) = 0``. Between
    integers ``n < a < n + 1`` it therefore lies below the chord from ``n`` to ``n + 1`` and above the secant lines
    through ``(n - 1, n)`` and ``(n + 1, n + 2)`` extended to ``a``, and ``rho`` is non-decreasing. A series value
    outside these exact bounds (beyond rounding) is an error; one just below them is raised to them.
    """
    n = math.floor(order)

    def g(k: int) -> np.ndarray:
        return (k - 1.0) * _integer_rdp(rates, sigma, k)

    g_n, g_next = g(n), g(n + 1)
    upper = g_n + (order - n) * (g_next - g_n)
    lower = np.maximum((order - 1.0) * _integer_rdp(rates, sigma, n), g_next + (order - n - 1.0) * (g(n + 2) - g_next))
    if n >= 2:
        lower = np.maximum(lower, g_n + (order - n) * (g_n - g(n - 1)))
    value = _log_a_fractional(rates, sigma, order)  # G(a) = log A_a(q)
    slack = _ROUNDING * np.abs(upper) + 1e-14
    broken = ~np.isfinite(value) | (value < lower - slack) | (value > upper + slack)
    if broken.any():
        q = rates[broken][0]
        raise RdpError(
            f"RDP series at order {order} (q={q}, sigma={sigma}) gave {value[broken][0] / (order - 1.0)!r}, outside the "
            f"bounds the exact integer orders {n - 1}..{n + 2} put on it; refusing to report an epsilon"
        )
    return np.maximum(value, lower) / (order - 1.0)


def poisson_gaussian_rdp(rates: np.ndarray, sigma: float, orders: np.ndarray) -> np.ndarray:
    """RDP of one Poisson-subsampled Gaussian step, shape ``(len(orders), len(rates))``.

    ``rates`` in [0, 1] (flat), ``sigma`` > 0, ``orders`` > 1 (flat). ``q = 0`` gives 0 and ``q = 1`` the
    Gaussian mechanism's ``a / (2 sigma^2)``; integer orders are exact, fractional ones checked (module notes).
    """
    rates, orders = np.asarray(rates, dtype=np.float64), np.asarray(orders, dtype=np.float64)
    if not (math.isfinite(sigma) and sigma > 0.0):
        raise ValueError(f"noise multiplier must be finite and > 0, got {sigma!r}")
    if not np.all((rates >= 0.0) & (rates <= 1.0)):
        raise ValueError(f"sampling rates must lie in [0, 1], got {rates[~((rates >= 0.0) & (rates <= 1.0))][0]!r}")
    if not np.all(np.isfinite(orders) & (orders > 1.0)):
        raise ValueError("orders must be finite and > 1")
    out = np.zeros((orders.size, rates.size))
    out[:, rates == 1.0] = orders[:, None] / (2.0 * sigma**2)
    inner = (rates > 0.0) & (rates < 1.0)
    if inner.any():
        for row, order in enumerate(orders):
            if float(order).is_integer():
                out[row, inner] = _integer_rdp(rates[inner], sigma, int(order))
            else:
                out[row, inner] = _fractional_rdp(rates[inner], sigma, float(order))
    return out


def check_rdp_curve(orders: np.ndarray, rdp: np.ndarray) -> None:
    """Raise [`RdpError`][privsilo.mechanisms.rdp.RdpError] unless ``rdp`` (rows: ``orders``; any further axes) is a possible RDP curve.

    Any RDP curve is >= 0, has no NaN (+inf is allowed: no bound at that order) and is non-decreasing in the
    order (Renyi divergence is); composition, maxima over silos and group scaling keep all three.
    """
    orders, rdp = np.asarray(orders, dtype=np.float64), np.asarray(rdp, dtype=np.float64)
    if np.isnan(rdp).any():
        raise RdpError("RDP curve has NaN values; refusing to report an epsilon")
    if (rdp < 0.0).any():
        raise RdpError(f"RDP curve has a negative value ({rdp.min()!r}); refusing to report an epsilon")
    sort = np.argsort(orders, kind="stable")
    ordered = rdp[sort]
    with np.errstate(invalid="ignore"):  # inf - inf: both unbounded, not a decrease
        drop = ordered[:-1] - ordered[1:] > _ROUNDING * np.abs(ordered[:-1]) + 1e-15
    if drop.any():
        at = np.nonzero(drop)[0][0]
        raise RdpError(
            f"RDP curve decreases from order {orders[sort][at]} to {orders[sort][at + 1]}; refusing to report an epsilon"
        )


def conversion_offset(orders: np.ndarray, delta: float) -> np.ndarray:
    """Balle et al. 2020, Thm. 21 (as Opacus' ``get_privacy_spent``): epsilon = rho + this, at each order."""
    orders = np.asarray(orders, dtype=np.float64)
    return np.log((orders - 1.0) / orders) - (math.log(delta) + np.log(orders)) / (orders - 1.0)


def epsilon_from_rdp(orders: np.ndarray, rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """(epsilon, best order) of one RDP curve at ``delta`` (Balle et al. 2020, Thm. 21), after
    [`check_rdp_curve`][privsilo.mechanisms.rdp.check_rdp_curve]; ``(inf, nan)`` when no order gives a finite bound."""
    orders, rdp = np.asarray(orders, dtype=np.float64), np.asarray(rdp, dtype=np.float64)
    check_rdp_curve(orders, rdp)
    if not np.isfinite(rdp).any():
        return math.inf, math.nan
    values = rdp + conversion_offset(orders, delta)
    best = int(np.nanargmin(values))
    return max(float(values[best]), 0.0), float(orders[best])
