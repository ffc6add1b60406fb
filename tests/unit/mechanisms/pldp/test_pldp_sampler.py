"""PDPM (PLDP-FL, Shen et al. 2023, Algorithm 2 / Eq. 10): exact privacy ratios and variance, and seeded
statistical checks of the sampler.

Statistical checks are z-tests at |z| <= 5.5 (two-sided false-failure probability 3.8e-8 each) against exact
means and variances; each test below states how many it makes, so its false-failure rate is at most that
number times 3.8e-8 (every test here: below 1e-5).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from privsilo.mechanisms.pldp import (
    PAPER_BUDGETS,
    ClientPerturbation,
    averaged_noise_std,
    paper_variance_bound,
    pdpm,
    pdpm_max_variance,
    pdpm_outputs,
    pdpm_probabilities,
    pdpm_variance,
)

Z = 5.5
SETTINGS = [(0.2, 0.1), (2.0, 0.5), (1.0, 1.0), (0.4, 3.0)]  # (L, eps): the paper's extremes and a large eps
DRAWS = 200_000


def _offsets(length: float) -> np.ndarray:
    return np.linspace(-length / 2, length / 2, 9)


def _eq10(v: float, *, length: float, epsilon: float) -> tuple[float, float, float]:
    """Eq. 10 written out with e = exp(eps), independently of the sampler's algebra."""
    e = math.exp(epsilon)
    high = v * (e - 1) / (length * (e + 2)) + (e + 1) / (2 * (e + 2))
    other = (e + 3) / (4 * (e + 2)) - v * (e - 1) / (2 * length * (e + 2))
    return high, other, other


@pytest.mark.parametrize(("length", "epsilon"), SETTINGS)
def test_probabilities_are_eq10_and_a_distribution(length: float, epsilon: float) -> None:
    v = _offsets(length)
    probabilities = pdpm_probabilities(v, length=length, epsilon=epsilon)
    for i, offset in enumerate(v):
        assert np.allclose([p[i] for p in probabilities], _eq10(offset, length=length, epsilon=epsilon), rtol=1e-12, atol=0)
    total = probabilities.high + probabilities.low + probabilities.zero
    assert np.allclose(total, 1.0, rtol=0, atol=1e-15)
    assert all((p >= 0).all() and (p <= 1).all() for p in probabilities)
    e = math.exp(epsilon)
    outputs = pdpm_outputs(length=length, epsilon=epsilon)
    assert outputs.high == pytest.approx(length * (e + 3) / (2 * (e - 1)), rel=1e-12)
    assert outputs.low == pytest.approx(-length * (e + 1) / (e - 1), rel=1e-12)


@pytest.mark.parametrize(("length", "epsilon"), SETTINGS)
def test_worst_case_ratio_is_exactly_e_eps_attained_by_the_top_output(length: float, epsilon: float) -> None:
    """Exact, from the output probabilities: max over inputs v, v' in the range of P[o | v] / P[o | v'].

    The top output reaches e^eps (at v = L/2 against v' = -L/2); the other two reach only (e^eps + 1) / 2. So
    one scalar is eps-LDP and no better: the worst case over outputs is exactly e^eps."""
    probabilities = pdpm_probabilities(np.linspace(-length / 2, length / 2, 201), length=length, epsilon=epsilon)
    ratios = {name: p.max() / p.min() for name, p in probabilities._asdict().items()}
    e = math.exp(epsilon)
    assert ratios["high"] == pytest.approx(e, rel=1e-12)
    assert ratios["low"] == pytest.approx((e + 1) / 2, rel=1e-12)
    assert ratios["zero"] == pytest.approx((e + 1) / 2, rel=1e-12)
    assert max(ratios.values()) == pytest.approx(e, rel=1e-12)


@pytest.mark.parametrize(("length", "epsilon"), SETTINGS)
def test_variance_formula_is_the_exact_second_moment(length: float, epsilon: float) -> None:
    v = _offsets(length)
    outputs, probabilities = pdpm_outputs(length=length, epsilon=epsilon), pdpm_probabilities(v, length=length, epsilon=epsilon)
    mean = outputs.high * probabilities.high + outputs.low * probabilities.low
    second = outputs.high**2 * probabilities.high + outputs.low**2 * probabilities.low
    assert np.allclose(mean, v, rtol=0, atol=1e-12 * length)  # unbiased, exactly
    assert np.allclose(pdpm_variance(v, length=length, epsilon=epsilon), second - v**2, rtol=1e-12)
    grid = np.linspace(-length / 2, length / 2, 100_001)
    assert pdpm_max_variance(length=length, epsilon=epsilon) == pytest.approx(
        pdpm_variance(grid, length=length, epsilon=epsilon).max(), rel=1e-9
    )


def test_theorem_1_variance_bound_is_wrong_at_l2_eps_half() -> None:
    """The paper's bound (e+1)(e+3)/(L(e-1)^2) = 14.63 at L = 2, eps = 0.5; the true maximum is 40.52 at v = 0.80.
    One z-test: the sampled variance at v = 0.80 agrees with the exact formula (and is 26 above the bound)."""
    assert float(paper_variance_bound(length=2.0, epsilon=0.5)) == pytest.approx(14.6293, abs=1e-4)
    assert float(pdpm_max_variance(length=2.0, epsilon=0.5)) == pytest.approx(40.5193, abs=1e-4)
    assert float(pdpm_variance(0.8005, length=2.0, epsilon=0.5)) == pytest.approx(40.5193, abs=1e-4)
    draws = pdpm(np.full(DRAWS, 0.8005), center=0.0, length=2.0, epsilon=0.5, rng=np.random.default_rng(7))
    _assert_variance(draws, v=0.8005, length=2.0, epsilon=0.5)
    assert draws.var() > 2 * float(paper_variance_bound(length=2.0, epsilon=0.5))


def test_average_of_70_uploads_at_l2_eps2_has_noise_std_1_5() -> None:
    """The issue's arithmetic: 70 clients with L = 2 and the eps2 budgets 0.1 ... 1.0 in turn, weights near the
    centre: the server's average carries noise of standard deviation 1.51 on every weight."""
    budgets = np.array([PAPER_BUDGETS["eps2"][i % 10] for i in range(70)])
    std = averaged_noise_std(0.0, length=2.0, epsilon=budgets)
    assert std == pytest.approx(math.sqrt(sum(float(pdpm_variance(0.0, length=2.0, epsilon=e)) for e in budgets)) / 70, rel=1e-12)
    assert std == pytest.approx(1.514, abs=1e-3)
    assert averaged_noise_std(0.0, length=2.0, epsilon=np.full(70, 40.0)) == pytest.approx(math.sqrt(1.5 / 70), rel=1e-6)  # eps -> inf: 3L^2/8


def _assert_variance(draws: np.ndarray, *, v: float, length: float, epsilon: float) -> None:
    """z-test of the sample variance against the exact one (standard error from the exact fourth moment)."""
    outputs, p = pdpm_outputs(length=length, epsilon=epsilon), pdpm_probabilities(v, length=length, epsilon=epsilon)
    values, weights = np.array([outputs.high, outputs.low, 0.0]), np.array([p.high, p.low, p.zero])
    variance = float(pdpm_variance(v, length=length, epsilon=epsilon))
    fourth = float(weights @ (values - v) ** 4)
    standard_error = math.sqrt((fourth - variance**2) / draws.size)
    assert abs(draws.var() - variance) <= Z * standard_error


@pytest.mark.parametrize(("length", "epsilon"), SETTINGS)
def test_sampler_is_unbiased_with_the_exact_variance_across_the_range(length: float, epsilon: float) -> None:
    """9 offsets x (mean, variance) = 18 z-tests per setting; the centre shifts everything."""
    center = 0.3
    v = _offsets(length)
    draws = pdpm(np.repeat(v[:, None] + center, DRAWS // 8, axis=1), center=center, length=length, epsilon=epsilon,
                 rng=np.random.default_rng(11))
    for offset, row in zip(v, draws):
        sd = math.sqrt(float(pdpm_variance(offset, length=length, epsilon=epsilon)))
        assert abs(row.mean() - (offset + center)) <= Z * sd / math.sqrt(row.size)
        _assert_variance(row - center, v=offset, length=length, epsilon=epsilon)


def test_sampler_frequencies_follow_the_probabilities() -> None:
    """Counts of each output against Eq. 10 (3 binomial z-tests per offset, 5 offsets)."""
    length, epsilon = 1.0, 0.7
    outputs = pdpm_outputs(length=length, epsilon=epsilon)
    for offset in (-0.5, -0.2, 0.0, 0.3, 0.5):
        draws = pdpm(np.full(DRAWS // 2, offset), center=0.0, length=length, epsilon=epsilon, rng=np.random.default_rng(3))
        p = pdpm_probabilities(offset, length=length, epsilon=epsilon)
        for value, probability in ((outputs.high, p.high), (outputs.low, p.low), (0.0, p.zero)):
            count = np.count_nonzero(draws == value)
            assert abs(count - draws.size * probability) <= Z * math.sqrt(draws.size * probability * (1 - probability))


def test_values_outside_the_range_are_clipped_into_it() -> None:
    """A value beyond the range (infinite ones too) is perturbed exactly as the range's end (same draws): biased
    towards the range. In an upload a NaN (diverged local training) is perturbed as the centre."""
    length, epsilon = 0.4, 1.0
    for outside, end in ((5.0, 0.2), (-3.0, -0.2), (np.inf, 0.2), (-np.inf, -0.2)):
        seen = pdpm(np.full(1000, outside), center=0.0, length=length, epsilon=epsilon, rng=np.random.default_rng(5))
        edge = pdpm(np.full(1000, end), center=0.0, length=length, epsilon=epsilon, rng=np.random.default_rng(5))
        assert np.array_equal(seen, edge)
    perturbation = ClientPerturbation(length=length, center=0.1, epsilon=epsilon)
    seen = perturbation.perturb(np.array([np.nan, 0.3, np.inf]), rng=np.random.default_rng(2))
    assert np.array_equal(seen, perturbation.perturb(np.array([0.1, 0.3, 0.3]), rng=np.random.default_rng(2)))


def test_per_coordinate_parameters_broadcast_and_the_draws_are_seeded() -> None:
    values = np.array([[0.1, -0.4], [0.9, 0.0]])
    settings = {"center": np.array([0.0, 0.5]), "length": np.array([[0.4], [2.0]]), "epsilon": np.array([0.2, 1.0])}
    first = pdpm(values, **settings, rng=np.random.default_rng(1))
    assert first.shape == values.shape
    assert np.array_equal(first, pdpm(values, **settings, rng=np.random.default_rng(1)))
    outputs = pdpm_outputs(length=np.array([[0.4], [2.0]]), epsilon=np.array([0.2, 1.0]))
    possible = np.stack([outputs.high, outputs.low, outputs.zero]) + settings["center"]
    assert (np.isclose(first[None], possible, rtol=1e-12, atol=0)).any(axis=0).all()


@pytest.mark.parametrize(
    "bad",
    [{"length": 0.0}, {"length": -1.0}, {"epsilon": 0.0}, {"epsilon": np.array([0.5, -0.1])}, {"center": np.inf}, {"values": np.array([0.0, np.nan])}],
)
def test_bad_parameters_are_refused(bad: dict) -> None:
    arguments = {"values": np.zeros(2), "center": 0.0, "length": 1.0, "epsilon": 0.5, **bad}
    with pytest.raises(ValueError):
        pdpm(arguments.pop("values"), **arguments, rng=np.random.default_rng(0))


# --- k sampled coordinates per upload ---------------------------------------------------------------------------


def test_k_coordinates_upload_is_exactly_eps_ldp_by_enumeration() -> None:
    """d = 3, k = 2, each sampled coordinate at eps/k: enumerate every output vector and the sample S that can
    produce it, for every pair of inputs at the ends of the range; the worst ratio is exactly e^eps."""
    length, center, epsilon, d, k = 1.0, 0.2, 0.8, 3, 2
    perturbation = ClientPerturbation(length=length, center=center, epsilon=epsilon, coordinates=k)
    per_coordinate = perturbation.epsilon_per_coordinate  # what the sampler uses for each sampled coordinate
    outputs = pdpm_outputs(length=length, epsilon=per_coordinate)
    symbols = (float(outputs.high), float(outputs.low), 0.0)  # a sampled coordinate's offset; unsampled: 0
    samples = list(itertools.combinations(range(d), k))

    def probability(observed: tuple[float, ...], offsets: tuple[float, ...]) -> float:
        total = 0.0
        for sample in samples:
            if any(observed[j] != 0.0 for j in range(d) if j not in sample):
                continue
            p = pdpm_probabilities(np.array([offsets[j] for j in sample]), length=length, epsilon=per_coordinate)
            terms = [dict(zip(symbols, (p.high[i], p.low[i], p.zero[i])))[observed[j]] for i, j in enumerate(sample)]
            total += math.prod(terms) / len(samples)
        return total

    ends = list(itertools.product((-length / 2, length / 2), repeat=d))
    worst = 0.0
    for observed in itertools.product(symbols, repeat=d):
        if sum(o != 0.0 for o in observed) > k:
            continue
        values = [probability(observed, offsets) for offsets in ends]
        worst = max(worst, max(values) / min(values))
    assert worst == pytest.approx(math.exp(epsilon), rel=1e-12)
    assert perturbation.epsilon_per_upload(d) == pytest.approx(epsilon)


def test_k_coordinates_upload_is_unbiased_and_sends_the_centre_elsewhere() -> None:
    """d = 1000 coordinates holding 5 input values (200 each), k = 100 at eps / k = 1: over 1,000 uploads each
    value's mean estimate is the input (5 z-tests; the exact variance (d/k) E[(x - c)^2] - (w - c)^2 of one scaled estimate,
    treating coordinates as independent, which overstates the spread: inclusions without replacement are
    negatively correlated)."""
    length, center, epsilon, d, k, uploads = 1.0, -0.1, 100.0, 1000, 100, 1000  # eps / k = 1 per coordinate
    perturbation = ClientPerturbation(length=length, center=center, epsilon=epsilon, coordinates=k)
    levels = np.array([-0.6, -0.3, -0.1, 0.2, 0.4])
    w = np.repeat(levels, d // levels.size)
    rng = np.random.default_rng(13)
    draws = np.stack([perturbation.perturb(w, rng=rng) for _ in range(uploads)])
    assert ((draws != center).sum(axis=1) <= k).all()
    offsets = np.clip(levels - center, -length / 2, length / 2)
    second = pdpm_variance(offsets, length=length, epsilon=epsilon / k) + offsets**2
    sd = np.sqrt(d / k * second - offsets**2)
    means = draws.reshape(uploads, levels.size, -1).mean(axis=(0, 2))
    assert (np.abs(means - (center + offsets)) <= Z * sd / math.sqrt(uploads * d / levels.size)).all()


def test_all_coordinates_upload_is_exactly_d_eps_ldp_by_enumeration() -> None:
    """coordinates: all, d = 3 at eps each: enumerate every output vector for every pair of inputs at the ends
    of the range; the worst ratio is exactly e^(d eps), the figure the accountant composes (``epsilon_per_upload``),
    so basic composition over the coordinates is tight for PDPM, not just an upper bound."""
    length, center, epsilon, d = 1.4, 0.1, 0.7, 3
    perturbation = ClientPerturbation(length=length, center=center, epsilon=epsilon)
    ends = list(itertools.product((-length / 2, length / 2), repeat=d))
    by_input = [pdpm_probabilities(np.array(offsets), length=length, epsilon=epsilon) for offsets in ends]
    worst = 0.0
    for observed in itertools.product(range(3), repeat=d):  # 0: high, 1: low, 2: zero offset, per coordinate
        values = [math.prod(p[symbol][j] for j, symbol in enumerate(observed)) for p in by_input]
        worst = max(worst, max(values) / min(values))
    assert math.log(worst) == pytest.approx(perturbation.epsilon_per_upload(d), rel=1e-12)
    assert math.log(worst) == pytest.approx(d * epsilon, rel=1e-12)


def test_all_coordinates_upload_spends_d_times_eps() -> None:
    perturbation = ClientPerturbation(length=2.0, center=0.0, epsilon=0.3)
    assert perturbation.epsilon_per_coordinate == 0.3
    assert perturbation.epsilon_per_upload(21_840) == pytest.approx(21_840 * 0.3)
    with pytest.raises(ValueError, match="coordinates"):
        ClientPerturbation(length=2.0, center=0.0, epsilon=0.3, coordinates=11).perturbed_per_upload(10)
