"""Privacy events: what a mechanism did to a silo's records, described as data.

In the spirit of Google's dp_accounting (``PoissonSampledDpEvent(GaussianDpEvent)``), a mechanism reports
events and a separate accountant (``mechanisms.accounting``) turns them into epsilon.
"""
from __future__ import annotations

from dataclasses import dataclass


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


PrivacyEvent = PoissonGaussianEvent
