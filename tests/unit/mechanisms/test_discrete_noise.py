"""The exact discrete Gaussian sampler against the exact pmf (Canonne, Kamath, Steinke 2020).

Each chi-square test uses a fixed seed, so it passes or fails the same way every run; over the choice of seed a
correct sampler fails one of them with probability 1e-4 (the threshold), so the five below together with
probability at most 5e-4.
"""
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from privsilo.mechanisms import discrete_noise
from privsilo.mechanisms.discrete_noise import _exp_bounds, discrete_gaussian, discrete_gaussian_pmf
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


@pytest.mark.parametrize("sigma", [0.7, 6.5])
def test_exact_path_alone_against_exact_pmf(sigma, monkeypatch):
    """With a margin of 1 no float decides anything: every comparison is the rational one, from a CSPRNG stream."""
    monkeypatch.setattr(discrete_noise, "EXP_MARGIN", 1.0)
    samples = discrete_gaussian(sigma, 3000, seeded_for_tests(int(10 * sigma)))
    assert chi_square_p(samples, sigma, min_expected=10.0) > P_MIN


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
    for bad in (-1.0, math.inf, math.nan, 1e-170):  # 1e-170: its square underflows float64
        with pytest.raises(ValueError, match="sigma"):
            discrete_gaussian(bad, 10, np.random.default_rng(0))


def test_a_32_bit_bit_generator_gets_full_64_bit_words():
    """MT19937's native words are 32 bits; the sampler must still see 64-bit uniforms (a chi-square at sigma 10)."""
    draws = discrete_gaussian(10.0, 200_000, np.random.Generator(np.random.MT19937(1)))
    assert chi_square_p(draws, 10.0) > P_MIN
