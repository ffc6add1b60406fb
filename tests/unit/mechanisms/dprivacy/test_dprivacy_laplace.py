"""Statistical tests of the Euclidean Laplace sampler (Galli et al. 2023, Prop. 3.1), seeded.

Each statistical assertion is a test at level ALPHA = 1e-4: for a correct sampler and a random seed it fails
with probability at most 1e-4 (at most 1e-3 over the whole file); the seeds are fixed, so the outcome is
deterministic. Each test also checks that its statistic rejects a slightly wrong sampler (the test has power).
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privsilo.mechanisms.dprivacy import euclidean_laplace

ALPHA = 1e-4
Z_CRITICAL = stats.norm.isf(ALPHA / 2)  # two-sided z-test at level ALPHA


@pytest.mark.parametrize(("dim", "epsilon"), [(1, 2.0), (2, 0.5), (50, 3.0), (2000, 40.0)])
def test_norm_is_gamma_of_shape_dim_and_scale_one_over_epsilon(dim, epsilon):
    rng = np.random.default_rng(1000 + dim)
    norms = np.linalg.norm(euclidean_laplace(dim, epsilon=epsilon, rng=rng, size=3000), axis=1)
    assert stats.kstest(norms, stats.gamma(a=dim, scale=1 / epsilon).cdf).pvalue > ALPHA
    wrong = stats.gamma(a=dim * 1.1 + 0.2, scale=1 / epsilon).cdf  # power: a 10% larger shape is rejected
    assert stats.kstest(norms, wrong).pvalue < ALPHA


def test_direction_is_uniform_on_the_sphere():
    rng = np.random.default_rng(7)
    # R^2: the angle is uniform on [0, 2 pi)
    plane = euclidean_laplace(2, epsilon=1.0, rng=rng, size=3000)
    angles = np.arctan2(plane[:, 1], plane[:, 0]) % (2 * np.pi)
    assert stats.kstest(angles, stats.uniform(0, 2 * np.pi).cdf).pvalue > ALPHA
    # R^3 (Archimedes): each coordinate of a uniform direction is uniform on [-1, 1]
    space = euclidean_laplace(3, epsilon=1.0, rng=rng, size=3000)
    heights = space[:, 2] / np.linalg.norm(space, axis=1)
    assert stats.kstest(heights, stats.uniform(-1, 2).cdf).pvalue > ALPHA
    # R^40: u_i^2 ~ Beta(1/2, (n - 1) / 2) for every coordinate i; first and last coordinate
    dim = 40
    high = euclidean_laplace(dim, epsilon=1.0, rng=rng, size=3000)
    unit = high / np.linalg.norm(high, axis=1, keepdims=True)
    beta = stats.beta(0.5, (dim - 1) / 2).cdf
    assert stats.kstest(unit[:, 0] ** 2, beta).pvalue > ALPHA
    assert stats.kstest(unit[:, -1] ** 2, beta).pvalue > ALPHA
    # power: directions squeezed towards the first axis are rejected
    skewed = high.copy()
    skewed[:, 0] *= 1.3
    skewed /= np.linalg.norm(skewed, axis=1, keepdims=True)
    assert stats.kstest(skewed[:, 0] ** 2, beta).pvalue < ALPHA


@pytest.mark.parametrize(("dim", "epsilon"), [(1, 1.0), (10, 2.0), (300, 5.0)])
def test_each_coordinate_has_mean_zero_and_variance_n_plus_one_over_epsilon_squared(dim, epsilon):
    rng = np.random.default_rng(31 + dim)
    noise = euclidean_laplace(dim, epsilon=epsilon, rng=rng, size=20000)
    variance = (dim + 1) / epsilon**2

    def z_score(values: np.ndarray, mean: float) -> float:
        return float((values.mean() - mean) / (values.std(ddof=1) / np.sqrt(len(values))))

    for coordinate in (0, dim - 1):
        assert abs(z_score(noise[:, coordinate], 0.0)) < Z_CRITICAL
        assert abs(z_score(noise[:, coordinate] ** 2, variance)) < Z_CRITICAL
    # the average over coordinates, one iid value per draw (coordinates of one draw share its norm)
    assert abs(z_score((noise**2).mean(axis=1), variance)) < Z_CRITICAL
    assert abs(z_score((noise**2).mean(axis=1), dim / epsilon**2)) > Z_CRITICAL  # power: n / eps^2 is rejected


def test_shapes_determinism_and_the_one_dimensional_laplace():
    first = euclidean_laplace(5, epsilon=1.0, rng=np.random.default_rng(3), size=4)
    again = euclidean_laplace(5, epsilon=1.0, rng=np.random.default_rng(3), size=4)
    assert first.shape == (4, 5) and np.array_equal(first, again)
    assert euclidean_laplace(5, epsilon=1.0, rng=np.random.default_rng(3)).shape == (5,)
    assert euclidean_laplace(5, epsilon=1.0, rng=np.random.default_rng(3), size=0).shape == (0, 5)
    # in R^1 the mechanism is the classical Laplace mechanism of scale 1 / epsilon
    line = euclidean_laplace(1, epsilon=4.0, rng=np.random.default_rng(5), size=3000)[:, 0]
    assert stats.kstest(line, stats.laplace(scale=0.25).cdf).pvalue > ALPHA


@pytest.mark.parametrize(("dim", "epsilon", "size", "match"), [
    (0, 1.0, None, "dim"), (2.5, 1.0, None, "dim"), (True, 1.0, None, "dim"),
    (3, 0.0, None, "epsilon"), (3, -1.0, None, "epsilon"), (3, float("inf"), None, "epsilon"), (3, float("nan"), None, "epsilon"),
    (3, 1.0, -1, "size"),
])
def test_bad_arguments_are_refused(dim, epsilon, size, match):
    with pytest.raises(ValueError, match=match):
        euclidean_laplace(dim, epsilon=epsilon, rng=np.random.default_rng(0), size=size)
