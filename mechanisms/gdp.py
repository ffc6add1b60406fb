"""A mechanism's own Gaussian-DP parameter mu*, the figure an f-DP audit's lower bound on mu is set against.

Dong, Roth and Su ("Gaussian differential privacy", JRSS B 2022) call a mechanism mu-GDP when its trade-off curve
lies above ``G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu)``; by their Cor. 2.13 (the primal-dual view) that holds
exactly when it is ``(eps, delta_mu(eps))``-DP for every eps, with ``delta_mu`` the Gaussian mechanism's profile
([`gaussian_delta`][privsilo.mechanisms.pld.gaussian_delta]). A mechanism that meets an (eps, delta) claim need not be
mu-GDP for the mu whose ``delta_mu`` passes through that point: its mu* can be larger, so an audit that rejects
"mu-GDP" for a mu between the two refutes nothing.

* Rate 1 (no subsampling): ``k`` Gaussian steps are exactly mu-GDP with ``mu = sqrt(sum k / sigma^2)``.
* Poisson-subsampled Gaussian schedules (`schedule_mu`): read off the pessimistic PLD of
  [`privsilo.mechanisms.pld`][privsilo.mechanisms.pld], an **upper estimate**. Such a composition is GDP for no mu below about
  ``sqrt(steps) / sigma`` in the far tail (every step sampling the unit, with probability ``q^steps``), so mu* is
  taken up to `GDP_DELTA_SLACK`: the smallest mu with ``delta(eps) <= delta_mu(eps) + GDP_DELTA_SLACK`` for
  every eps >= 0 and both neighbouring directions, i.e. a trade-off curve above ``G_mu - GDP_DELTA_SLACK``.
  The eps axis is cut into `GDP_EPSILON_POINTS` intervals ``[e_i, e_i+1]`` up to the eps where the PLD's delta
  falls to the slack; on each, the PLD's delta at ``e_i`` (the interval's largest) must lie below ``delta_mu`` at
  ``e_i+1`` (its smallest) plus the slack, so the mu found is at or above the exact one for this PLD.
* Pure eps-DP (`pure_dp_mu`): its worst case is randomized response, whose curve touches ``G_mu`` at the
  symmetric point for ``mu = 2 Phi^-1(e^eps / (1 + e^eps))``.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Iterable

import numpy as np
from scipy.special import log_expit, ndtri_exp

from privsilo.mechanisms.pld import SMALLEST_DELTA, Schedule, active_entries, composed_pld, gaussian_delta, gaussian_mu

GDP_DELTA_SLACK = SMALLEST_DELTA
"""The delta below which `schedule_mu` ignores the PLD's profile (the PLD's own trusted range). An f-DP
audit's recursion reads the trade-off curve at type-I errors of at least (1 - confidence) / (guess counts x
canaries), where the Gaussian curves' deltas are some 1e-3, far above it."""

GDP_EPSILON_POINTS = 4000
"""Intervals of the eps axis in `schedule_mu` (each adds its width's worth of slack to the upper estimate)."""

MU_TOLERANCE = 1e-6
"""Bisection tolerance of `schedule_mu` (the bracket's upper end is returned)."""


@lru_cache(maxsize=256)
def schedule_mu(schedule: Schedule) -> float:
    """mu* of ``(q, sigma, steps)`` entries composed (see the module docstring): exact at rate 1, else an upper
    estimate from the pessimistic PLD, up to `GDP_DELTA_SLACK`; 0 for nothing released, inf without noise."""
    active = active_entries(schedule)
    if any(sigma == 0.0 for _, sigma, _ in active):
        return math.inf
    if not active:
        return 0.0
    if all(rate == 1.0 for rate, _, _ in active):
        return gaussian_mu(active)
    pld = composed_pld(active)
    grid = np.linspace(0.0, pld.get_epsilon_for_delta(GDP_DELTA_SLACK), GDP_EPSILON_POINTS + 1)
    deltas = np.asarray(pld.get_delta_for_epsilon(grid), dtype=np.float64)[:-1] - GDP_DELTA_SLACK

    def dominates(mu: float) -> bool:
        return bool(np.all(gaussian_delta(grid[1:], mu) >= deltas))

    low, high = 0.0, 1.0
    while not dominates(high):
        low, high = high, 2.0 * high
    while high - low > MU_TOLERANCE:
        middle = 0.5 * (low + high)
        low, high = (low, middle) if dominates(middle) else (middle, high)
    return high


UPPER_ESTIMATE = f"an upper estimate from the pessimistic PLD, up to delta {GDP_DELTA_SLACK:g}"
"""How `schedule_mu` reads below rate 1, for a mechanism's ``gdp_mu_star_basis``."""


def merged_schedule(events: Iterable[Any]) -> Schedule:
    """``(rate, sigma, steps)`` entries of events with ``sampling_rate``, ``noise_multiplier`` and ``steps``,
    consecutive events of one setting merged (the composition is the same)."""
    schedule: list[tuple[float, float, int]] = []
    for event in events:
        setting = (float(event.sampling_rate), float(event.noise_multiplier))
        if schedule and schedule[-1][:2] == setting:
            schedule[-1] = (*setting, schedule[-1][2] + int(event.steps))
        else:
            schedule.append((*setting, int(event.steps)))
    return tuple(schedule)


def pure_dp_mu(epsilon: float) -> float:
    """mu* of a pure ``epsilon``-DP mechanism, ``2 Phi^-1(e^eps / (1 + e^eps))``, computed as
    ``-2 Phi^-1(1 / (1 + e^eps))`` from the log of that tail (finite for any finite epsilon)."""
    if not epsilon >= 0.0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if math.isinf(epsilon):
        return math.inf
    return max(0.0, -2.0 * float(ndtri_exp(log_expit(-epsilon))))
