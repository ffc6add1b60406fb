"""The statistics of empirical privacy auditing: a lower bound on epsilon from one training run, and a Gaussian-fit
estimate of it.

**Lower bound** (Steinke, Nasr and Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023; section
references are to arXiv:2305.08846v1). ``m`` canaries are each included independently with probability 1/2; after
training the auditor guesses "in" for the ``k_plus`` highest scores, "out" for the ``k_minus`` lowest and abstains
on the rest: ``r = k_plus + k_minus`` guesses, ``v`` of them correct. Under the null hypothesis "the mechanism is
(epsilon, delta)-DP with respect to each canary", Theorem 5.2 and Corollary 5.4 (the algorithm of Appendix D)
bound the chance of ``v`` or more correct guesses by

    p(epsilon, delta) = P[Binomial(r, q) >= v] + 2 m delta max_{i = 1..v} P[v - i <= Binomial(r, q) < v] / i,

with ``q = e^epsilon / (1 + e^epsilon)`` the accuracy of epsilon-DP randomized response (Theorem 3.1 is the case
``delta = 0``). A ``p`` at most ``1 - confidence`` rejects the null hypothesis: the mechanism is not
(epsilon, delta)-DP, at that confidence. [`epsilon_lower_bound`][privsilo.simulator.audit.bounds.epsilon_lower_bound] is the largest such epsilon and
[`one_run_audit`][privsilo.simulator.audit.bounds.one_run_audit] the whole audit from the canaries' scores.

**f-DP lower bound** (Mahloujifar, Melis and Chaudhuri, "Auditing f-Differential Privacy in One Run", ICML 2025;
arXiv:2410.22235): the same game and guesses, tested against a stronger null hypothesis, "the mechanism is
mu-Gaussian-DP with respect to each canary" (its trade-off function ``f_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu)``,
Dong, Roth and Su 2022). The paper bounds the chance of ``c`` or more correct of ``k`` guesses under an f-DP
mechanism by a recursion over the correct guesses (`gdp_rejects`), which uses the whole trade-off curve
rather than one (epsilon, delta) point of it, and so rejects more. `fdp_one_run_audit` returns the largest
mu rejected: the audited mechanism is not mu-GDP, at the confidence. It is reported in mu only, to be set against
the mechanism's own mu* ([`privsilo.mechanisms.gdp`][privsilo.mechanisms.gdp]): a mechanism that meets an (epsilon, delta) claim
can have a mu* whose epsilon at delta lies above the claim, so mu's epsilon is no lower bound on the (epsilon,
delta) claim.

**Ceilings.** Given how many canaries were included, perfectly separated scores give every guess count the most
correct guesses it can have (``min(k_plus, included) + min(k_minus, excluded)``, `reachable_correct`), and so
the largest bound of that run: the ``ceiling`` of `one_run_audit` and the ``ceiling_mu`` of
`fdp_one_run_audit`. `epsilon_ceiling` without ``included`` is the largest over every inclusion count,
reached only where about half the canaries were included.

**Estimate** (Andrew, Kairouz, Oh, Oprea, McMahan and Suriyakumar, "One-shot Empirical Privacy Estimation for
Federated Learning", ICLR 2024, the one-shot estimate): fit a Gaussian to the cosines between the final model
delta and the inserted canaries' directions, another to those of unobserved canaries (random directions never
inserted), and report the epsilon at ``delta`` of telling the two Gaussians apart ([`gaussian_fit_estimate`][privsilo.simulator.audit.bounds.gaussian_fit_estimate]).
It is an *estimate*, not a bound: it assumes the cosines are Gaussian and carries no confidence level.

Pure numpy and scipy: no torch, no Ray.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np
from scipy.special import bdtrc, expit, gammaln, ndtr


EPSILON_TOLERANCE = 1e-6
"""Bisection tolerance of [`epsilon_lower_bound`][privsilo.simulator.audit.bounds.epsilon_lower_bound]: the bound returned is within this of the largest rejected
epsilon, and below it (rounded down, so the bound stays valid)."""

ESTIMATE_TOLERANCE = 1e-10
"""Bisection tolerance of [`gaussian_fit_estimate`][privsilo.simulator.audit.bounds.gaussian_fit_estimate]'s epsilon."""

GUESS_GRID_SIZE = 10
"""How many guess counts ``default_guess_counts`` proposes (fewer for small ``m``, after rounding)."""

ESTIMATE_EPSILON_CEILING = 512.0
"""The largest epsilon [`gaussian_fit_estimate`][privsilo.simulator.audit.bounds.gaussian_fit_estimate] searches (``e^epsilon`` stays finite in float64); beyond it the
estimate is infinite."""


@dataclass(frozen=True)
class AuditBound:
    """The result of [`one_run_audit`][privsilo.simulator.audit.bounds.one_run_audit]: with probability at least ``confidence`` over the canaries' inclusion
    coins, the audited mechanism is not (eps, ``delta``)-DP for any eps < ``epsilon``."""

    epsilon: float  # the lower bound: the largest over ``candidates``
    confidence: float  # the overall confidence, after the Bonferroni correction over ``candidates``
    delta: float
    canaries: int  # m
    guesses: int  # r = k_plus + k_minus of the guess count that gave ``epsilon``
    correct: int  # v of that guess count
    k_plus: int
    k_minus: int
    per_test_confidence: float  # 1 - (1 - confidence) / len(candidates): the level each guess count is tested at
    candidates: tuple[tuple[int, int, float], ...]  # (guesses, correct, epsilon) for each guess count, for plots
    ceiling: float  # the bound of perfectly separated scores with this many included (:func:`epsilon_ceiling`): no scores give more


@dataclass(frozen=True)
class GdpAuditBound:
    """The result of `fdp_one_run_audit`: with probability at least ``confidence`` over the canaries'
    inclusion coins, the audited mechanism is not mu-GDP for any mu < ``mu`` (a statement in mu, to be set against the
    mechanism's own mu*, not a bound on its (epsilon, delta))."""

    mu: float  # the lower bound on mu: the largest over ``candidates``
    confidence: float
    canaries: int
    guesses: int
    correct: int
    per_test_confidence: float
    candidates: tuple[tuple[int, int, float | None], ...]  # (guesses, correct, mu), mu None where not above the counts before
    ceiling_mu: float  # the largest mu perfectly separated scores reject, with this many included


@dataclass(frozen=True)
class GaussianEstimate:
    """The result of [`gaussian_fit_estimate`][privsilo.simulator.audit.bounds.gaussian_fit_estimate]: an ESTIMATE of epsilon at ``delta`` (not a bound)."""

    epsilon: float
    delta: float
    mu_observed: float
    std_observed: float
    mu_unobserved: float
    std_unobserved: float


# --- Steinke, Nasr and Jagielski: the one-run lower bound ---------------------------------------------------


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """The bound on P[at least ``v`` of ``r`` guesses correct] for an (``epsilon``, ``delta``)-DP mechanism audited
    with ``m`` canaries (Steinke et al. 2023, Theorem 5.2 / Corollary 5.4, Appendix D's ``p_value_DP_audit``):
    ``P[Binomial(r, q) >= v] + 2 m delta max_{i=1..v} P[v - i <= Binomial(r, q) < v] / i``, capped at 1, with
    ``q = e^epsilon / (1 + e^epsilon)``. At ``delta = 0`` it is the binomial tail of Theorem 3.1, nondecreasing
    in ``epsilon`` because the tail grows with ``q``. With the delta term it is nondecreasing too, as checked
    numerically: the tests scan epsilon in three settings, and a scan of 400 random ``(m, r, v, delta)`` (during
    development) found no decrease."""
    _check_counts(m, r, v)
    _check_delta(delta)
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    return _p_value(m, r, v, epsilon, delta)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """The largest epsilon whose null hypothesis "(epsilon, ``delta``)-DP" [`p_value`][privsilo.simulator.audit.bounds.p_value] rejects at level
    ``1 - confidence``, i.e. with ``p_value(m, r, v, epsilon, delta) <= 1 - confidence``; 0 when even epsilon = 0
    is not rejected. Found by bisection on ``[0, hi]`` (``hi`` doubled from 1 until it is not rejected), which is
    sound because the p-value is nondecreasing in epsilon; the returned value is the lower end of the final
    bracket, so it is itself rejected and within ``EPSILON_TOLERANCE`` below the supremum (rounded down)."""
    _check_counts(m, r, v)
    _check_delta(delta)
    _check_confidence(confidence)
    level = 1.0 - confidence
    if _p_value(m, r, v, 0.0, delta) > level:
        return 0.0
    low, high = 0.0, 1.0
    while _p_value(m, r, v, high, delta) <= level:
        low, high = high, 2.0 * high
    while high - low > EPSILON_TOLERANCE:
        middle = 0.5 * (low + high)
        if _p_value(m, r, v, middle, delta) <= level:
            low = middle
        else:
            high = middle
    return low


def default_guess_counts(m: int) -> tuple[int, ...]:
    """The guess counts [`one_run_audit`][privsilo.simulator.audit.bounds.one_run_audit] tries by default: ``GUESS_GRID_SIZE`` values spaced
    geometrically from ``max(2, m / 100)`` to ``m`` (rounded, duplicates dropped; 10, 17, 28, 46, 77, 129, 215,
    359, 599, 1000 for m = 1000). They depend on ``m`` only, never on the scores, as the Bonferroni correction
    requires."""
    _check_canaries(m)
    grid = np.rint(np.geomspace(max(2.0, m / 100), m, GUESS_GRID_SIZE)).astype(int)
    return tuple(int(k) for k in np.unique(grid))


def reachable_correct(m: int, included: int, k: int) -> int:
    """The most correct guesses of ``k`` (``ceil(k / 2)`` "in", ``floor(k / 2)`` "out") when ``included`` of the ``m``
    canaries were included: what perfectly separated scores give."""
    return min((k + 1) // 2, included) + min(k // 2, m - included)


def epsilon_ceiling(m: int, delta: float, confidence: float, guess_counts: Sequence[int] | None = None,
                    included: int | None = None) -> float:
    """The largest bound `one_run_audit` can return for ``m`` canaries at ``delta`` and ``confidence`` with these
    guess counts (default `default_guess_counts`) when ``included`` of them were included: perfectly
    separated scores (`reachable_correct`), the best count taken. A claim above it cannot be refuted by that
    run whatever the scores; a bound below a claim never confirms it either (an audit only ever rejects). Without
    ``included``: the largest over every inclusion count (every guess right, ``v = r``), which a run reaches only
    where about half its canaries were included."""
    _check_delta(delta)
    _check_confidence(confidence)
    counts = default_guess_counts(m) if guess_counts is None else _check_guess_counts(guess_counts, m)
    if included is not None and not 0 <= included <= m:
        raise ValueError(f"included must be in [0, m = {m}], got {included}")
    return _epsilon_ceiling(m, delta, 1.0 - (1.0 - confidence) / len(counts), counts, included)


@lru_cache(maxsize=256)
def _epsilon_ceiling(m: int, delta: float, per_test_confidence: float, counts: tuple[int, ...], included: int | None) -> float:
    return max(epsilon_lower_bound(m, k, k if included is None else reachable_correct(m, included, k), delta,
                                   per_test_confidence) for k in counts)


def one_run_audit(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    delta: float,
    confidence: float,
    guess_counts: Sequence[int] | None = None,
) -> AuditBound:
    """Steinke et al.'s one-run audit of the canaries' ``scores`` (higher = more likely included) against the
    ``included`` coins, for the null hypothesis "(eps, ``delta``)-DP per canary".

    Guesses: for a guess count ``k``, "in" for the ``k_plus = ceil(k / 2)`` highest scores and "out" for the
    ``k_minus = floor(k / 2)`` lowest: symmetric guessing, so that up to all ``m`` canaries can be guessed when
    scores separate well (guessing "in" only would stop near m / 2 correct guesses). Ties are broken by canary
    index, never by ``included``: canaries are ranked by a stable sort on decreasing score, so among equal scores
    the lower index counts as the higher score ("in" guesses take the lowest indices of a tie at the top, "out"
    guesses the highest indices of a tie at the bottom). This is sound when canary indices are assigned
    independently of the inclusion coins (the coins are drawn after the canaries are numbered).

    Several guess counts and a valid confidence: the candidate counts ``K`` (``guess_counts``, default
    ``default_guess_counts``) must be fixed in advance, independently of the scores. Each count's test runs at
    level ``(1 - confidence) / |K|`` (Bonferroni), so the chance that any of the ``|K|`` bounds exceeds the true
    epsilon is at most ``1 - confidence``, and the maximum over ``K`` is reported as the bound at ``confidence``.
    Every count's (guesses, correct, epsilon) is kept in ``candidates`` for plots.

    Raises ValueError for fewer than 2 canaries, mismatched lengths, non-finite scores, ``included`` not boolean
    (or 0/1), ``confidence`` outside (0, 1), ``delta`` outside [0, 1), or guess counts that are empty, repeated or
    outside [1, m] or not integers.
    """
    scores_array, included_array = _check_canary_arrays(scores, included)
    _check_delta(delta)
    _check_confidence(confidence)
    m = len(scores_array)
    counts = default_guess_counts(m) if guess_counts is None else _check_guess_counts(guess_counts, m)
    per_test_confidence = 1.0 - (1.0 - confidence) / len(counts)
    in_correct, out_correct = _cumulative_correct(scores_array, included_array)
    candidates = []
    for k in counts:
        k_plus, k_minus = (k + 1) // 2, k // 2
        correct = int(in_correct[k_plus] + out_correct[k_minus])
        candidates.append((k, correct, epsilon_lower_bound(m, k, correct, delta, per_test_confidence)))
    best = max(range(len(candidates)), key=lambda index: candidates[index][2])
    guesses, correct, epsilon = candidates[best]
    return AuditBound(
        epsilon=epsilon,
        confidence=confidence,
        delta=delta,
        canaries=m,
        guesses=guesses,
        correct=correct,
        k_plus=(guesses + 1) // 2,
        k_minus=guesses // 2,
        per_test_confidence=per_test_confidence,
        candidates=tuple(candidates),
        ceiling=epsilon_ceiling(m, delta, confidence, counts, included=int(included_array.sum())),
    )


def _p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    q = float(expit(epsilon))
    tail = 1.0 if v == 0 else float(bdtrc(v - 1, r, q))  # P[Binomial(r, q) >= v]
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    return min(tail + 2.0 * m * delta * _largest_partial_mean(r, v, epsilon), 1.0)


def _largest_partial_mean(r: int, v: int, epsilon: float) -> float:
    """``max_{i=1..v} P[v - i <= Binomial(r, q) < v] / i`` (Corollary 5.4's alpha), from the binomial pmf at
    ``0..v-1`` evaluated in log space (``log q = -log(1 + e^-eps)``, ``log(1 - q) = -eps - log(1 + e^-eps)``)."""
    k = np.arange(v)
    log_q = -math.log1p(math.exp(-epsilon))
    log_pmf = gammaln(r + 1) - gammaln(k + 1) - gammaln(r - k + 1) + k * log_q + (r - k) * (log_q - epsilon)
    partial_sums = np.cumsum(np.exp(log_pmf)[::-1])  # i-th entry: P[v - i <= Binomial < v], i = 1..v
    return float(np.max(partial_sums / np.arange(1, v + 1)))


def _cumulative_correct(scores: np.ndarray, included: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``in_correct[j]``: included canaries among the ``j`` highest-ranked; ``out_correct[j]``: excluded ones among
    the ``j`` lowest-ranked (ranking: stable sort on decreasing score, ties by increasing index)."""
    ranked = included[np.argsort(-scores, kind="stable")]
    in_correct = np.concatenate(([0], np.cumsum(ranked)))
    out_correct = np.concatenate(([0], np.cumsum(~ranked[::-1])))
    return in_correct, out_correct


# --- Mahloujifar et al.: the f-DP (Gaussian-DP) one-run lower bound ----------------------------------------

_STANDARD_NORMAL = NormalDist()  # pure-Python cdf and inverse cdf: faster than scipy's on scalars

MU_TOLERANCE = 1e-4
"""Bisection tolerance of `gdp_mu_lower_bound` (the bound is the bracket's lower end, rounded down: at most
1e-4 below the largest mu rejected, some 1e-3 in epsilon)."""

MU_SEARCH_LIMIT = 64.0
"""The largest mu `gdp_mu_lower_bound` tries (a mu-GDP mechanism with mu = 64 has epsilon above 2,000 at any
delta above 1e-300): beyond it the guesses are treated as if no privacy at all were claimed."""


def gdp_rejects(m: int, k: int, c: int, mu: float, level: float) -> bool:
    """Whether ``c`` correct of ``k`` guesses on ``m`` canaries reject "mu-GDP per canary" at ``level`` (Mahloujifar
    et al. 2025, Sec. 4, the recursion with its cap at 1).

    The recursion walks ``i = c - 1, ..., 0``. ``r`` and ``h`` bound, in units of ``m``, how much probability mass
    the correct and the incorrect guesses can carry if the event "``c`` or more correct" had probability ``level``:
    they start at ``level c / m`` and ``level (k - c) / m``; each step lets ``h`` rise to what the trade-off curve
    forces, ``f_mu``'s inverse blow-up ``Phi(Phi^-1(r) - mu)`` applied to ``r``, and ``r`` rise by ``i / (k - i)``
    times that increase (capped at 1). A mu-GDP mechanism must leave ``r + h <= k / m``; above it the null is
    rejected. ``h`` stops rising once it no longer changes, and then nothing changes."""
    r, h, total = level * c / m, level * (k - c) / m, k / m
    for i in range(c - 1, -1, -1):
        if r + h > total:  # r and h never decrease: rejected already
            return True
        raised = max(h, _inverse_blow_up(r, mu))
        if raised == h:
            break
        r, h = min(r + i / (k - i) * (raised - h), 1.0), raised
    return r + h > total


def _inverse_blow_up(r: float, mu: float) -> float:
    """``Phi(Phi^-1(r) - mu)``, mu-GDP's inverse blow-up function (``1 - f_mu`` inverted), 0 at 0 and 1 at 1."""
    if r <= 0.0 or r >= 1.0:
        return min(max(r, 0.0), 1.0)
    return _STANDARD_NORMAL.cdf(_STANDARD_NORMAL.inv_cdf(r) - mu)


def gdp_mu_lower_bound(m: int, k: int, c: int, confidence: float, *, at_least: float = 0.0) -> float:
    """The largest mu whose null "mu-GDP" `gdp_rejects` rejects at ``1 - confidence`` (0 where even mu = 0 is
    not rejected): bisection, the rejection being monotone in mu (a larger mu lowers the inverse blow-up, so ``h``
    and ``r`` rise less); the lower end of the final bracket is returned, so the bound is itself rejected. With
    ``at_least`` (a bound already found), ``at_least`` is returned unless this count rejects more (a short cut)."""
    _check_counts(m, k, c)
    _check_confidence(confidence)
    level = 1.0 - confidence
    if not gdp_rejects(m, k, c, at_least, level):
        return at_least
    low, high = at_least, max(1.0, 2.0 * at_least)
    while gdp_rejects(m, k, c, high, level):
        if high >= MU_SEARCH_LIMIT:
            return high
        low, high = high, 2.0 * high
    while high - low > MU_TOLERANCE:
        middle = 0.5 * (low + high)
        if gdp_rejects(m, k, c, middle, level):
            low = middle
        else:
            high = middle
    return low


def fdp_one_run_audit(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    confidence: float,
    guess_counts: Sequence[int] | None = None,
) -> GdpAuditBound:
    """Mahloujifar et al.'s f-DP one-run audit for the null "mu-GDP per canary", with the guesses of
    `one_run_audit` (the same grid fixed in advance, Bonferroni over it, symmetric "in"/"out" guesses: a
    mu-GDP trade-off function is symmetric and both directions of add/remove are mu-GDP, so a wrong "out" guess is
    bounded as a wrong "in" guess is). The bound is a mu, with no epsilon: see the module docstring."""
    scores_array, included_array = _check_canary_arrays(scores, included)
    _check_confidence(confidence)
    m = len(scores_array)
    counts = default_guess_counts(m) if guess_counts is None else _check_guess_counts(guess_counts, m)
    per_test_confidence = 1.0 - (1.0 - confidence) / len(counts)
    in_correct, out_correct = _cumulative_correct(scores_array, included_array)
    candidates = _gdp_candidates(m, tuple((k, int(in_correct[(k + 1) // 2] + out_correct[k // 2])) for k in counts),
                                 per_test_confidence)
    tried = [candidate for candidate in candidates if candidate[2] is not None]
    guesses, correct, mu = max(tried, key=lambda candidate: candidate[2]) if tried else (counts[0], candidates[0][1], 0.0)
    return GdpAuditBound(
        mu=mu,
        confidence=confidence,
        canaries=m,
        guesses=guesses,
        correct=correct,
        per_test_confidence=per_test_confidence,
        candidates=candidates,
        ceiling_mu=_gdp_ceiling_mu(m, int(included_array.sum()), per_test_confidence, counts),
    )


def _gdp_candidates(m: int, outcomes: tuple[tuple[int, int], ...], per_test_confidence: float
                    ) -> tuple[tuple[int, int, float | None], ...]:
    """(guesses, correct, mu) per guess count, each searched above the best so far only (the same maximum, found
    faster; mu None where not above it)."""
    candidates, best = [], 0.0
    for k, correct in outcomes:
        mu = gdp_mu_lower_bound(m, k, correct, per_test_confidence, at_least=best)
        candidates.append((k, correct, mu if mu > best else None))
        best = max(best, mu)
    return tuple(candidates)


@lru_cache(maxsize=256)
def _gdp_ceiling_mu(m: int, included: int, per_test_confidence: float, counts: tuple[int, ...]) -> float:
    """The largest mu perfectly separated scores reject with ``included`` canaries included, found as the audit
    finds its bound (so such scores reach it exactly)."""
    outcomes = tuple((k, reachable_correct(m, included, k)) for k in counts)
    return max((mu for _, _, mu in _gdp_candidates(m, outcomes, per_test_confidence) if mu is not None), default=0.0)


# --- Andrew et al.: the Gaussian-fit estimate ---------------------------------------------------------------


def gaussian_fit_estimate(
    observed: Sequence[float] | np.ndarray, unobserved: Sequence[float] | np.ndarray, delta: float
) -> GaussianEstimate:
    """Andrew et al.'s (ICLR 2024) one-shot ESTIMATE of epsilon at ``delta``, not a bound: fit ``N(mu_obs,
    s_obs^2)`` to the ``observed`` cosines (final model delta against the inserted canaries' directions) and
    ``N(mu_unobs, s_unobs^2)`` to the ``unobserved`` ones (random directions never inserted), by sample mean and
    sample standard deviation (ddof = 1), and return the smallest epsilon with ``delta(epsilon) <= delta``, where
    ``delta(epsilon)`` is the larger over the two orderings (P, Q) of ``integral max(0, p - e^epsilon q)``, the
    hockey-stick divergence. The integral is exact: the log ratio of two Gaussian densities is quadratic in x, so
    the region ``p > e^epsilon q`` is one or two intervals with closed-form ends (``_hockey_stick``).
    ``delta(epsilon)`` is nonincreasing, and the inversion is bisection to ``ESTIMATE_TOLERANCE``. With equal
    variances it is the Gaussian mechanism's exact epsilon for ``mu = |mu_obs - mu_unobs| / s`` (Balle and Wang,
    ICML 2018, Theorem 8).

    Raises ValueError for fewer than 2 values in either set, non-finite values, a zero standard deviation, or
    ``delta`` outside (0, 1).
    """
    mu_p, s_p = _fit_gaussian(observed, "observed")
    mu_q, s_q = _fit_gaussian(unobserved, "unobserved")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1) for a Gaussian-fit estimate, got {delta!r}")

    def delta_of(epsilon: float) -> float:
        return max(_hockey_stick(epsilon, mu_p, s_p, mu_q, s_q), _hockey_stick(epsilon, mu_q, s_q, mu_p, s_p))

    return GaussianEstimate(
        epsilon=_invert_nonincreasing(delta_of, delta),
        delta=delta,
        mu_observed=mu_p,
        std_observed=s_p,
        mu_unobserved=mu_q,
        std_unobserved=s_q,
    )


def _fit_gaussian(values: Sequence[float] | np.ndarray, name: str) -> tuple[float, float]:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or len(array) < 2:
        raise ValueError(f"{name} must be a 1-D sequence of at least 2 values, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains non-finite values")
    std = float(np.std(array, ddof=1))
    if std == 0:
        raise ValueError(f"{name} has zero standard deviation: a Gaussian cannot be fitted")
    return float(np.mean(array)), std


def _invert_nonincreasing(delta_of: Callable[[float], float], delta: float) -> float:
    """The smallest epsilon >= 0 with ``delta_of(epsilon) <= delta`` (bisection; the upper end of the bracket), or
    infinity where it exceeds ``ESTIMATE_EPSILON_CEILING``."""
    if delta_of(0.0) <= delta:
        return 0.0
    low, high = 0.0, 1.0
    while delta_of(high) > delta:
        if high >= ESTIMATE_EPSILON_CEILING:  # the two fits barely overlap: no finite estimate worth reporting
            return math.inf
        low, high = high, 2.0 * high
    while high - low > ESTIMATE_TOLERANCE:
        middle = 0.5 * (low + high)
        if delta_of(middle) > delta:
            low = middle
        else:
            high = middle
    return high


def _hockey_stick(epsilon: float, mu_p: float, s_p: float, mu_q: float, s_q: float) -> float:
    """``integral max(0, p(x) - e^epsilon q(x)) dx`` for ``p = N(mu_p, s_p^2)``, ``q = N(mu_q, s_q^2)``: the
    masses ``P(R) - e^epsilon Q(R)`` of the region ``R = {x: log p(x) - log q(x) > epsilon}``."""
    region = _privacy_loss_region(epsilon, mu_p, s_p, mu_q, s_q)
    value = sum(_mass(lo, hi, mu_p, s_p) - math.exp(epsilon) * _mass(lo, hi, mu_q, s_q) for lo, hi in region)
    return max(value, 0.0)


def _privacy_loss_region(
    epsilon: float, mu_p: float, s_p: float, mu_q: float, s_q: float
) -> list[tuple[float, float]]:
    """The intervals where ``log p(x) - log q(x) - epsilon = a x^2 + b x + c > 0``, with
    ``a = 1/(2 s_q^2) - 1/(2 s_p^2)``, ``b = mu_p/s_p^2 - mu_q/s_q^2`` and
    ``c = mu_q^2/(2 s_q^2) - mu_p^2/(2 s_p^2) + log(s_q/s_p) - epsilon``. Roots by the cancellation-free form
    ``t = -(b + sign(b) sqrt(b^2 - 4ac)) / 2``, roots ``t/a`` and ``c/t``, so nearly equal variances (tiny ``a``)
    lose no accuracy."""
    a = 0.5 / s_q**2 - 0.5 / s_p**2
    b = mu_p / s_p**2 - mu_q / s_q**2
    c = 0.5 * mu_q**2 / s_q**2 - 0.5 * mu_p**2 / s_p**2 + math.log(s_q / s_p) - epsilon
    if a == 0:
        return _linear_region(b, c)
    discriminant = b * b - 4 * a * c
    if discriminant <= 0:  # a x^2 + b x + c has the sign of a (zero at one point at most)
        return [(-math.inf, math.inf)] if a > 0 else []
    t = -0.5 * (b + math.copysign(math.sqrt(discriminant), b))
    low, high = sorted((t / a, c / t))
    return [(-math.inf, low), (high, math.inf)] if a > 0 else [(low, high)]


def _linear_region(b: float, c: float) -> list[tuple[float, float]]:
    """The interval where ``b x + c > 0`` (equal variances)."""
    if b > 0:
        return [(-c / b, math.inf)]
    if b < 0:
        return [(-math.inf, -c / b)]
    return [(-math.inf, math.inf)] if c > 0 else []


def _mass(low: float, high: float, mu: float, s: float) -> float:
    """``P[low < N(mu, s^2) < high]``, from the upper tail when the interval lies above the mean (no
    cancellation of two numbers close to 1)."""
    z_low, z_high = (low - mu) / s, (high - mu) / s
    if z_low >= 0:
        return float(ndtr(-z_low) - ndtr(-z_high))
    return float(ndtr(z_high) - ndtr(z_low))


# --- validation --------------------------------------------------------------------------------------------


def _check_canaries(m: int) -> None:
    if m < 2:
        raise ValueError(f"an audit needs at least 2 canaries, got m = {m}")


def _check_counts(m: int, r: int, v: int) -> None:
    _check_canaries(m)
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= correct (v) <= guesses (r) <= canaries (m), got v = {v}, r = {r}, m = {m}")


def _check_delta(delta: float) -> None:
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _check_canary_arrays(scores, included) -> tuple[np.ndarray, np.ndarray]:
    scores_array = np.asarray(scores, dtype=np.float64)
    included_array = np.asarray(included)
    if scores_array.ndim != 1 or included_array.ndim != 1:
        raise ValueError("scores and included must be 1-D, one entry per canary")
    if len(scores_array) != len(included_array):
        raise ValueError(f"scores has {len(scores_array)} entries but included has {len(included_array)}")
    _check_canaries(len(scores_array))
    if not np.all(np.isfinite(scores_array)):
        raise ValueError("scores contains non-finite values (nan or inf)")
    if included_array.dtype != np.bool_:
        if not np.all(np.isin(included_array, (0, 1))):
            raise ValueError("included must be boolean (or 0/1): whether each canary was inserted")
        included_array = included_array.astype(bool)
    return scores_array, included_array


def _check_guess_counts(guess_counts: Sequence[int], m: int) -> tuple[int, ...]:
    if any(isinstance(k, bool) or int(k) != k for k in guess_counts):
        raise ValueError(f"guess counts must be integers, got {list(guess_counts)}")
    counts = tuple(int(k) for k in guess_counts)
    if not counts:
        raise ValueError("guess_counts is empty")
    if len(set(counts)) != len(counts):
        raise ValueError(f"guess_counts has repeated values: {counts}")
    if not all(1 <= k <= m for k in counts):
        raise ValueError(f"each guess count must be in [1, m = {m}], got {counts}")
    return counts
