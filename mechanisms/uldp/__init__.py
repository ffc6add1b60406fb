"""ULDP-FL: user-level DP across silos (Kato et al., VLDB 2024): variants NAIVE, GROUP-k, AVG, AVG-w and SGD,
user-level sub-sampling, and their user-level accountant. This package imports no torch itself; the silo-side
training lives in :mod:`mechanisms.uldp.training` and is imported only by the silos."""
from mechanisms.uldp.accountant import GroupRounding, UldpAccountant, Variant, epsilon, group_epsilon, group_exponent

__all__ = ["GroupRounding", "UldpAccountant", "Variant", "epsilon", "group_epsilon", "group_exponent"]
