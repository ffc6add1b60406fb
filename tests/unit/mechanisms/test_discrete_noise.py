"""The exact discrete Gaussian sampler against the exact pmf (Canonne, Kamath, Steinke 2020).

Each chi-square test uses a fixed seed, so it passes or fails the same way every run; over the choice of seed a
correct sampler fails one of them with probability 1e-4 (the threshold), so the thirteen below together with
probability at most 1.3e-3.
"""
import math
import sys
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from privsilo.mechanisms import discrete_noise
from privsilo.mechanisms.discrete_noise import _exp_bounds, _Thresholds, discrete_gaussian, discrete_gaussian_pmf
from privsilo.protocols.crypto_random import seeded_for_tests

P_MIN = 1e-4


def chi_square_p(samples: np.ndarray, sigma: float, *, min_expected: float = 20.0) -> float:
    """p-value of Pearson's chi-square of ``samples`` against N_Z(0, sigma^2): consecutive integers are merged into
    bins of at least ``min_expected`` expected draws; the outermost bins take the tails."""
    reach = math.ceil(10 * sigma) + 2
    support = np.arange(-reach, reach + 1)
    expected = discrete_gaussian_pmf(support, sigma) * samples.size
    edges, acc = [], 0.0
    for x, e in zip(support, expected):
        acc += e
        if acc >= min_expected:
            edges.append(x)
            acc = 0.0
    edges = np.array(edges[:-1])  # the last bin runs to +inf
    cdf = np.concatenate([[0.0], np.cumsum(discrete_gaussian_pmf(support, sigma))])
    upper = np.searchsorted(support, edges) + 1  # bin i holds (edges[i-1], edges[i]]
    probabilities = np.diff(np.concatenate([[0.0], cdf[upper], [1.0]]))
    observed = np.bincount(np.searchsorted(edges, samples, side="left"), minlength=edges.size + 1)
    statistic = ((observed - probabilities * samples.size) ** 2 / (probabilities * samples.size)).sum()
    return float(stats.chi2.sf(statistic, df=edges.size))


@pytest.mark.parametrize("sigma", [1.0, 10.0, 1000.0])
def test_chi_square_against_exact_pmf(sigma):
    samples = discrete_gaussian(sigma, 400_000, np.random.default_rng(20260 + int(sigma)))
    assert chi_square_p(samples, sigma) > P_MIN


def test_chi_square_detects_a_wrong_sigma():
    """The test has power: draws at sigma 10 are refused as N_Z(0, 10.1^2)."""
    samples = discrete_gaussian(10.0, 400_000, np.random.default_rng(3))
    assert chi_square_p(samples, 10.1) < 1e-6


@pytest.mark.parametrize("sigma", [0.7, 1.3, 6.5])  # t = 1, 3/2 (a fraction), 7
def test_exact_path_alone_against_exact_pmf(sigma, monkeypatch):
    """With a margin of 1 no float decides anything: every comparison is the rational one, from a CSPRNG stream;
    about half the proposals are rejected there, each replaced by the last value kept: no serial correlation."""
    monkeypatch.setattr(discrete_noise, "EXP_MARGIN", 1.0)
    samples = discrete_gaussian(sigma, 3000, seeded_for_tests(int(10 * sigma)))
    assert chi_square_p(samples, sigma, min_expected=10.0) > P_MIN
    assert abs(np.corrcoef(samples[:-1], samples[1:])[0, 1]) < 4 / math.sqrt(samples.size)


# The sampler's switch points: t = floor(sigma) + 1 tabulated with one word per proposal up to 5,723, two words
# and per-draw thresholds from 5,724; small, non-integer and huge sigmas besides (a tiny one below).
SIGMAS = [0.3, 2.5, 7.77, 5722.9, 5723.0, 54321.5]


def test_the_switch_points_are_where_the_sigmas_above_say():
    assert _Thresholds(5722.9, 5723, 2.0**-40).tabulated and not _Thresholds(5723.0, 5724, 2.0**-40).tabulated


@pytest.mark.parametrize("sigma", SIGMAS)
def test_chi_square_over_sigmas(sigma):
    samples = discrete_gaussian(sigma, 100_000, np.random.default_rng(round(100 * sigma)))
    assert chi_square_p(samples, sigma) > P_MIN


def kept_proposals(sigma: float, count: int, margin: float) -> tuple[np.ndarray, int]:
    """The kept ones of ``count`` proposals from seed 7's words, and the generator's next word after them."""
    t, rng = discrete_noise._scale(sigma), np.random.default_rng(7)
    out = np.empty(count, dtype=np.int64)
    kept = discrete_noise._proposals(count, Fraction(sigma) ** 2, t, _Thresholds(sigma, t, margin), out, rng)
    return out[:kept], int(rng.bit_generator.random_raw())


@pytest.mark.parametrize("sigma", [0.3, 1.0, 10.0, 1000.0, 5722.9, 5723.0])
def test_floats_decide_as_the_exact_comparisons_do(sigma, monkeypatch):
    """A float decides only far from the threshold, where the exact comparison of the same uniform agrees, and
    either draws more words only where the uniform's first bits straddle the exact threshold: proposal by
    proposal, the default margin keeps what no float deciding at all keeps, from the same words."""
    count = 600 if sigma < 1000 else 80
    floats = kept_proposals(sigma, count, discrete_noise.EXP_MARGIN)
    monkeypatch.setattr(discrete_noise, "EXP_MARGIN", 1.0)
    exact = kept_proposals(sigma, count, 1.0)
    assert np.array_equal(floats[0], exact[0]) and floats[1] == exact[1]


@pytest.mark.parametrize("sigma", [1e-100, 0.3, 1.0, 10.0, 1000.0, 5722.9, 5723.0])
def test_compiled_loop_and_numpy_passes_draw_the_same(sigma, monkeypatch):
    """numba is installed (a dependency) and its loop makes the same draws as the numpy passes that stand in
    where it is missing, from numpy words and from a CSPRNG stream (read-only words)."""
    assert discrete_noise._compiled_loop() is not None
    compiled = discrete_gaussian(sigma, 50_000, np.random.default_rng(11))
    crypto = discrete_gaussian(sigma, 5_000, seeded_for_tests(11))
    monkeypatch.setattr(discrete_noise, "_compiled_loop", lambda: None)
    assert np.array_equal(compiled, discrete_gaussian(sigma, 50_000, np.random.default_rng(11)))
    assert np.array_equal(crypto, discrete_gaussian(sigma, 5_000, seeded_for_tests(11)))


def test_without_numba_the_numpy_passes_stand_in(monkeypatch):
    """Where ``import numba`` fails the sampler runs on, with the draws the compiled loop makes."""
    compiled = discrete_gaussian(10.0, 2000, np.random.default_rng(3))
    monkeypatch.setitem(sys.modules, "numba", None)  # the import raises ImportError
    discrete_noise._compiled_loop.cache_clear()
    try:
        assert discrete_noise._compiled_loop() is None
        assert np.array_equal(compiled, discrete_gaussian(10.0, 2000, np.random.default_rng(3)))
    finally:
        discrete_noise._compiled_loop.cache_clear()


def test_a_tiny_sigma_gives_zeros_even_when_every_comparison_is_exact(monkeypatch):
    """At sigma 1e-100 a proposal +-1 has gamma near 5e199: the exact test must reject it without expanding
    exp(-gamma) (it is below 2^-bits once gamma >= bits)."""
    monkeypatch.setattr(discrete_noise, "EXP_MARGIN", 1.0)
    assert not discrete_gaussian(1e-100, 2000, np.random.default_rng(2)).any()


def test_exp_bounds_bracket_exp():
    mpmath.mp.prec = 300
    for gamma in (Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(123456, 1000)):
        low, high = _exp_bounds(gamma, 80)
        assert low <= high and high - low <= Fraction(1, 2**80)
        true = mpmath.exp(-mpmath.mpf(gamma.numerator) / gamma.denominator)
        assert mpmath.mpf(low.numerator) / low.denominator <= true <= mpmath.mpf(high.numerator) / high.denominator


def test_same_seed_same_draws_and_sources():
    a = discrete_gaussian(3.0, 1000, np.random.default_rng(5))
    assert np.array_equal(a, discrete_gaussian(3.0, 1000, np.random.default_rng(5)))
    assert not np.array_equal(a, discrete_gaussian(3.0, 1000, np.random.default_rng(6)))
    crypto = discrete_gaussian(3.0, 1000, seeded_for_tests(1))
    assert crypto.dtype == np.int64 and np.array_equal(crypto, discrete_gaussian(3.0, 1000, seeded_for_tests(1)))


def test_zero_sigma_and_bad_sigma():
    assert not discrete_gaussian(0.0, 10, np.random.default_rng(0)).any()
    for bad in (-1.0, math.inf, math.nan, 1e-170, 1e16):  # 1e-170: its square underflows float64; 1e16: int64
        with pytest.raises(ValueError, match="sigma"):
            discrete_gaussian(bad, 10, np.random.default_rng(0))


def test_a_32_bit_bit_generator_gets_full_64_bit_words():
    """MT19937's native words are 32 bits; the sampler must still see 64-bit uniforms (a chi-square at sigma 10)."""
    draws = discrete_gaussian(10.0, 200_000, np.random.Generator(np.random.MT19937(1)))
    assert chi_square_p(draws, 10.0) > P_MIN


@pytest.mark.parametrize("sigma", [0.3, 1.0, 10.0, 100.0])
def test_every_tabulated_bound_is_certified_against_mpmath(sigma):
    """Off-by-one errors in the tables change probabilities by about 2^-31, which no chi-square sees: every field
    value a table decides must decide as exp at 140 bits does. Geometric: a 32-bit field g in [ceil(low_k),
    floor(high_k)] puts U in [g, g + 1) 2^-32 inside [exp(-(k+1)/t), exp(-k/t)). Acceptance: a 31-bit field A at or
    below ``yes`` puts U = [A, A + 1) 2^-31 below the proposal's keep probability, one at or above ``no`` above it."""
    mpmath.mp.prec = 140
    t = discrete_noise._scale(sigma)
    table = _Thresholds(sigma, t, discrete_noise.EXP_MARGIN)
    square = Fraction(sigma) ** 2
    exact_t, s2 = mpmath.mpf(t.numerator) / t.denominator, mpmath.mpf(square.numerator) / square.denominator
    two32, two31 = mpmath.mpf(2) ** 32, mpmath.mpf(2) ** 31
    wrong = []
    for k in range(table.length):
        low, high = math.ceil(table.geo_low[k]), math.floor(table.geo_high[k])
        if low <= high and not (low >= mpmath.exp(-(k + 1) / exact_t) * two32 and high + 1 <= mpmath.exp(-k / exact_t) * two32):
            wrong.append(("geometric", k, low, high))
    for index in range(2 * table.length):
        y = index if index < table.length else index - 2 * table.length
        keep = two31 * mpmath.exp(-((abs(y) - s2 / exact_t) ** 2) / (2 * s2) - (1 / exact_t if y < 0 else 0))
        sign = 2**31 if y < 0 else 0
        yes, no = math.floor(table.yes[index]) - sign, math.ceil(table.no[index]) - sign
        if (yes >= 0 and yes + 1 > keep) or (no <= 2**31 - 1 and no < keep):
            wrong.append(("acceptance", y, yes, no))
    assert not wrong, wrong[:5]


def test_a_lazy_uniform_decides_exactly_where_the_floats_cannot():
    """U's first bits straddling exp(-gamma) (within one unit of it): the answer, after drawing more words of the same
    uniform as needed, agrees with exp at 600 bits on the whole interval U is then known to lie in."""
    mpmath.mp.prec = 600
    rng, choose = np.random.default_rng(5), np.random.default_rng(3)
    extended = 0
    for _ in range(400):
        gamma = Fraction(int(choose.integers(1, 10**6)), int(choose.integers(1, 10**5)))
        gamma = gamma if gamma <= 60 else gamma / 100
        bits = int(choose.choice([31, 32, 53]))
        exact = mpmath.exp(-mpmath.mpf(gamma.numerator) / gamma.denominator)
        numerator = int(mpmath.floor(exact * 2**bits)) + int(choose.integers(-1, 2))
        if not 0 <= numerator < 2**bits:
            continue
        uniform = discrete_noise._LazyUniform(numerator, bits, rng)
        below = uniform.below_exp(gamma)
        extended += uniform.bits > bits
        low = mpmath.mpf(uniform.numerator) / mpmath.mpf(2) ** uniform.bits
        assert (low + mpmath.mpf(2) ** -uniform.bits <= exact) if below else (low >= exact), (gamma, bits)
    assert extended > 100  # the straddling cases did need further words
