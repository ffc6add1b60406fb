"""Record-level personalised DP for cross-silo FL (rPDP-FL, Liu et al., CCS 2024): accountant, sampling
probability estimator and privacy-budget distributions. Pure numpy/scipy; randomness only from a passed
``numpy.random.Generator``."""
from privsilo.mechanisms.rpdp.accountant import (
    Adversary,
    Conversion,
    epsilon,
    epsilon_from_rdp,
    rdp_curve,
    step_rdp,
)
from privsilo.mechanisms.rpdp.estimator import SamplingProbabilityEstimator

__all__ = [
    "Adversary",
    "Conversion",
    "SamplingProbabilityEstimator",
    "epsilon",
    "epsilon_from_rdp",
    "rdp_curve",
    "step_rdp",
]
