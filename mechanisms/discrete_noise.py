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

_UNIT = 2.0**-53

SMALLEST_SIGMA = 1e-100
"""The smallest positive sigma taken: the float64 shortcut squares sigma, which underflows to 0 near 1e-162."""


def _words(source: Any, count: int) -> np.ndarray:
    """``count`` uniform 64-bit words from a numpy Generator or a ``bytes(count)`` source."""
    if isinstance(source, np.random.Generator):  # full 64-bit words whatever the bit generator's native width
        return source.integers(0, 2**64, size=count, dtype=np.uint64)
    return np.frombuffer(source.bytes(8 * count), dtype="<u8").astype(np.uint64)


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

    def __init__(self, top53: int, source: Any) -> None:
        self.numerator, self.bits, self.source = int(top53), 53, source

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


def _geometric(top53: np.ndarray, t: int, source: Any) -> np.ndarray:
    """Geometric draws ``P(G >= k) = exp(-k/t)`` from the uniforms whose top 53 bits are ``top53``."""
    low = top53.astype(np.float64) * _UNIT
    candidate = np.floor(-t * np.log(np.maximum(low, _UNIT / 2)))  # U = 0 to 53 bits: a start for the search
    upper = np.exp(-candidate / t)  # U must lie below this one...
    lower = upper * math.exp(-1.0 / t)  # ...and at or above this one (one more rounding: far inside the margin)
    certain = (low + _UNIT <= upper - EXP_MARGIN) & (low >= lower + EXP_MARGIN)
    result = candidate.astype(np.int64)
    for i in np.flatnonzero(~certain):
        result[i] = _exact_geometric(_LazyUniform(top53[i], source), t, int(candidate[i]))
    return result


def _accept(top53: np.ndarray, magnitude: np.ndarray, sigma_sq: Fraction, t: int, source: Any) -> np.ndarray:
    """CKS Algorithm 3's Bernoulli(exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))) for each ``|Y|`` in ``magnitude``."""
    u = top53.astype(np.float64) * _UNIT
    s2 = float(sigma_sq)
    gamma = (magnitude - s2 / t) ** 2 / (2.0 * s2)
    p = np.exp(-gamma)
    accept = u + _UNIT <= p - EXP_MARGIN
    unsure = ~accept & (u < p + EXP_MARGIN)
    for i in np.flatnonzero(unsure):
        exact_gamma = (int(magnitude[i]) - sigma_sq / t) ** 2 / (2 * sigma_sq)
        accept[i] = _LazyUniform(top53[i], source).below_exp(exact_gamma)
    return accept


def discrete_gaussian(sigma: float, size: int, source: Any) -> np.ndarray:
    """``size`` independent draws of ``N_Z(0, sigma^2)`` (int64) from the words of ``source`` (see the module
    docstring); ``sigma = 0`` gives zeros."""
    if not (math.isfinite(sigma) and (sigma == 0.0 or sigma >= SMALLEST_SIGMA)):
        raise ValueError(f"sigma must be 0 or a finite number >= {SMALLEST_SIGMA:g}, got {sigma}")
    out = np.zeros(int(size), dtype=np.int64)
    if sigma == 0.0 or size == 0:
        return out
    sigma_sq, t = Fraction(sigma) ** 2, math.floor(sigma) + 1
    filled = 0
    while filled < out.size:  # i.i.d. proposals in batches; the accepted ones, in order, are the draws
        missing = out.size - filled
        batch = missing + missing // 2 + 64  # one pass for sigma >= 10, where about 3/4 of proposals are kept
        first, second = np.split(_words(source, 2 * batch), 2)
        negative = (first & np.uint64(1)).astype(bool)
        magnitude = _geometric(first >> np.uint64(11), t, source)
        keep = _accept(second >> np.uint64(11), magnitude, sigma_sq, t, source)
        keep &= ~(negative & (magnitude == 0))  # CKS Algorithm 2: -0 is redrawn
        np.negative(magnitude, out=magnitude, where=negative)
        accepted = magnitude[keep][:missing]
        out[filled:filled + accepted.size] = accepted
        filled += accepted.size
    return out


def discrete_gaussian_pmf(values: np.ndarray, sigma: float) -> np.ndarray:
    """``P(X = x)`` of ``N_Z(0, sigma^2)`` at integers ``values`` (float64; the normaliser summed over +-40 sigma)."""
    support = np.arange(-math.ceil(40 * sigma) - 1, math.ceil(40 * sigma) + 2, dtype=np.float64)
    norm = np.exp(-support**2 / (2 * sigma**2)).sum()
    return np.exp(-np.asarray(values, dtype=np.float64) ** 2 / (2 * sigma**2)) / norm
