"""Privacy loss distribution (PLD) accounting of Poisson-subsampled Gaussian compositions, via Google's
dp_accounting (the accountant ``mechanism.accountant: pld`` selects for ``dp_sgd`` and ``uldp``).

A mechanism's privacy loss distribution is the law of its privacy loss ``log(P(o) / Q(o))`` for ``o ~ P``; the
composition of mechanisms adds independent losses, so its PLD is the convolution of theirs, and the tight
``delta(epsilon)`` is the hockey-stick divergence read off that distribution (Koskela, Jaelkoe and Honkela,
"Computing tight differential privacy guarantees using FFT", AISTATS 2020; Koskela et al., "Tight differential
privacy for discrete-valued mechanisms and for the subsampled Gaussian mechanism using FFT", AISTATS 2021).
dp_accounting discretises the loss on a grid of width [`VALUE_DISCRETIZATION_INTERVAL`][privsilo.mechanisms.pld.VALUE_DISCRETIZATION_INTERVAL] with the "connect the
dots" construction (Doroshenko, Ghazi, Kamath, Kumar and Manurangsi, "Connect the dots: tighter discrete
approximations of privacy loss distributions", PETS 2022) and composes by FFT.

The figure is an **upper bound** by construction (numerically, see below): ``pessimistic_estimate=True`` (dp_accounting's default, passed explicitly
here) rounds every loss up to the grid, and the mass it truncates from the distribution's tails (below
``exp(-50)`` when it is built, ``1e-15`` when it is self-composed) is counted as infinite loss, that is added to
delta. Unlike RDP's conversion (Balle et al. 2020, Thm. 21) it loses nothing beyond that discretisation, so it
is the smaller of the two; ``tests/unit/mechanisms/test_pld_accounting.py`` checks that on a grid of settings and compares it
with Opacus' PRV accountant (Gopi, Lee and Wutschitz, NeurIPS 2021), an independent numerical accountant.

**Exact where it is known, and never below it.** With rate ``q = 1`` in every entry the composition is one
Gaussian mechanism: ``k`` steps of noise multiplier ``sigma`` are ``mu``-Gaussian DP with ``mu = sqrt(k) / sigma``
(Dong, Roth and Su, "Gaussian differential privacy", JRSS B 2022, Cor. 3.3), and its exact
``delta(eps) = Phi(-eps / mu + mu / 2) - e^eps Phi(-eps / mu - mu / 2)`` (Balle and Wang, ICML 2018, Thm. 8) is
inverted by `gaussian_epsilon` (no grid). The grid, pessimistic by construction, is not so numerically at
small delta: 10,000 steps at sigma 8 read 156.824 at delta 1e-10 where the exact figure is 156.834, and 164.63 at
1e-12 where it is 165.26 (the composition's numerical error, of the order of 1e-13 in delta, is no longer small
against delta). For ``q < 1`` the grid stays, five times finer below
`SMALL_DELTA`, and its epsilon is read at `DELTA_SAFETY` times delta, a margin against such errors.
Below `SMALLEST_DELTA` that margin no longer holds (float64 FFT composition moved 1,000 steps at q 0.1, sigma
0.8 to 60.420 at delta 1e-12, where the true figure is at least 60.4396), so a subsampled schedule is refused
there (`check_pld_delta`; RDP is the alternative). At and above it this is checked, not proved:
``tests/unit/mechanisms/test_pld_accounting.py`` compares it at delta 1e-8 and 1e-10 with dp_accounting's pessimistic estimate on
a grid of 1e-5, and the grid itself with the exact q = 1 values.

The neighbouring relation is add/remove one unit (a record for ``dp_sgd``, a user for ``uldp``): dp_accounting
keeps both directions' distributions and reports the worse. One step's PLD is built once per ``(q, sigma)``
(0.01 to 0.7 s, the most at low noise); a schedule then costs one self-composition by FFT and one search for
epsilon (10 ms at sigma = 5 to 0.3 s at q = 0.11, sigma = 1, 200 steps), and its epsilon is cached, so silos
with the same schedule, and a report read twice, cost one evaluation.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr

VALUE_DISCRETIZATION_INTERVAL = 1e-4
"""Width of the privacy-loss grid (dp_accounting's default) for delta >= `SMALL_DELTA`. Coarser grids are faster and still upper bounds
(pessimistic) but looser where epsilon is small: 3e-4 is three times faster and at most 0.17% above, 1e-3 ten
times faster and up to 2% above (q = 0.01, sigma = 5, 100 steps: 0.0613 at 1e-4, 0.0625 at 1e-3)."""

SMALL_DELTA = 1e-7
"""Below this delta the grid is `FINE_VALUE_DISCRETIZATION_INTERVAL` wide: on the 1e-4 grid, 10,000 steps at
sigma 8 read 164.63 at delta 1e-12 where the exact q = 1 figure is 165.26 (and q = 0.5 read 62.89 where a 2e-5 grid
reads 63.24); at 1e-7 and above the 1e-4 grid was above the exact figure in every case tried."""

FINE_VALUE_DISCRETIZATION_INTERVAL = 2e-5
"""The grid below `SMALL_DELTA`: above the exact q = 1 figure at 1e-8 to 1e-12 (165.36 against 165.26 in the
case above), five times slower to build."""

DELTA_SAFETY = 0.99
"""The grid's epsilon is read at this fraction of the target delta (a 1 % margin in delta): a PLD's rounding errors
in delta are about 1e-13 absolute (after 10,000 self-compositions), far below 1 % of any delta >= 1e-10; the cost is
a larger epsilon by ``0.01 / (d delta / d epsilon)``, below 0.1 % of the figure at delta 1e-5."""

SMALLEST_DELTA = 1e-10
"""The smallest delta at which a subsampled schedule's PLD epsilon is given: below it float64 FFT composition errs by
more than the `DELTA_SAFETY` margin (at 1e-12, 1,000 steps: -0.02 to -0.17 in epsilon against rigorous and
long-double references), and `pld_epsilon` refuses rather than print an epsilon below the truth."""

GAUSSIAN_EPSILON_TOLERANCE = 1e-12
"""Relative tolerance of `gaussian_epsilon`'s root (the bracket's upper end is returned)."""

Schedule = tuple[tuple[float, float, int], ...]
"""``(sampling rate q, noise multiplier sigma, steps)`` entries composed one after another."""


@lru_cache(maxsize=64)
def _one_step(sampling_rate: float, noise_multiplier: float, interval: float = VALUE_DISCRETIZATION_INTERVAL) -> Any:
    """PLD of one Poisson-subsampled Gaussian step (sensitivity 1, noise ``sigma``, rate ``q``): the
    distribution ``dp_accounting.pld.PLDAccountant`` builds for ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``."""
    from dp_accounting import NeighboringRelation
    from dp_accounting.pld import privacy_loss_distribution

    return privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=noise_multiplier,
        sampling_prob=sampling_rate,
        value_discretization_interval=interval,
        pessimistic_estimate=True,
        use_connect_dots=True,
        neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
    )


@lru_cache(maxsize=1024)
def pld_epsilon(schedule: Schedule, delta: float) -> float:
    """Smallest epsilon whose delta, read off the composed PLD of ``schedule``, is at most ``delta``.

    Each entry is ``steps`` self-compositions of one step's PLD; entries compose by convolution, and the epsilon is
    read at ``DELTA_SAFETY * delta`` (on the fine grid below ``SMALL_DELTA``). Where every entry has rate 1 it is the exact Gaussian composition instead
    (`gaussian_epsilon`), at any delta. Entries with no step or rate 0 release nothing; any entry with sigma = 0 and a step
    gives inf (no guarantee). A subsampled schedule below `SMALLEST_DELTA` raises ValueError (`check_pld_delta`).
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    active = active_entries(schedule)
    if any(sigma == 0.0 for _, sigma, _ in active):
        return math.inf
    if active and all(rate == 1.0 for rate, _, _ in active):  # one Gaussian mechanism: exact, no grid
        return gaussian_epsilon(gaussian_mu(active), delta)
    check_pld_delta(delta)
    interval = VALUE_DISCRETIZATION_INTERVAL if delta >= SMALL_DELTA else FINE_VALUE_DISCRETIZATION_INTERVAL
    if not active:
        return 0.0
    return float(composed_pld(active, interval).get_epsilon_for_delta(DELTA_SAFETY * delta))


def active_entries(schedule: Schedule) -> Schedule:
    """The entries of ``schedule`` that release something (a step at a rate above 0), as floats and ints."""
    return tuple((float(rate), float(sigma), int(steps)) for rate, sigma, steps in schedule if steps and rate)


def gaussian_mu(schedule: Schedule) -> float:
    """``mu = sqrt(sum steps / sigma^2)`` of entries at rate 1: one Gaussian mechanism (Dong, Roth and Su, Cor. 3.3)."""
    return math.sqrt(sum(steps / sigma**2 for _, sigma, steps in schedule))


def composed_pld(active: Schedule, interval: float = VALUE_DISCRETIZATION_INTERVAL) -> Any:
    """The PLD of the (non-empty, noisy) ``active`` entries composed: each one step's PLD self-composed ``steps``
    times, the entries convolved."""
    composed = None
    for rate, sigma, steps in active:
        entry = _one_step(rate, sigma, interval).self_compose(steps)
        composed = entry if composed is None else composed.compose(entry)
    return composed


def check_pld_delta(delta: float) -> None:
    """Raise ValueError, one line naming RDP, where ``delta`` is below `SMALLEST_DELTA` (the scenario's
    ``mechanism.delta`` with ``accountant: pld`` is refused by the same test)."""
    if delta < SMALLEST_DELTA:
        raise ValueError(f"the PLD accountant is not given at delta {delta:g}, below {SMALLEST_DELTA:g} (float64 "
                         f"composition errs by more than its margin there); allowed: rdp, or pld with delta >= {SMALLEST_DELTA:g}")


def gaussian_delta(epsilon: Any, mu: float) -> Any:
    """The exact ``delta(epsilon)`` of the ``mu``-Gaussian mechanism (Balle and Wang 2018, Thm. 8),
    ``Phi(a) - e^eps Phi(b)`` with ``a = -eps / mu + mu / 2``, ``b = a - mu``, written
    ``Phi(a) (1 - exp(eps + log Phi(b) - log Phi(a)))`` so that neither term under- or overflows; ``epsilon`` a
    number (a float is returned) or a NumPy array (elementwise)."""
    a = -np.asarray(epsilon, dtype=np.float64) / mu + mu / 2.0
    log_phi_a = log_ndtr(a)
    delta = np.exp(log_phi_a) * -np.expm1(epsilon + log_ndtr(a - mu) - log_phi_a)
    return float(delta) if np.ndim(delta) == 0 else delta


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon >= 0 with ``gaussian_delta(epsilon, mu) <= delta``: Brent's root of the decreasing
    ``delta(epsilon)``, returned at the bracket's upper end (never below the root)."""
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    high = max(1.0, mu * mu)
    while gaussian_delta(high, mu) > delta:
        high *= 2.0
    root = brentq(lambda eps: math.log(max(gaussian_delta(eps, mu), 1e-300)) - math.log(delta), 0.0, high,
                  xtol=GAUSSIAN_EPSILON_TOLERANCE, rtol=GAUSSIAN_EPSILON_TOLERANCE)
    while gaussian_delta(root, mu) > delta:  # the root's last bit on the unsafe side: step up
        root = math.nextafter(root, math.inf) + GAUSSIAN_EPSILON_TOLERANCE * root
    return root
