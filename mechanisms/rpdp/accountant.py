"""Record-level RDP accountant of rPDP-FL (Liu et al., CCS 2024, Lemma 4, Lemma 6 and Theorem 1).

A record sampled with probability ``q`` in each of ``local_steps`` (tau) Poisson-subsampled Gaussian steps per
round, in a silo that the server samples with probability ``client_rate`` (lambda) in each of ``rounds`` (T) rounds:

* one step (Lemma 4; Mironov, Talwar, Zhang 2019, Sec. 3.2-3.3): ``rho(a, q) = log A_a(q) / (a - 1)``;
* one round of local training (Lemma 7): ``rho_tau = tau * rho(a, q)``;
* silo sampling (Lemma 6): ``rho_{tau,lambda} = log(1 - lambda + lambda * exp((a - 1) rho_tau)) / (a - 1)``;
* T rounds (Theorem 1): a third party sees ``T * rho_{tau,lambda}``; the paper gives the honest-but-curious
  server ``lambda * T * rho_tau``.

The server knows which silos it sampled, so ``lambda * T * rho_tau`` is only the *expected* cost of a record: a
silo sampled more often than ``lambda * T`` times spends more. It is **not** an upper bound; enforcing a budget
against the server must use the realised number of participations ``k`` (``participations=k``: ``k * rho_tau``).

Every function is vectorised over ``q`` (numpy, no global RNG, no Ray): estimators evaluate thousands of rates
at once. ``q == 0`` means the record never enters a computation, so its epsilon is exactly 0.
"""
from __future__ import annotations

import enum
import math
from numbers import Integral, Real

import numpy as np
from scipy import special

# Opacus stops the fractional-order series after the first term whose two parts are both below exp(-30).
_SERIES_STOP_LOG = -30.0
_FIRST_CHUNK = 16
_MAX_CHUNK = 1024


class Adversary(enum.Enum):
    """Who observes the training (Theorem 1, note (1) and (2))."""

    THIRD_PARTY = "third_party"
    SERVER = "server"


class Conversion(enum.Enum):
    """RDP to (epsilon, delta)-DP conversion.

    ``SEED``: the rPDP-FL paper's Lemma 1 (Mironov 2017), ``rho + log(1/delta) / (a - 1)``.
    ``OPACUS``: Balle et al. 2020, Thm. 21 (also Canonne, Kamath, Steinke 2020; the ULDP-FL seed's Lemma 2 and
    Opacus' ``get_privacy_spent``), ``rho + log((a - 1) / a) - (log delta + log a) / (a - 1)``. It is the default
    because it is never looser (``log((a-1)/a) - log(a)/(a-1) < 0`` for every ``a > 1``) and still a valid
    (epsilon, delta)-DP bound.
    """

    OPACUS = "opacus"
    SEED = "seed"


def _enum(value: object, kind: type[enum.Enum], name: str) -> enum.Enum:
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(repr(member.value) for member in kind)
        raise ValueError(f"{name} must be one of {choices}, got {value!r}") from None


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _real_in(value: object, name: str, low: float, high: float, *, low_open: bool, high_open: bool) -> float:
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be a finite number in {interval}, got {value!r}")
    return float(value)


def _rates(q: object) -> np.ndarray:
    rates = np.asarray(q, dtype=np.float64)
    bad = ~np.isfinite(rates) | (rates < 0.0) | (rates > 1.0)
    if bad.any():
        raise ValueError(f"q must lie in [0, 1]: {int(bad.sum())} value(s) do not, e.g. {rates[bad].flat[0]!r}")
    return rates


def _orders(orders: object) -> np.ndarray:
    from mechanisms.accounting import DEFAULT_ORDERS  # loads Opacus and torch: see mechanisms.registry

    values = np.asarray(DEFAULT_ORDERS if orders is None else orders, dtype=np.float64).ravel()
    if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 1.0):
        raise ValueError(f"orders must be a non-empty sequence of finite numbers > 1, got {orders!r}")
    return values


def _log_a_integer(q: np.ndarray, sigma: float, order: int) -> np.ndarray:
    """log A_a(q) at integer order a (Lemma 4) for 0 < q < 1, written as log(1 + sum of positive terms).

    Since the binomial weights sum to 1, ``A_a - 1 = sum_{l>=2} C(a,l) (1-q)^(a-l) q^l (exp(l(l-1)/(2 sigma^2)) - 1)``:
    every term is positive, so small rates keep full relative precision.
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
    terms, up to the first i whose two terms are both below exp(-30) (the truncation Opacus uses); positive and
    negative terms are summed separately in log space.
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
    return log_pos + np.log1p(-np.exp(log_neg - log_pos))


def _step_rdp(rates: np.ndarray, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """``rho(a, q)`` for validated flat ``rates`` and ``alphas``: shape ``(len(alphas), len(rates))``."""
    out = np.zeros((alphas.size, rates.size))
    out[:, rates == 1.0] = alphas[:, None] / (2.0 * sigma**2)
    inner = (rates > 0.0) & (rates < 1.0)
    if inner.any():
        for row, alpha in enumerate(alphas):
            if float(alpha).is_integer():
                log_a = _log_a_integer(rates[inner], sigma, int(alpha))
            else:
                log_a = _log_a_fractional(rates[inner], sigma, float(alpha))
            out[row, inner] = log_a / (alpha - 1.0)
    return out


def step_rdp(q: object, *, noise_multiplier: float, orders: object = None) -> np.ndarray:
    """RDP of one Poisson-subsampled Gaussian step, ``rho(a, q)`` (Lemma 4), shape ``(len(orders),) + q.shape``.

    Integer orders use the finite binomial sum, fractional ones the Mironov et al. 2019 series that Opacus'
    ``compute_rdp`` uses; ``q = 0`` gives 0 and ``q = 1`` the Gaussian mechanism's ``a / (2 sigma^2)``.
    """
    sigma = _sigma(noise_multiplier)
    rates, alphas = _rates(q), _orders(orders)
    return _step_rdp(rates.ravel(), sigma, alphas).reshape((alphas.size,) + rates.shape)


def _log_mixture(x: np.ndarray, client_rate: float) -> np.ndarray:
    """``log(1 - lambda + lambda * exp(x))`` for x >= 0, accurate for small and large x (Lemma 6)."""
    if client_rate == 1.0:
        return x
    small = x < 1.0
    near = np.log1p(client_rate * np.expm1(np.where(small, x, 0.0)))
    far = np.logaddexp(math.log1p(-client_rate), math.log(client_rate) + x)
    return np.where(small, near, far)


class _Setting:
    """Validated training parameters of Theorem 1 that turn per-step RDP into the whole training's RDP."""

    def __init__(self, *, noise_multiplier, rounds, local_steps, client_rate, adversary, participations) -> None:
        self.sigma = _sigma(noise_multiplier)
        self.rounds = _positive_int(rounds, "rounds")
        self.local_steps = _positive_int(local_steps, "local_steps")
        self.client_rate = _real_in(client_rate, "client_rate", 0.0, 1.0, low_open=True, high_open=False)
        self.adversary = _enum(adversary, Adversary, "adversary")
        self.participations = None
        if participations is not None:
            if self.adversary is not Adversary.SERVER:
                raise ValueError("participations applies to adversary='server' only (third parties get Lemma 6)")
            k = np.asarray(participations)
            if k.dtype.kind not in "iu" or np.any(k < 0) or np.any(k > self.rounds):
                raise ValueError(
                    f"participations must be integers in [0, rounds={self.rounds}], got {participations!r}"
                )
            self.participations = k

    def compose(self, rho_step: np.ndarray, alphas: np.ndarray, participations: np.ndarray | None) -> np.ndarray:
        """Whole-training RDP (Lemma 6, Theorem 1) from per-step RDP rows ``(len(alphas), n)``."""
        rho_tau = self.local_steps * rho_step
        if participations is not None:
            return participations * rho_tau
        if self.adversary is Adversary.SERVER:
            return self.client_rate * self.rounds * rho_tau
        column = alphas[:, None] - 1.0
        return self.rounds * _log_mixture(column * rho_tau, self.client_rate) / column


def _sigma(noise_multiplier: object) -> float:
    return _real_in(noise_multiplier, "noise_multiplier", 0.0, math.inf, low_open=True, high_open=True)


def _flat_inputs(q: object, setting: _Setting) -> tuple[np.ndarray, np.ndarray | None, tuple[int, ...]]:
    rates = _rates(q)
    if setting.participations is None:
        return rates.ravel(), None, rates.shape
    rates, k = np.broadcast_arrays(rates, setting.participations)
    return rates.ravel(), k.ravel(), rates.shape


def rdp_curve(
    q: object,
    *,
    noise_multiplier: float,
    rounds: int,
    local_steps: int,
    client_rate: float,
    adversary: Adversary | str = Adversary.THIRD_PARTY,
    participations: object = None,
    orders: object = None,
) -> np.ndarray:
    """RDP of the whole training at every order, ``rho_FL(a, q)`` (Theorem 1), shape ``(len(orders),) + shape``.

    ``shape`` is ``q``'s shape broadcast with ``participations``. Third party: ``T * rho_{tau,lambda}`` (Lemma 6).
    Server: ``lambda * T * rho_tau`` (the paper's expectation, not a bound) or, with ``participations=k`` (the
    realised number of rounds the record's silo took part in, an integer in [0, rounds]), ``k * rho_tau``.
    """
    setting = _Setting(
        noise_multiplier=noise_multiplier,
        rounds=rounds,
        local_steps=local_steps,
        client_rate=client_rate,
        adversary=adversary,
        participations=participations,
    )
    alphas = _orders(orders)
    rates, k, shape = _flat_inputs(q, setting)
    rdp = setting.compose(_step_rdp(rates, setting.sigma, alphas), alphas, k)
    return rdp.reshape((alphas.size,) + shape)


def _conversion_offset(alphas: np.ndarray, delta: float, kind: Conversion) -> np.ndarray:
    if kind is Conversion.SEED:
        return math.log(1.0 / delta) / (alphas - 1.0)
    return np.log((alphas - 1.0) / alphas) - (math.log(delta) + np.log(alphas)) / (alphas - 1.0)


def epsilon_from_rdp(
    rdp: np.ndarray, *, delta: float, conversion: Conversion | str = Conversion.OPACUS, orders: object = None
) -> np.ndarray:
    """Smallest epsilon over the orders (Theorem 1, Eq. 8) of an RDP curve shaped ``(len(orders),) + shape``."""
    kind = _enum(conversion, Conversion, "conversion")
    delta = _real_in(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
    alphas = _orders(orders)
    rdp = np.asarray(rdp, dtype=np.float64)
    offset = _conversion_offset(alphas, delta, kind)
    return np.min(rdp + offset.reshape((-1,) + (1,) * (rdp.ndim - 1)), axis=0)


def _chord_lower_bound(alpha: float, knots: np.ndarray, curve: np.ndarray) -> np.ndarray:
    """Lower bound on a convex ``G(alpha)`` from its values ``curve`` (rows) at sorted ``knots``.

    A convex function lies above every secant line extended beyond its two points: use the two knots just left
    of ``alpha`` and the two just right of it (``-inf`` where a side has fewer than two knots).
    """
    bound = np.full(curve.shape[1], -np.inf)
    right = int(np.searchsorted(knots, alpha))
    for lo, hi in ((right - 2, right - 1), (right, right + 1)):
        if lo >= 0 and hi < knots.size:
            slope = (curve[hi] - curve[lo]) / (knots[hi] - knots[lo])
            bound = np.maximum(bound, curve[lo] + slope * (alpha - knots[lo]))
    return bound


def epsilon(
    q: object,
    *,
    noise_multiplier: float,
    rounds: int,
    local_steps: int,
    client_rate: float,
    delta: float,
    adversary: Adversary | str = Adversary.THIRD_PARTY,
    conversion: Conversion | str = Conversion.OPACUS,
    participations: object = None,
    orders: object = None,
) -> np.ndarray:
    """Record-level epsilon of rPDP-FL for sampling probability ``q`` (Theorem 1), same shape as ``q``.

    Minimised over ``orders`` (default: Opacus' ``RDPAccountant.DEFAULT_ALPHAS``). Non-decreasing in ``q``;
    exactly 0 where ``q == 0`` or ``participations == 0`` (the record cannot influence the output).

    Speed without changing the minimum: ``G(a) = (a - 1) rho_FL(a)`` is convex in ``a`` with ``G(1) = 0`` (a
    log-moment-generating function, kept convex by composition and by the convex non-decreasing Lemma 6 mixture),
    so integer orders (cheap finite sums) are evaluated first and a fractional order (a long series) is evaluated
    only for the rates where its secant lower bound on ``G`` could still beat the best epsilon found so far.
    """
    setting = _Setting(
        noise_multiplier=noise_multiplier,
        rounds=rounds,
        local_steps=local_steps,
        client_rate=client_rate,
        adversary=adversary,
        participations=participations,
    )
    kind = _enum(conversion, Conversion, "conversion")
    delta = _real_in(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
    alphas = _orders(orders)
    rates, k, shape = _flat_inputs(q, setting)
    offset = _conversion_offset(alphas, delta, kind)
    integer = np.array([float(alpha).is_integer() for alpha in alphas])
    knots = np.concatenate(([1.0], np.sort(alphas[integer])))
    curve = np.zeros((knots.size, rates.size))
    best = np.full(rates.size, np.inf)
    if integer.any():
        rdp = setting.compose(_step_rdp(rates, setting.sigma, knots[1:]), knots[1:], k)
        curve[1:] = (knots[1:, None] - 1.0) * rdp
        best = np.min(rdp + _conversion_offset(knots[1:], delta, kind)[:, None], axis=0)
    for alpha, shift in zip(alphas[~integer], offset[~integer]):
        bound = _chord_lower_bound(alpha, knots, curve) / (alpha - 1.0) + shift
        need = bound <= best + 1e-12 * np.abs(best) + 1e-12
        if need.any():
            row = np.array([alpha])
            rdp = setting.compose(_step_rdp(rates[need], setting.sigma, row), row, None if k is None else k[need])
            best[need] = np.minimum(best[need], rdp[0] + shift)
    silent = rates == 0.0 if k is None else (rates == 0.0) | (k == 0)
    return np.where(silent, 0.0, best).reshape(shape)
