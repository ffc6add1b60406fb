"""privsilo.simulator.audit.bounds: Steinke et al.'s one-run lower bound (soundness on mechanisms of known epsilon, power,
the p-value against independent evaluations, its ceiling), Mahloujifar et al.'s f-DP (Gaussian-DP) one-run bound
(soundness on mechanisms of known mu, against the counting bound) and Andrew et al.'s Gaussian-fit estimate
(against the analytic Gaussian mechanism and numerical integration)."""
from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import expit, logit

from privsilo.simulator.audit.bounds import (
    EPSILON_TOLERANCE,
    AuditBound,
    GaussianEstimate,
    default_guess_counts,
    epsilon_ceiling,
    epsilon_lower_bound,
    fdp_one_run_audit,
    gdp_mu_lower_bound,
    gdp_rejects,
    gaussian_fit_estimate,
    one_run_audit,
    p_value,
    reachable_correct,
)
from privsilo.mechanisms.pld import gaussian_epsilon
from tests.support.audit_soundness import CONFIDENCE, REPEATS, SEED, assert_sound, reference_gaussian_epsilon

CANARIES = 1000


def _randomized_response(rng: np.random.Generator, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """Each canary's inclusion bit, reported truthfully with probability e^eps / (1 + e^eps): exactly eps-DP per
    canary. Scores are 0/1, so ties are everywhere (broken by index, which is independent of the coins)."""
    included = rng.random(CANARIES) < 0.5
    truthful = rng.random(CANARIES) < expit(epsilon)
    return np.where(truthful, included, ~included).astype(np.float64), included


def _gaussian_mechanism(rng: np.random.Generator, mu: float) -> tuple[np.ndarray, np.ndarray]:
    """Score = S_i mu + N(0, 1): the Gaussian mechanism of sensitivity mu and unit noise per canary (mu-GDP)."""
    included = rng.random(CANARIES) < 0.5
    return included * mu + rng.standard_normal(CANARIES), included


# --- soundness and power -------------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_randomized_response_bound_is_sound(epsilon):
    rng = np.random.default_rng([SEED, int(epsilon)])
    bounds = [one_run_audit(*_randomized_response(rng, epsilon), 0.0, CONFIDENCE).epsilon for _ in range(REPEATS)]
    assert_sound(bounds, epsilon)
    assert np.mean(bounds) > 0.3 * epsilon  # not vacuous either


def test_gaussian_mechanism_bound_is_sound():
    mu, delta = 2.0, 1e-5
    true_epsilon = reference_gaussian_epsilon(mu, delta)  # 9.997
    rng = np.random.default_rng([SEED, 7])
    bounds = [one_run_audit(*_gaussian_mechanism(rng, mu), delta, CONFIDENCE).epsilon for _ in range(REPEATS)]
    assert_sound(bounds, true_epsilon)
    assert np.mean(bounds) > 1.0


def test_power_on_randomized_response_at_epsilon_4():
    rng = np.random.default_rng([SEED, 4])
    bounds = [one_run_audit(*_randomized_response(rng, 4.0), 0.0, CONFIDENCE).epsilon for _ in range(20)]
    assert np.mean(bounds) > 1.0


@pytest.mark.parametrize("delta", [0.0, 1e-5])
def test_perfect_separation_reaches_3(delta):
    # Scores that separate perfectly, coins from a seeded generator (564 of 1000 included here): symmetric guessing
    # gets every guess right up to k = 2 min(included, excluded), so the grid's k = 599 gives the bound: 4.7234 at
    # delta = 0, 4.6203 at delta = 1e-5 (k = 1000 gets 936 right, less).
    included = np.random.default_rng([SEED, 1000]).random(CANARIES) < 0.5
    bound = one_run_audit(included.astype(np.float64), included, delta, CONFIDENCE)
    assert bound.epsilon >= 3
    assert bound.correct == bound.guesses == 599


@pytest.mark.parametrize("delta, largest", [(0.0, logit(0.005 ** (1 / 1000))), (1e-5, 5.1350)])
def test_largest_bound_with_1000_canaries(delta, largest):
    # The most any audit reaches with m = 1000, the default grid (10 guess counts, each tested at level 0.005) and
    # confidence 0.95: exactly 500 canaries included and all r = 1000 guesses right gives 5.2377 at delta = 0
    # (P[Binomial(1000, q) >= 1000] = q^1000 = 0.005: the closed form above) and 5.1350 at delta = 1e-5. A single
    # guess count fixed in advance (no Bonferroni, level 0.05) would give 5.809 and 5.782.
    included = np.arange(CANARIES) % 2 == 0
    bound = one_run_audit(included.astype(np.float64), included, delta, CONFIDENCE)
    assert (bound.guesses, bound.correct, bound.k_plus, bound.k_minus) == (1000, 1000, 500, 500)
    assert bound.epsilon == pytest.approx(largest, abs=1e-4)
    assert bound.epsilon <= largest or delta > 0  # at delta = 0: rounded down from the closed form


@pytest.mark.parametrize("m, ceiling", [(300, 3.9991), (1000, 5.1350)])
def test_the_largest_ceiling_is_every_guess_right_with_half_included(m, ceiling):
    # 4.00 with 300 canaries, 5.14 with 1,000 (delta 1e-5, the default grid, 0.95): over every inclusion count
    assert epsilon_ceiling(m, 1e-5, CONFIDENCE) == pytest.approx(ceiling, abs=1e-4)
    half = np.arange(m) % 2 == 0  # perfect scores with exactly half included: every guess right at every count
    perfect = one_run_audit(half.astype(np.float64), half, 1e-5, CONFIDENCE)
    assert perfect.epsilon == perfect.ceiling == epsilon_ceiling(m, 1e-5, CONFIDENCE)
    rng = np.random.default_rng([SEED, m])
    for mu in (1.0, 4.0, 30.0):  # whatever the scores, the bound stays at or below the ceiling
        included = rng.random(m) < 0.5
        bound = one_run_audit(included * mu + rng.standard_normal(m), included, 1e-5, CONFIDENCE)
        assert bound.epsilon <= bound.ceiling


@pytest.mark.parametrize("m", [300, 1000])
def test_perfectly_separated_scores_reach_the_reported_ceilings_in_every_seed(m):
    """The ceilings are those of the run's own inclusion count: perfectly separated scores (any order within the
    included and within the excluded) reach both in each of 20 seeds, and the counting one is mostly below the
    largest over all counts, which only m / 2 included reaches (3.48 and 4.62 or less
    more than one away from m / 2)."""
    largest = epsilon_ceiling(m, 1e-5, CONFIDENCE)
    below = 0
    for seed in range(20):
        rng = np.random.default_rng([SEED, 29, m, seed])
        included = rng.random(m) < 0.5
        scores = included + 0.5 * rng.random(m)  # every included score above every excluded one
        counting, gdp = one_run_audit(scores, included, 1e-5, CONFIDENCE), fdp_one_run_audit(scores, included, CONFIDENCE)
        assert counting.epsilon == counting.ceiling == epsilon_ceiling(m, 1e-5, CONFIDENCE, included=int(included.sum()))
        assert gdp.mu == gdp.ceiling_mu > 0
        assert all(correct == reachable_correct(m, int(included.sum()), k) for k, correct, _ in counting.candidates)
        noisy = one_run_audit(included * 3.0 + rng.standard_normal(m), included, 1e-5, CONFIDENCE)
        assert noisy.epsilon <= noisy.ceiling == counting.ceiling  # and any other scores stay below it
        below += counting.ceiling < largest
        if abs(int(included.sum()) - m / 2) > 1:
            assert counting.ceiling <= {300: 3.4821, 1000: 4.6237}[m]
    assert below >= 18


def test_bonferroni_over_the_grid():
    rng = np.random.default_rng([SEED, 11])
    scores, included = _gaussian_mechanism(rng, 3.0)
    bound = one_run_audit(scores, included, 1e-5, CONFIDENCE)
    counts = default_guess_counts(CANARIES)
    assert counts == (10, 17, 28, 46, 77, 129, 215, 359, 599, 1000)
    assert bound.per_test_confidence == pytest.approx(1 - 0.05 / len(counts))
    assert [c[0] for c in bound.candidates] == list(counts)
    for guesses, correct, epsilon in bound.candidates:
        assert epsilon == epsilon_lower_bound(CANARIES, guesses, correct, 1e-5, bound.per_test_confidence)
    assert bound.epsilon == max(c[2] for c in bound.candidates)
    assert (bound.guesses, bound.correct, bound.epsilon) in bound.candidates
    single = one_run_audit(scores, included, 1e-5, CONFIDENCE, guess_counts=[bound.guesses])
    assert single.epsilon > bound.epsilon  # one test: no correction, a higher bound for the same guesses


def test_ties_are_broken_by_index():
    included = np.array([True, False, True, True, False, False, True, False])
    bound = one_run_audit(np.zeros(8), included, 0.0, CONFIDENCE, guess_counts=[3, 8])
    # k = 3: "in" for canaries 0 and 1, "out" for canary 7 -> 2 right; k = 8: "in" 0-3, "out" 4-7 -> 3 + 3 right
    assert [c[:2] for c in bound.candidates] == [(3, 2), (8, 6)]
    assert one_run_audit(np.zeros(8), included, 0.0, CONFIDENCE, guess_counts=[3, 8]) == bound


# --- Mahloujifar et al.: the Gaussian-DP one-run bound -------------------------------------------------------


def _randomized_response_mu(epsilon: float) -> float:
    """The smallest mu with randomized response at epsilon mu-GDP: the largest over alpha of
    ``Phi^-1(1 - alpha) - Phi^-1(f_RR(alpha))``, ``f_RR(alpha) = max(1 - e^eps alpha, e^-eps (1 - alpha))`` (Dong et
    al. 2022: f-DP is the trade-off curve lying above; maximised on a fine grid, the kink alpha = 1 / (1 + e^eps)
    included)."""
    alpha = np.concatenate([np.geomspace(1e-12, 0.5, 200_000), [1 / (1 + math.exp(epsilon))]])
    trade_off = np.maximum(1 - math.exp(epsilon) * alpha, math.exp(-epsilon) * (1 - alpha))
    return float(np.max(stats.norm.isf(alpha) - stats.norm.ppf(trade_off)))


@pytest.mark.parametrize("mu", [1.0, 2.0])
def test_gdp_bound_is_sound_on_the_gaussian_mechanism(mu):
    rng = np.random.default_rng([SEED, 17, int(mu)])
    bounds = [fdp_one_run_audit(*_gaussian_mechanism(rng, mu), CONFIDENCE) for _ in range(REPEATS)]
    assert_sound([bound.mu for bound in bounds], mu)
    assert np.mean([bound.mu for bound in bounds]) > 0.4 * mu  # and not vacuous


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_gdp_bound_is_sound_on_randomized_response(epsilon):
    rng = np.random.default_rng([SEED, 19, int(epsilon)])
    bounds = [fdp_one_run_audit(*_randomized_response(rng, epsilon), CONFIDENCE).mu for _ in range(REPEATS)]
    assert_sound(bounds, _randomized_response_mu(epsilon))


def test_gdp_bound_rejects_more_than_the_counting_bound_on_gaussian_scores():
    # the test's power, not a claim: on mu = 1 scores (a Gaussian mechanism, which is exactly 1-GDP) the mu rejected
    # has a Gaussian epsilon at 1e-5 above the counting bound in every one of 20 draws; both stay below their ceilings
    rng = np.random.default_rng([SEED, 23])
    for _ in range(20):
        scores, included = _gaussian_mechanism(rng, 1.0)
        gdp, counting = fdp_one_run_audit(scores, included, CONFIDENCE), one_run_audit(scores, included, 1e-5, CONFIDENCE)
        assert counting.epsilon < gaussian_epsilon(gdp.mu, 1e-5) and gdp.mu <= gdp.ceiling_mu


@pytest.mark.parametrize("m, k, c", [(1000, 200, 180), (1000, 1000, 700), (300, 30, 30), (100, 50, 26)])
def test_gdp_rejection_is_monotone_in_mu_and_the_bound_is_its_edge(m, k, c):
    level = 0.005
    verdicts = [gdp_rejects(m, k, c, mu, level) for mu in np.linspace(0.0, 4.0, 401)]
    assert all(earlier or not later for earlier, later in zip(verdicts, verdicts[1:]))  # rejected, then never again
    mu = gdp_mu_lower_bound(m, k, c, 1 - level)
    if mu > 0:
        assert gdp_rejects(m, k, c, mu, level) and not gdp_rejects(m, k, c, mu + 2e-4, level)


def test_gdp_rejects_nothing_from_chance_guesses():
    # half of the guesses right: mu = 0 (no information) is not rejected, and the bound is 0
    assert not gdp_rejects(1000, 200, 100, 0.0, 0.05) and gdp_mu_lower_bound(1000, 200, 100, 0.95) == 0.0


# --- the p-value ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("m, r, v, delta", [(1000, 1000, 1000, 1e-5), (1000, 200, 150, 1e-5), (20, 10, 7, 0.01)])
def test_p_value_is_monotone_in_epsilon(m, r, v, delta):
    values = [p_value(m, r, v, eps, delta) for eps in np.linspace(0, 10, 401)]
    assert np.all(np.diff(values) >= 0)


@pytest.mark.parametrize("m, r, v", [(1000, 1000, 990), (1000, 100, 70), (10, 5, 0), (2, 2, 2)])
def test_p_value_at_delta_0_is_the_binomial_tail(m, r, v):
    for eps in (0.0, 0.5, 2.0, 6.0):
        q = math.exp(eps) / (1 + math.exp(eps))
        assert p_value(m, r, v, eps, 0.0) == pytest.approx(stats.binom.sf(v - 1, r, q), rel=1e-10, abs=1e-300)


def _p_value_by_enumeration(m: int, r: int, v: int, eps: float, delta: float) -> mpmath.mpf:
    """Corollary 5.4 evaluated independently: every one of the 2^r right/wrong patterns of the r guesses, each
    right with probability q, in 50-digit arithmetic."""
    with mpmath.workdps(50):
        q = mpmath.e**eps / (1 + mpmath.e**eps)
        by_count = [mpmath.mpf(0)] * (r + 1)
        for pattern in itertools.product((0, 1), repeat=r):
            right = sum(pattern)
            by_count[right] += q**right * (1 - q) ** (r - right)
        tail = mpmath.fsum(by_count[v:])
        alpha = max((mpmath.fsum(by_count[v - i : v]) / i for i in range(1, v + 1)), default=mpmath.mpf(0))
        return min(tail + 2 * m * mpmath.mpf(delta) * alpha, mpmath.mpf(1))


@pytest.mark.parametrize(
    "m, r, v, eps, delta",
    [(5, 4, 3, 0.7, 0.01), (8, 6, 6, 1.5, 0.003), (8, 6, 1, 0.2, 0.02), (6, 5, 4, 2.5, 0.05), (3, 3, 2, 0.0, 0.1)],
)
def test_delta_term_against_brute_force(m, r, v, eps, delta):
    expected = float(_p_value_by_enumeration(m, r, v, eps, delta))
    assert p_value(m, r, v, eps, delta) == pytest.approx(expected, rel=1e-12)
    assert p_value(m, r, v, eps, delta) > p_value(m, r, v, eps, 0.0) or expected == 1.0


@pytest.mark.parametrize(
    "m, r, v, delta, confidence",
    [
        (1000, 1000, 1000, 1e-5, 0.995),
        (1000, 359, 330, 1e-5, 0.95),
        (1000, 100, 80, 0.0, 0.9),
        (50, 20, 19, 1e-3, 0.99),
    ],
)
def test_epsilon_lower_bound_is_the_largest_rejected_epsilon(m, r, v, delta, confidence):
    eps = epsilon_lower_bound(m, r, v, delta, confidence)
    assert eps > 0
    assert p_value(m, r, v, eps, delta) <= 1 - confidence
    assert p_value(m, r, v, eps + EPSILON_TOLERANCE, delta) > 1 - confidence


def test_epsilon_lower_bound_is_0_when_nothing_is_rejected():
    assert epsilon_lower_bound(1000, 100, 55, 1e-5, 0.95) == 0.0
    assert epsilon_lower_bound(1000, 0, 0, 0.0, 0.95) == 0.0


# --- the Gaussian-fit estimate ------------------------------------------------------------------------------


def _sample_with(mu: float, std: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """n values whose sample mean and standard deviation (ddof = 1) are exactly mu and std (up to rounding)."""
    z = rng.standard_normal(n)
    return mu + std * (z - z.mean()) / z.std(ddof=1)


@pytest.mark.parametrize("mu, delta", [(0.5, 1e-5), (1.0, 1e-5), (2.0, 1e-3), (4.0, 1e-6)])
def test_equal_variances_give_the_gaussian_mechanism(mu, delta):
    rng = np.random.default_rng([SEED, 3])
    std = 0.03
    observed, unobserved = _sample_with(0.1 + mu * std, std, 500, rng), _sample_with(0.1, std, 1000, rng)
    estimate = gaussian_fit_estimate(observed, unobserved, delta)
    assert isinstance(estimate, GaussianEstimate)
    assert (estimate.mu_observed, estimate.std_observed) == pytest.approx((0.1 + mu * std, std), rel=1e-12)
    assert estimate.epsilon == pytest.approx(reference_gaussian_epsilon(mu, delta), rel=1e-6)


def _hockey_stick_by_quadrature(eps: float, mu_p: float, s_p: float, mu_q: float, s_q: float) -> float:
    def integrand(x):
        return max(0.0, stats.norm.pdf(x, mu_p, s_p) - math.exp(eps) * stats.norm.pdf(x, mu_q, s_q))

    width = 40 * max(s_p, s_q)
    low, high = min(mu_p, mu_q) - width, max(mu_p, mu_q) + width
    return integrate.quad(integrand, low, high, limit=1000, epsabs=1e-15, epsrel=1e-12)[0]


@pytest.mark.parametrize(
    "mu_obs, s_obs, mu_unobs, s_unobs, delta",
    [(1.0, 1.3, 0.0, 1.0, 1e-3), (0.5, 0.7, 0.0, 1.0, 1e-3), (2.0, 1.1, 0.2, 0.9, 1e-2), (0.0, 1.5, 0.0, 1.0, 1e-3)],
)
def test_unequal_variances_against_quadrature(mu_obs, s_obs, mu_unobs, s_unobs, delta):
    rng = np.random.default_rng([SEED, 5])
    observed, unobserved = _sample_with(mu_obs, s_obs, 300, rng), _sample_with(mu_unobs, s_unobs, 300, rng)
    estimate = gaussian_fit_estimate(observed, unobserved, delta)
    assert estimate.epsilon > 0

    def delta_of(eps):
        parameters = (mu_obs, s_obs, mu_unobs, s_unobs)
        swapped = (mu_unobs, s_unobs, mu_obs, s_obs)
        return max(_hockey_stick_by_quadrature(eps, *parameters), _hockey_stick_by_quadrature(eps, *swapped))

    assert delta_of(estimate.epsilon) == pytest.approx(delta, rel=1e-6)
    assert delta_of(estimate.epsilon * 0.99) > delta


def test_estimate_is_symmetric_and_location_scale_invariant():
    rng = np.random.default_rng([SEED, 6])
    observed, unobserved = rng.normal(0.05, 0.012, 400), rng.normal(0.0, 0.01, 800)
    estimate = gaussian_fit_estimate(observed, unobserved, 1e-5)
    swapped = gaussian_fit_estimate(unobserved, observed, 1e-5)
    moved = gaussian_fit_estimate(3.0 - 7.0 * observed, 3.0 - 7.0 * unobserved, 1e-5)
    assert swapped.epsilon == pytest.approx(estimate.epsilon, rel=1e-9)
    assert moved.epsilon == pytest.approx(estimate.epsilon, rel=1e-8)
    assert gaussian_fit_estimate(observed, unobserved, 1e-3).epsilon < estimate.epsilon
    # variances equal to 1e-9: the quadratic's leading coefficient is tiny, the far root huge, the near one exact
    observed, unobserved = _sample_with(0.05, 0.01 * (1 + 1e-9), 400, rng), _sample_with(0.0, 0.01, 400, rng)
    nearly_equal = gaussian_fit_estimate(observed, unobserved, 1e-5)
    assert nearly_equal.epsilon == pytest.approx(reference_gaussian_epsilon(5.0, 1e-5), rel=1e-6)


# --- validation -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: one_run_audit([0.3], [True], 0.0, 0.95), "at least 2 canaries"),
        (lambda: epsilon_lower_bound(1, 1, 1, 0.0, 0.95), "at least 2 canaries"),
        (lambda: one_run_audit([0.1, 0.2], [True, False], 0.0, 1.0), "confidence"),
        (lambda: one_run_audit([0.1, 0.2], [True, False], 0.0, 0.0), "confidence"),
        (lambda: epsilon_lower_bound(10, 5, 3, 0.0, 1.5), "confidence"),
        (lambda: one_run_audit([0.1, 0.2], [True, False], 1.0, 0.95), "delta"),
        (lambda: p_value(10, 5, 3, 1.0, -1e-9), "delta"),
        (lambda: one_run_audit([0.1, 0.2, 0.3], [True, False], 0.0, 0.95), "3 entries but included has 2"),
        (lambda: one_run_audit([0.1, math.nan], [True, False], 0.0, 0.95), "non-finite"),
        (lambda: one_run_audit([0.1, math.inf], [True, False], 0.0, 0.95), "non-finite"),
        (lambda: one_run_audit([0.1, 0.2], [2, 0], 0.0, 0.95), "boolean"),
        (lambda: one_run_audit([0.1, 0.2], [True, False], 0.0, 0.95, guess_counts=[3]), r"\[1, m = 2\]"),
        (lambda: one_run_audit([0.1, 0.2], [True, False], 0.0, 0.95, guess_counts=[1, 1]), "repeated"),
        (lambda: one_run_audit([0.1, 0.2], [True, False], 0.0, 0.95, guess_counts=[]), "empty"),
        (lambda: one_run_audit([0.1, 0.2], [True, False], 0.0, 0.95, guess_counts=[1.5]), "integers"),
        (lambda: p_value(10, 5, 6, 1.0, 0.0), r"correct \(v\) <= guesses"),
        (lambda: p_value(10, 5, 3, math.nan, 0.0), "epsilon"),
        (lambda: gaussian_fit_estimate([0.1, 0.2], [0.0, 0.1], 0.0), "delta"),
        (lambda: gaussian_fit_estimate([0.1, 0.1], [0.0, 0.1], 1e-5), "zero standard deviation"),
        (lambda: gaussian_fit_estimate([0.1], [0.0, 0.1], 1e-5), "at least 2"),
        (lambda: gaussian_fit_estimate([0.1, math.nan], [0.0, 0.1], 1e-5), "non-finite"),
    ],
)
def test_bad_input_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_audit_bound_is_frozen():
    bound = one_run_audit([0.1, 0.9], [False, True], 0.0, 0.95)
    assert isinstance(bound, AuditBound)
    with pytest.raises(AttributeError):
        bound.epsilon = 10.0  # type: ignore[misc]


def test_gaussian_estimate_is_infinite_when_the_fits_do_not_overlap():
    far_apart = gaussian_fit_estimate([1000.0, 1000.1, 999.9], [0.0, 0.1, -0.1], 1e-5)
    assert far_apart.epsilon == math.inf
