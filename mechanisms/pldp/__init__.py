"""PLDP-FL: personalized local DP with PDPM (Shen et al., Entropy 2023), with an honest account of what it
guarantees. Pure numpy; importing the package loads neither torch nor Ray (``privsilo validate`` relies on it)."""
from __future__ import annotations

from privsilo.mechanisms.pldp.sampler import (
    averaged_noise_std,
    paper_variance_bound,
    pdpm,
    pdpm_max_variance,
    pdpm_outputs,
    pdpm_probabilities,
    pdpm_variance,
)
from privsilo.mechanisms.pldp.settings import PAPER_BUDGETS, PAPER_RANGES
from privsilo.mechanisms.pldp.upload import ClientPerturbation

__all__ = [
    "PAPER_BUDGETS",
    "PAPER_RANGES",
    "ClientPerturbation",
    "averaged_noise_std",
    "paper_variance_bound",
    "pdpm",
    "pdpm_max_variance",
    "pdpm_outputs",
    "pdpm_probabilities",
    "pdpm_variance",
]
