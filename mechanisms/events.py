"""Privacy events: what a mechanism did to a silo's records, described as data.

In the spirit of Google's dp_accounting (``PoissonSampledDpEvent(GaussianDpEvent)``), a mechanism reports
events and a separate accountant (``mechanisms.accounting``) turns them into epsilon.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PoissonGaussianEvent:
    """``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

    Each step includes every record independently with probability ``sampling_rate``, clips per-record
    gradients to L2 norm C and adds N(0, (noise_multiplier * C)^2) noise (Abadi et al. 2016; neighbouring
    relation: add/remove one record; sensitivity C).
    """

    sampling_rate: float
    noise_multiplier: float
    steps: int



@dataclass(frozen=True, eq=False)
class PersonalizedPoissonGaussianEvent:
    """One round of rPDP-FL local training in one silo (Liu et al., CCS 2024, Algorithm 1).

    ``steps`` compositions of the sampled Gaussian mechanism in which record ``j`` is included with its own
    probability ``rates[j]`` (0 = excluded this round). ``planned_rates`` and ``budgets`` are the records' rates
    and budgets fixed before training; ``rounds`` (T) and ``client_rate`` (lambda) the training plan, so an
    accountant can state both the realised cost and the third-party guarantee of Theorem 1.
    """

    noise_multiplier: float
    steps: int
    rates: np.ndarray
    planned_rates: np.ndarray
    budgets: np.ndarray
    rounds: int
    client_rate: float


PrivacyEvent = PoissonGaussianEvent | PersonalizedPoissonGaussianEvent
