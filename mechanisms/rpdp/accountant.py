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

from privsilo.mechanisms.rdp import DEFAULT_ORDERS, check_rdp_curve, conversion_offset, poisson_gaussian_rdp


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
    values = np.asarray(DEFAULT_ORDERS if orders is None else orders, dtype=np.float64).ravel()
    if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 1.0):
        raise ValueError(f"orders must be a non-empty sequence of finite numbers > 1, got {orders!r}")
    return values


def step_rdp(q: object, *, noise_multiplier: float, orders: object = None) -> np.ndarray:
    """RDP of one Poisson-subsampled Gaussian step, ``rho(a, q)`` (Lemma 4), shape ``(len(orders),) + q.shape``.

    See [`privsilo.mechanisms.rdp.poisson_gaussian_rdp`][privsilo.mechanisms.rdp.poisson_gaussian_rdp]: integer orders exact, fractional ones checked against them;
    ``q = 0`` gives 0 and ``q = 1`` the Gaussian mechanism's ``a / (2 sigma^2)``.
    """
    sigma = _sigma(noise_multiplier)
    rates, alphas = _rates(q), _orders(orders)
    return poisson_gaussian_rdp(rates.ravel(), sigma, alphas).reshape((alphas.size,) + rates.shape)


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
    rdp = setting.compose(poisson_gaussian_rdp(rates, setting.sigma, alphas), alphas, k)
    return rdp.reshape((alphas.size,) + shape)


def _conversion_offset(alphas: np.ndarray, delta: float, kind: Conversion) -> np.ndarray:
    if kind is Conversion.SEED:
        return math.log(1.0 / delta) / (alphas - 1.0)
    return conversion_offset(alphas, delta)


def epsilon_from_rdp(
    rdp: np.ndarray, *, delta: float, conversion: Conversion | str = Conversion.OPACUS, orders: object = None
) -> np.ndarray:
    """Smallest epsilon over the orders (Theorem 1, Eq. 8) of an RDP curve shaped ``(len(orders),) + shape``."""
    kind = _enum(conversion, Conversion, "conversion")
    delta = _real_in(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
    alphas = _orders(orders)
    rdp = np.asarray(rdp, dtype=np.float64)
    check_rdp_curve(alphas, rdp)
    offset = _conversion_offset(alphas, delta, kind)
    return np.maximum(np.min(rdp + offset.reshape((-1,) + (1,) * (rdp.ndim - 1)), axis=0), 0.0)


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
        rdp = setting.compose(poisson_gaussian_rdp(rates, setting.sigma, knots[1:]), knots[1:], k)
        check_rdp_curve(knots[1:], rdp)
        curve[1:] = (knots[1:, None] - 1.0) * rdp
        best = np.min(rdp + _conversion_offset(knots[1:], delta, kind)[:, None], axis=0)
    for alpha, shift in zip(alphas[~integer], offset[~integer]):
        bound = _chord_lower_bound(alpha, knots, curve) / (alpha - 1.0) + shift
        need = bound <= best + 1e-12 * np.abs(best) + 1e-12
        if need.any():
            row = np.array([alpha])
            rdp = setting.compose(poisson_gaussian_rdp(rates[need], setting.sigma, row), row, None if k is None else k[need])
            check_rdp_curve(row, rdp)
            best[need] = np.minimum(best[need], rdp[0] + shift)
    silent = rates == 0.0 if k is None else (rates == 0.0) | (k == 0)
    return np.where(silent, 0.0, np.maximum(best, 0.0)).reshape(shape)  # a negative bound only says epsilon 0
