"""Budget distributions: seeded, bounded, with the intended laws (chi-square / KS at a stated significance)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privsilo.mechanisms.rpdp.budgets import (
    BoundedMixGauss,
    BoundedPareto,
    ThreeLevels,
    budgets_from_column,
    make_distribution,
)

# Each goodness-of-fit test below rejects a correct sampler with probability 1e-3 per (fixed) seed.
SIGNIFICANCE = 1e-3
DISTRIBUTIONS = [ThreeLevels(), BoundedPareto(), BoundedMixGauss()]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=lambda d: type(d).__name__)
def test_seeded_and_bounded(distribution) -> None:
    first = distribution.sample(5000, rng=np.random.default_rng(3))
    again = distribution.sample(5000, rng=np.random.default_rng(3))
    other = distribution.sample(5000, rng=np.random.default_rng(4))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    low = getattr(distribution, "eps_min", min(getattr(distribution, "levels", (0,))))
    high = getattr(distribution, "eps_max", max(getattr(distribution, "levels", (0,))))
    assert first.min() >= low and first.max() <= high
    assert distribution.sample(0, rng=np.random.default_rng(0)).shape == (0,)


def test_three_levels_proportions_chi_square() -> None:
    distribution = ThreeLevels()
    values = distribution.sample(50_000, rng=np.random.default_rng(11))
    counts = np.array([np.sum(values == level) for level in distribution.levels])
    assert counts.sum() == values.size
    assert stats.chisquare(counts, values.size * np.array(distribution.ratios)).pvalue > SIGNIFICANCE


def test_bounded_pareto_matches_its_cdf_ks() -> None:
    distribution = BoundedPareto(shape=1.0, eps_min=0.1, eps_max=10.0)
    values = distribution.sample(50_000, rng=np.random.default_rng(12))
    assert stats.kstest(values, distribution.cdf).pvalue > SIGNIFICANCE
    assert distribution.cdf(np.array([0.1, 10.0])).tolist() == [0.0, 1.0]


def test_bounded_mix_gauss_is_truncated_not_clipped() -> None:
    distribution = BoundedMixGauss()
    values = distribution.sample(50_000, rng=np.random.default_rng(13))
    assert np.mean(values == distribution.eps_min) < 1e-3  # clipping would put ~35% exactly on 0.1
    near = [np.sum(np.abs(values - mean) < 5 * std) for mean, std in zip(distribution.means, distribution.stds)]
    assert stats.chisquare(near, values.size * np.array(distribution.weights)).pvalue > SIGNIFICANCE


@pytest.mark.parametrize(
    ("factory", "field"),
    [
        (lambda: BoundedPareto(eps_min=0.1, eps_max=0.05), "eps_max: 0.05 is below eps_min 0.1"),
        (lambda: BoundedPareto(shape=0.0), "shape"),
        (lambda: ThreeLevels(ratios=(0.5, 0.2, 0.1)), "ratios"),
        (lambda: ThreeLevels(levels=(0.0, 1.0, 5.0)), "levels"),
        (lambda: ThreeLevels(levels=(0.1, 1.0, math.inf)), r"levels: inf must be a finite number > 0"),
        (lambda: BoundedPareto(eps_max=math.nan), r"eps_max: nan must be a finite number > 0"),
        (lambda: ThreeLevels(levels=(1.0, 5.0)), "ratios"),
        (lambda: BoundedMixGauss(stds=(0.01, -0.05, 0.5)), "stds"),
        (lambda: BoundedMixGauss(means=(50.0, 60.0, 70.0)), "means"),
        (lambda: BoundedMixGauss(weights=(1.0,)), "weights"),
        (lambda: make_distribution("uniform"), "name"),
    ],
)
def test_invalid_parameters_name_the_field(factory, field) -> None:
    with pytest.raises(ValueError, match=field):
        factory()


def test_make_distribution_and_column() -> None:
    assert make_distribution("three_levels", levels=[0.5, 1.0, 2.0]) == ThreeLevels(levels=(0.5, 1.0, 2.0))
    assert make_distribution("bounded_pareto", shape=2.0) == BoundedPareto(shape=2.0)
    assert make_distribution("bounded_mix_gauss") == BoundedMixGauss()
    np.testing.assert_array_equal(budgets_from_column([0.5, 2]), [0.5, 2.0])
    with pytest.raises(ValueError, match="2 of 3"):
        budgets_from_column([1.0, -1.0, np.nan])
    with pytest.raises(ValueError, match="one-dimensional"):
        budgets_from_column([[1.0]])
