"""Exact discrete Gaussian noise from uniform 64-bit words (Canonne, Kamath, Steinke, NeurIPS 2020).

``N_Z(0, sigma^2)`` puts mass ``exp(-x^2 / (2 sigma^2)) / Z`` on every integer ``x``. The sampler is CKS's
Algorithm 3: draw ``Y`` from the discrete Laplace with scale ``t = floor(sigma) + 1`` and keep it with probability
``exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))``. ``sigma^2`` is the exact square of the float ``sigma`` given.

Every decision compares a uniform real ``U`` in [0, 1) with ``exp(-gamma)`` for an exact rational ``gamma``, and is
made *exactly*, vectorised:

* the discrete Laplace is a sign bit and a geometric ``G = max{k : U < exp(-k / t)}`` (so ``P(G >= k) =
  exp(-k/t)``), whose candidate ``floor(-t log U)`` is checked against both thresholds;
* ``U`` is read from a word's top 53 bits, i.e. known to lie in ``[u, u + 2^-53)``. Where that interval lies more
  than `EXP_MARGIN` away from the float64 value of every threshold involved, the decision is certain
  (float64 ``exp``/``log`` are accurate to a few units in the last place, about 2^-50 absolute here, a thousand
  times below the margin);
* otherwise (2^-39 of the acceptance tests; about 2^-39 t ln(2^40 / t) of the geometric draws, 4e-8 at
  sigma 1000) the same ``U`` is extended by further 64-bit words and compared with
  rational bounds on ``exp(-gamma)`` (alternating Taylor series in ``fractions.Fraction``) until the comparison is
  decided: no rounding ever decides an outcome.

The words come from a source passed in: a ``numpy.random.Generator`` (its bit generator's raw words: seeded runs
repeat) or any object with ``bytes(count)`` such as ``privsilo.protocols.crypto_random.CryptoRandom`` (a CSPRNG). Not
constant-time: the number of words drawn depends on the outcome (Jin et al., S&P 2022 time such samplers).
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

EXP_MARGIN = 2.0**-40
"""Absolute distance from a float64 threshold within which the exact (rational) comparison decides."""

TABLE_LIMIT = 2**17
"""The most entries of a threshold table; for a larger scale (t above about 5,700) thresholds are computed per draw."""

SMALLEST_SIGMA = 1e-100
"""The smallest positive sigma taken: the float64 shortcut squares sigma, which underflows to 0 near 1e-162."""

_TWO32, _TWO31 = 2.0**32, 2.0**31
_LOG_TWO32 = 32 * math.log(2.0)
_LOW31 = np.uint32(2**31 - 1)


def _words(source: Any, count: int) -> np.ndarray:
    """``count`` uniform 64-bit words from a numpy Generator or a ``bytes(count)`` source."""
    if isinstance(source, np.random.Generator):  # full 64-bit words whatever the bit generator's native width
        return source.integers(0, 2**64, size=count, dtype=np.uint64)
    return np.frombuffer(source.bytes(8 * count), dtype="<u8")


def _exp_bounds(gamma: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rational ``(low, high)`` with ``low <= exp(-gamma) <= high`` and ``high - low`` about ``2^-bits`` or less
    (``gamma >= 0``): ``exp(-1)^n exp(-f)`` with ``n = floor(gamma)``, each factor bracketed by two consecutive
    partial sums of its alternating Taylor series (terms of decreasing size for arguments in [0, 1])."""
    whole = math.floor(gamma)
    target = Fraction(1, 2 ** (bits + 4 + 2 * whole.bit_length()))

    def bracket(x: Fraction) -> tuple[Fraction, Fraction]:
        total, term, k = Fraction(1), Fraction(1), 0
        while True:
            k += 1
            term = -term * x / k
            nxt = total + term
            if abs(term) <= target:
                return (min(total, nxt), max(total, nxt))
            total = nxt

    low, high = bracket(gamma - whole)
    if whole:
        e_low, e_high = bracket(Fraction(1))
        low, high = low * e_low**whole, high * e_high**whole
    return max(low, Fraction(0)), high


class _LazyUniform:
    """A uniform real in [0, 1) known to ``bits`` binary digits (``numerator / 2^bits``); more are drawn on demand."""

    def __init__(self, numerator: int, bits: int, source: Any) -> None:
        self.numerator, self.bits, self.source = int(numerator), bits, source

    def below_exp(self, gamma: Fraction) -> bool:
        """Whether ``U < exp(-gamma)`` (ties have probability 0 for ``gamma > 0``; ``exp(0) = 1 > U``)."""
        if gamma == 0:
            return True
        while True:
            low, high = _exp_bounds(gamma, self.bits + 2)
            scale = 2**self.bits
            if Fraction(self.numerator + 1, scale) <= low:
                return True
            if Fraction(self.numerator, scale) >= high:
                return False
            self.numerator = (self.numerator << 64) | int(_words(self.source, 1)[0])
            self.bits += 64


def _exact_geometric(uniform: _LazyUniform, t: int, start: int) -> int:
    """``max{k >= 0 : U < exp(-k/t)}`` by exact comparisons, searching from ``start``."""
    k = max(int(start), 0)
    while k > 0 and not uniform.below_exp(Fraction(k, t)):
        k -= 1
    while uniform.below_exp(Fraction(k + 1, t)):
        k += 1
    return k


def _exact_gamma(value: int, sigma_sq: Fraction, t: int) -> Fraction:
    """The exact exponent of the acceptance test of proposal ``value`` (see `_Thresholds`)."""
    magnitude = abs(value)
    gamma = (magnitude - sigma_sq / t) ** 2 / (2 * sigma_sq)
    return gamma + Fraction(1, t) if value < 0 else gamma


class _Thresholds:
    """The float64 bounds that decide a proposal where they can, in the integer units of the word's bit fields
    (see `_proposals`); each already includes the margin and the width of the uniform's interval. Tabulated by index
    when the geometric's starts fit `TABLE_LIMIT` entries (``t`` up to about 5,700), computed per draw otherwise."""

    def __init__(self, sigma: float, t: int, margin: float) -> None:
        self.t, self.s2, self.margin = t, sigma * sigma, margin
        self.length = math.floor(22.9 * t) + 2  # above every start t (32 log 2 - log(G + 1/2)), G >= 0
        self.tabulated = self.length <= TABLE_LIMIT
        if self.tabulated:
            k = np.arange(self.length, dtype=np.int64)
            self.geo_low, self.geo_high = self.compute_geometric(k)
            self.yes, self.no = self.compute_acceptance(np.concatenate([k, -1 - k[::-1]]))  # y at index y (mod 2L)

    def compute_geometric(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on the 32-bit field G within which ``U = (G + V) / 2^32`` (V in [0, 1)) certainly lies in
        ``[exp(-(k+1)/t), exp(-k/t))``, i.e. the geometric is ``k``."""
        upper, lower = np.exp(-k / self.t), np.exp(-(k + 1) / self.t)
        return (lower + self.margin) * _TWO32, (upper - self.margin) * _TWO32 - 1.0

    def compute_acceptance(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on the 32-bit field F (bit 31 the sign of ``y``, bits 0-30 the uniform A, ``U = (A + V) / 2^31``)
        for a certain accept (``F <= yes``) and a certain reject (``F >= no``) of proposal ``y``."""
        negative = y < 0
        magnitude = np.abs(y).astype(np.float64)
        gamma = (magnitude - self.s2 / self.t) ** 2 / (2.0 * self.s2) + np.where(negative, 1.0 / self.t, 0.0)
        p, sign = np.exp(-gamma), np.where(negative, _TWO31, 0.0)
        return (p - self.margin) * _TWO31 - 1.0 + sign, (p + self.margin) * _TWO31 + sign

    def geometric(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`compute_geometric` from the tables where tabulated (every ``k`` a start, below ``length``)."""
        return (self.geo_low[k], self.geo_high[k]) if self.tabulated else self.compute_geometric(k)

    def acceptance(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`compute_acceptance` from the tables where tabulated (every ``|y|`` at most ``length``)."""
        return (self.yes[y], self.no[y]) if self.tabulated else self.compute_acceptance(y)

    def acceptance_rate(self) -> float:
        """About the fraction of proposals kept (it sizes the batches, nothing else), summed over the first 40 t
        magnitudes."""
        k = np.arange(math.ceil(40 * self.t))
        mass = np.exp(-k / self.t) * -np.expm1(-1.0 / self.t)  # P(G = k)
        kept = np.exp(-((k - self.s2 / self.t) ** 2) / (2.0 * self.s2))
        kept_negative = np.exp(-((k + 1 - self.s2 / self.t) ** 2) / (2.0 * self.s2) - 1.0 / self.t)
        return float((mass * (kept + kept_negative)).sum() / 2.0)


def _decide(word: int, start: int, sigma_sq: Fraction, t: int, thresholds: _Thresholds, source: Any) -> int | None:
    """The proposal of one word, decided exactly (``None``: rejected), for the few that the float bounds left open:
    the geometric searched from ``start``, then the acceptance, each with more words of the same uniform as needed."""
    low, high = word & 0xFFFFFFFF, word >> 32
    lower, upper = thresholds.compute_geometric(np.array([start]))
    if lower[0] <= low <= upper[0]:
        k = start
    else:
        k = _exact_geometric(_LazyUniform(low, 32, source), t, start)
    y = k if high < 2**31 else -1 - k
    yes, no = thresholds.compute_acceptance(np.array([y]))
    if high <= yes[0]:
        return y
    if high >= no[0]:
        return None
    return y if _LazyUniform(high & (2**31 - 1), 31, source).below_exp(_exact_gamma(y, sigma_sq, t)) else None


def _proposals(words: np.ndarray, sigma_sq: Fraction, t: int, thresholds: _Thresholds, source: Any) -> np.ndarray:
    """The kept proposals of one word each, in order (numpy, one pass per operation): bits 0-31 the geometric's
    uniform G, bit 63 the sign, bits 32-62 the acceptance uniform. A negative proposal is ``-(G + 1)`` and is kept
    with ``exp(-1/t)`` times the probability, which gives it the discrete Laplace's mass without CKS's redrawn ``-0``."""
    halves = words.view(np.uint32)
    low, high = halves[0::2], halves[1::2]
    g = low.astype(np.float64)
    start = np.add(g, 0.5)
    np.log(start, out=start)
    np.multiply(start, -t, out=start)
    np.add(start, t * _LOG_TWO32, out=start)  # t log(2^32 / (G + 1/2)): the geometric's candidate, to be checked
    k = start.astype(np.int64)
    lower, upper = thresholds.geometric(k)
    unsure_geometric = (g < lower) | (g > upper)
    y = np.bitwise_xor(k, high.view(np.int32) >> 31)  # ~k = -(k + 1) where the sign bit is set
    if unsure_geometric.any():
        y[unsure_geometric] = 0  # a placeholder within the tables: these are decided by _decide
    f = high.astype(np.float64)
    yes, no = thresholds.acceptance(y)
    accept = f <= yes
    unsure = ((f < no) ^ accept) | unsure_geometric
    for i in np.flatnonzero(unsure):
        value = _decide(int(words[i]), int(k[i]), sigma_sq, t, thresholds, source)
        accept[i] = value is not None
        y[i] = 0 if value is None else value
    return y[accept]


def discrete_gaussian(sigma: float, size: int, source: Any) -> np.ndarray:
    """``size`` independent draws of ``N_Z(0, sigma^2)`` (int64) from the words of ``source`` (see the module
    docstring); ``sigma = 0`` gives zeros."""
    if not (math.isfinite(sigma) and (sigma == 0.0 or sigma >= SMALLEST_SIGMA)):
        raise ValueError(f"sigma must be 0 or a finite number >= {SMALLEST_SIGMA:g}, got {sigma}")
    out = np.zeros(int(size), dtype=np.int64)
    if sigma == 0.0 or size == 0:
        return out
    sigma_sq, t = Fraction(sigma) ** 2, math.floor(sigma) + 1
    thresholds = _Thresholds(sigma, t, EXP_MARGIN)
    rate = thresholds.acceptance_rate()
    filled = 0
    while filled < out.size:  # i.i.d. proposals in batches; the kept ones, in order, are the draws
        missing = out.size - filled
        batch = math.ceil((missing + 4 * math.sqrt(missing) + 16) / rate)  # a second batch is rare
        kept = _proposals(_words(source, batch), sigma_sq, t, thresholds, source)[:missing]
        out[filled:filled + kept.size] = kept
        filled += kept.size
    return out


def discrete_gaussian_pmf(values: np.ndarray, sigma: float) -> np.ndarray:
    """``P(X = x)`` of ``N_Z(0, sigma^2)`` at integers ``values`` (float64; the normaliser summed over +-40 sigma)."""
    support = np.arange(-math.ceil(40 * sigma) - 1, math.ceil(40 * sigma) + 2, dtype=np.float64)
    norm = np.exp(-support**2 / (2 * sigma**2)).sum()
    return np.exp(-np.asarray(values, dtype=np.float64) ** 2 / (2 * sigma**2)) / norm
