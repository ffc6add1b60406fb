"""Exact discrete Gaussian noise from uniform 64-bit words (Canonne, Kamath, Steinke, NeurIPS 2020).

``N_Z(0, sigma^2)`` puts mass ``exp(-x^2 / (2 sigma^2)) / Z`` on every integer ``x``. The sampler is CKS's
Algorithm 3: propose ``Y`` from the discrete Laplace with scale ``t`` and keep it with probability
``exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))``; any ``t > 0`` gives ``N_Z(0, sigma^2)``: CKS's ``floor(sigma) + 1``, and
below sigma 4 the multiple of 1/8 that keeps the most proposals (`_scale`). ``sigma^2`` is the exact square of the
float ``sigma`` given. The proposal is a sign and a geometric ``G = max{k : U < exp(-k/t)}`` (``P(G >= k) =
exp(-k/t)``): ``Y = G`` or ``Y = -(G + 1)``, the negative one kept with ``exp(-1/t)`` times the probability above,
which gives every ``Y`` the discrete Laplace's mass ``exp(-|Y|/t)`` up to one constant without CKS's redrawn ``-0``.

Every decision compares a uniform real ``U`` in [0, 1) with ``exp(-gamma)`` for an exact rational ``gamma``, and is
made *exactly*:

* a proposal takes one 64-bit word: bits 0-31 are the geometric's uniform, bit 63 the sign, bits 32-62 the
  acceptance's uniform (for ``t`` above 5,723, two words: the geometric's uniform is a word's top 53 bits). A
  uniform read from ``b`` bits is known to lie in an interval of width ``2^-b``;
* where that interval lies more than `EXP_MARGIN` (2^-40) away from the float64 value of the threshold, the float
  decides: float64 ``exp`` is accurate to a few units in the last place, and every rounding in the bounds to about
  2^-50 absolute, a thousand times below the margin. The thresholds ``exp(-k/t)`` and the acceptance probabilities
  are tabulated once per call; a guide table of G's top 16 bits (or a logarithm) only proposes the geometric's
  value, which the thresholds then confirm;
* otherwise (about ``4e-9 t`` of the proposals with one word, 4e-6 at sigma 1000, ``7e-11 t`` with two, and
  ``5e-10`` for the acceptance) the same ``U`` is extended by further 64-bit words and compared again, with a float
  while it is far from the threshold and with rational bounds on ``exp(-gamma)`` (alternating Taylor series in
  ``fractions.Fraction``) until the comparison is decided: no rounding ever decides an outcome.

The per-proposal loop is compiled by numba (``cache=True``: a fresh install compiles it on its first call, in a
few seconds; a new process loads it from the cache in about half a second); without numba, numpy makes the same
decisions pass by pass, three times slower, with the same draws. The words come from a source passed in: a
``numpy.random.Generator`` (64-bit words from its bit generator: seeded runs repeat) or any object with
``bytes(count)`` such as ``privsilo.protocols.crypto_random.CryptoRandom`` (a CSPRNG). Not constant-time: the number
of words drawn depends on the outcome (Jin et al., S&P 2022 time such samplers).
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any, Callable

import numpy as np

EXP_MARGIN = 2.0**-40
"""Absolute distance from a float64 threshold within which floats decide nothing."""

TABLE_LIMIT = 2**17
"""The most entries of a threshold table: up to t = 5,723 one word per proposal and tables; above, two words and
thresholds computed per proposal."""

SMALLEST_SIGMA = 1e-100
"""The smallest positive sigma taken: the float64 bounds square sigma, which underflows to 0 near 1e-162."""

LARGEST_SIGMA = 1e15
"""The largest sigma taken: the draws and the geometric's values (below 37 t) stay far inside int64."""

_GUIDE_BITS = 16
_LOG_TWO = math.log(2.0)
_NATIVE_64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


def _words(source: Any, count: int) -> np.ndarray:
    """``count`` uniform 64-bit words from a numpy Generator or a ``bytes(count)`` source."""
    if isinstance(source, np.random.Generator):
        if isinstance(source.bit_generator, _NATIVE_64):  # its raw words: what integers() below returns, sooner
            return source.bit_generator.random_raw(count)
        return source.integers(0, 2**64, size=count, dtype=np.uint64)  # 64-bit words from a 32-bit generator
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
        threshold = math.exp(-float(gamma))  # within 2^-49 of exp(-gamma): float(gamma) errs by gamma 2^-53
        while True:
            low, width = self.numerator / (1 << self.bits), 2.0**-self.bits  # no overflow at any length
            if low + width <= threshold - EXP_MARGIN:
                return True
            if low >= threshold + EXP_MARGIN:
                return False
            if self.numerator and gamma >= self.bits:  # exp(-gamma) <= e^-bits < 2^-bits <= U
                return False
            if gamma < self.bits + 64:  # else exp(-gamma) < 2^-(bits + 64): only more digits can decide
                low_exp, high_exp = _exp_bounds(gamma, self.bits + 2)
                scale = 2**self.bits
                if Fraction(self.numerator + 1, scale) <= low_exp:
                    return True
                if Fraction(self.numerator, scale) >= high_exp:
                    return False
            self.numerator = (self.numerator << 64) | int(_words(self.source, 1)[0])
            self.bits += 64


def _exact_geometric(uniform: _LazyUniform, t: Fraction, start: int) -> int:
    """``max{k >= 0 : U < exp(-k/t)}`` by exact comparisons, searching from ``start``."""
    k = max(int(start), 0)
    while k > 0 and not uniform.below_exp(Fraction(k, t)):
        k -= 1
    while uniform.below_exp(Fraction(k + 1, t)):
        k += 1
    return k


def _decide(geometric: tuple[int, int], high: int, start: int, sigma_sq: Fraction, t: Fraction,
            source: Any) -> int | None:
    """One proposal decided exactly (``None``: rejected) from its geometric field ``(value, bits)``, its word's high
    32 bits (the sign, then the acceptance's 31 bits) and a start for the geometric's search."""
    k = _exact_geometric(_LazyUniform(*geometric, source), t, start)
    y = k if high < 2**31 else -1 - k
    gamma = (abs(y) - sigma_sq / t) ** 2 / (2 * sigma_sq) + (Fraction(1, t) if y < 0 else 0)
    return y if _LazyUniform(high & (2**31 - 1), 31, source).below_exp(gamma) else None


class _Thresholds:
    """The float64 bounds that decide a proposal where they can, in the integer units of the word's bit fields;
    each includes the margin and the width of the uniform's interval. Tabulated by index (with a guide to the
    geometric) where the geometric's values from a 32-bit field fit `TABLE_LIMIT` entries, else computed per draw."""

    def __init__(self, sigma: float, t: Fraction, margin: float) -> None:
        self.t, self.s2, self.margin = float(t), sigma * sigma, margin
        self.length = math.floor(22.9 * t) + 2  # above t log(2^32 / (G + 1/2)) for every 32-bit G
        self.tabulated = self.length <= TABLE_LIMIT
        self.geometric_bits = 32 if self.tabulated else 53
        if self.tabulated:
            k = np.arange(self.length, dtype=np.int64)
            self.geo_low, self.geo_high = self.compute_geometric(k)
            self.yes, self.no = self.compute_acceptance(np.concatenate([k, -1 - k[::-1]]))  # y at index y (mod 2L)
            tops = np.arange(1, 2**_GUIDE_BITS + 1) / 2**_GUIDE_BITS  # G's top bits j: U < tops[j]
            self.guide = np.clip(np.floor(-self.t * np.log(tops)), 0, self.length - 1).astype(np.int64)

    def compute_geometric(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on the geometric field G (``U = (G + V) 2^-bits``, V in [0, 1)) between which U certainly lies in
        ``[exp(-(k+1)/t), exp(-k/t))``, i.e. the geometric is ``k``."""
        scale = 2.0**self.geometric_bits
        upper, lower = np.exp(-k / self.t), np.exp(-(k + 1) / self.t)
        return (lower + self.margin) * scale, (upper - self.margin) * scale - 1.0

    def compute_acceptance(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on the high 32 bits F (bit 31 the sign of ``y``, bits 0-30 the uniform A, ``U = (A + V) / 2^31``)
        for a certain accept (``F <= yes``) and a certain reject (``F >= no``) of proposal ``y``."""
        negative = y < 0
        magnitude = np.abs(y).astype(np.float64)
        gamma = (magnitude - self.s2 / self.t) ** 2 / (2.0 * self.s2) + np.where(negative, 1.0 / self.t, 0.0)
        p, sign = np.exp(-gamma), np.where(negative, 2.0**31, 0.0)
        return (p - self.margin) * 2.0**31 - 1.0 + sign, (p + self.margin) * 2.0**31 + sign

    def geometric(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`compute_geometric`, from the tables where tabulated."""
        return (self.geo_low[k], self.geo_high[k]) if self.tabulated else self.compute_geometric(k)

    def acceptance(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`compute_acceptance`, from the tables where tabulated."""
        return (self.yes[y], self.no[y]) if self.tabulated else self.compute_acceptance(y)

    def acceptance_rate(self) -> float:
        """About the fraction of proposals kept (it sizes the batches, nothing else)."""
        return _acceptance_rate(math.sqrt(self.s2), self.t) if self.tabulated else 0.75


def _acceptance_rate(sigma: float, t: float) -> float:
    """The probability that a proposal is kept, in float64, summed over the magnitudes below 22.9 t (the rest has
    mass below e^-22); for large t it tends to ``exp(-1/2) sqrt(pi / 2) = 0.760``."""
    s2, k = sigma * sigma, np.arange(math.floor(22.9 * t) + 2)
    mass = np.exp(-k / t) * -np.expm1(-1.0 / t)  # P(G = k)
    kept = np.exp(-((k - s2 / t) ** 2) / (2.0 * s2))
    kept_negative = np.exp(-((k + 1 - s2 / t) ** 2) / (2.0 * s2) - 1.0 / t)
    return float((mass * (kept + kept_negative)).sum() / 2.0)


def _scale(sigma: float) -> Fraction:
    """The discrete Laplace's scale t: CKS's ``floor(sigma) + 1``, and below sigma 4 the multiple of 1/8 up to 5
    that keeps the most proposals (t = 5/4 at sigma 1 keeps 0.50 of them, t = 2 0.44). Any t > 0 gives
    ``N_Z(0, sigma^2)`` exactly."""
    if sigma >= 4.0:
        return Fraction(math.floor(sigma) + 1)
    return max((Fraction(j, 8) for j in range(1, 41)), key=lambda t: _acceptance_rate(sigma, float(t)))


@functools.lru_cache(maxsize=4)
def _setting(sigma: float, margin: float) -> tuple[Fraction, _Thresholds, float]:
    """The scale, the bounds and the acceptance rate for ``sigma``, kept for the next calls (a silo draws at one
    sigma every round; the tables take milliseconds to build, up to 6.5 MB)."""
    t = _scale(sigma)
    thresholds = _Thresholds(sigma, t, margin)
    return t, thresholds, thresholds.acceptance_rate()


def _settle(values: np.ndarray, kept: int, pending: np.ndarray, positions: np.ndarray, geo_words: np.ndarray,
            acc_words: np.ndarray, sigma_sq: Fraction, t: Fraction, bits: int, source: Any) -> int:
    """Decides the open proposals in ``values[:kept]`` exactly, in order (word ``pending[i]``, at ``positions[i]``,
    which holds the geometric's start), and closes the gaps of the rejected ones. Returns the number of values left."""
    shift, mask = (11 if bits == 53 else 0), (1 << bits) - 1
    rejected = []
    for i, position in zip(pending.tolist(), positions.tolist()):
        field = (int(geo_words[i]) >> shift) & mask
        value = _decide((field, bits), int(acc_words[i]) >> 32, int(values[position]), sigma_sq, t, source)
        if value is None:
            rejected.append(position)
        else:
            values[position] = value
    if rejected:  # from the first gap on, rarely far from the end
        tail = np.delete(values[rejected[0]:kept], np.array(rejected) - rejected[0])
        values[rejected[0]:rejected[0] + tail.size] = tail
    return kept - len(rejected)


def _proposals_numpy(geo_words: np.ndarray, acc_words: np.ndarray, sigma_sq: Fraction, t: Fraction,
                     thresholds: _Thresholds, out: np.ndarray, source: Any) -> int:
    """Writes the kept proposals to ``out`` in order, up to its size, and returns their number; by numpy passes:
    the geometric's field from ``geo_words`` (bits 0-31, or the top 53), the sign and the acceptance's from
    ``acc_words`` (bits 32-63); a logarithm proposes the geometric."""
    bits = thresholds.geometric_bits
    field = geo_words.view(np.uint32)[0::2] if bits == 32 else geo_words >> np.uint64(11)
    g = field.astype(np.float64)
    start = np.add(g, 0.5)
    np.log(start, out=start)
    np.multiply(start, -thresholds.t, out=start)
    np.add(start, thresholds.t * bits * _LOG_TWO, out=start)  # t log(2^bits / (G + 1/2))
    k = start.astype(np.int64)
    lower, upper = thresholds.geometric(k)
    high = acc_words.view(np.uint32)[1::2]
    y = np.bitwise_xor(k, high.view(np.int32) >> 31)  # ~k = -(k + 1) where the sign bit is set
    f = high.astype(np.float64)
    yes, no = thresholds.acceptance(y)
    accept = f <= yes
    unsure = (f < no) ^ accept
    unsure |= g < lower
    unsure |= g > upper
    pending = np.flatnonzero(unsure)
    y[pending] = k[pending]
    accept |= unsure
    values = y[accept][:out.size]
    positions = np.flatnonzero(unsure[accept])
    waiting = int(np.searchsorted(positions, values.size))
    kept = _settle(values, values.size, pending[:waiting], positions[:waiting], geo_words, acc_words, sigma_sq, t,
                   bits, source)
    out[:kept] = values[:kept]
    return kept


def _proposal_loop(words, guide, geo_low, geo_high, yes, no, values, pending, positions):  # noqa: ANN001, ANN201
    """`_proposals_numpy` for one word per proposal as one loop, compiled by numba, with no logarithm: the
    geometric starts at ``guide`` of G's top 16 bits, a lower bound, and rises while U is certainly below the next
    threshold. Writes the kept proposals to ``values`` in order until it is full and, for each one left open, its
    word's index to ``pending``, its place in ``values`` to ``positions`` and the geometric's start to that place.
    Returns the two counts."""
    length = geo_low.size
    kept, waiting = 0, 0
    for i in range(words.size):
        if kept == values.size:
            break
        word = words[i]
        field = word & np.uint64(0xFFFFFFFF)
        g = np.float64(field)
        k = guide[field >> np.uint64(16)]
        while k < length - 1 and g <= geo_high[k + 1]:
            k += 1
        high = np.int64(word >> np.uint64(32))
        negative = high >> 31
        y = k ^ -negative
        index = y + negative * 2 * length
        f = np.float64(high)
        yes_bound = yes[index]
        if g < geo_low[k] or g > geo_high[k] or (yes_bound < f and f < no[index]):
            values[kept], pending[waiting], positions[waiting] = k, i, kept
            kept, waiting = kept + 1, waiting + 1
        else:  # written always, kept if accepted: no branch on the coin
            values[kept] = y
            kept += f <= yes_bound
    return kept, waiting


@functools.cache
def _compiled_loop() -> Callable[..., tuple[int, int]] | None:
    """`_proposal_loop` compiled by numba (cached on disk); ``None`` where numba is not installed."""
    try:
        import numba
    except ImportError:
        return None
    return numba.njit(cache=True, nogil=True)(_proposal_loop)


def _proposals(count: int, sigma_sq: Fraction, t: Fraction, thresholds: _Thresholds, out: np.ndarray,
               source: Any) -> int:
    """Writes the kept ones of ``count`` proposals to ``out`` in order, up to its size, and returns their number: by
    the compiled loop where tabulated and numba is there, else by numpy passes (the same draws from the same words)."""
    if not thresholds.tabulated:
        geo_words, acc_words = np.split(_words(source, 2 * count), 2)
        return _proposals_numpy(geo_words, acc_words, sigma_sq, t, thresholds, out, source)
    words = _words(source, count)
    loop = _compiled_loop()
    if loop is None:
        return _proposals_numpy(words, words, sigma_sq, t, thresholds, out, source)
    pending, positions = np.empty(count, dtype=np.int64), np.empty(count, dtype=np.int64)
    kept, waiting = loop(words, thresholds.guide, thresholds.geo_low, thresholds.geo_high, thresholds.yes,
                         thresholds.no, out, pending, positions)
    return _settle(out, kept, pending[:waiting], positions[:waiting], words, words, sigma_sq, t, 32, source)


def discrete_gaussian(sigma: float, size: int, source: Any) -> np.ndarray:
    """``size`` independent draws of ``N_Z(0, sigma^2)`` (int64) from the words of ``source`` (see the module
    docstring); ``sigma = 0`` gives zeros."""
    if not (math.isfinite(sigma) and (sigma == 0.0 or SMALLEST_SIGMA <= sigma <= LARGEST_SIGMA)):
        raise ValueError(f"sigma must be 0 or a number from {SMALLEST_SIGMA:g} to {LARGEST_SIGMA:g}, got {sigma}")
    if sigma == 0.0 or size == 0:
        return np.zeros(int(size), dtype=np.int64)
    out = np.empty(int(size), dtype=np.int64)
    sigma_sq = Fraction(sigma) ** 2
    t, thresholds, rate = _setting(sigma, EXP_MARGIN)
    filled = 0
    while filled < out.size:  # i.i.d. proposals in batches; the kept ones, in order, are the draws
        missing = out.size - filled
        batch = math.ceil((missing + 4 * math.sqrt(missing) + 16) / rate)  # a second batch is rare
        filled += _proposals(batch, sigma_sq, t, thresholds, out[filled:], source)
    return out


def discrete_gaussian_pmf(values: np.ndarray, sigma: float) -> np.ndarray:
    """``P(X = x)`` of ``N_Z(0, sigma^2)`` at integers ``values`` (float64; the normaliser summed over +-40 sigma)."""
    support = np.arange(-math.ceil(40 * sigma) - 1, math.ceil(40 * sigma) + 2, dtype=np.float64)
    norm = np.exp(-support**2 / (2 * sigma**2)).sum()
    return np.exp(-np.asarray(values, dtype=np.float64) ** 2 / (2 * sigma**2)) / norm
