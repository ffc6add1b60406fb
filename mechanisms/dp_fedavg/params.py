"""YAML parameters of the ``dp_fedavg`` mechanism (validated; no torch here)."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from mechanisms.base import MechanismParams, pld_needs_its_smallest_delta


class DpFedAvgParams(MechanismParams):
    """``mechanism: {name: dp_fedavg, ...}``; see the DP-FedAvg page of the documentation."""

    noise_multiplier: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    """Client-level noise multiplier z: the noise on the sum of the clipped updates is N(0, (z C)^2) per coordinate (0 gives no guarantee)."""
    clip_norm: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    """C, the L2 bound of a silo's model update (the sensitivity of the sum to one silo)."""
    delta: float = Field(default=1e-5, gt=0.0, lt=1.0)
    """Delta of the reported client-level (epsilon, delta)."""
    noise: Literal["central"] = "central"
    """`central`: the server adds the noise to the sum of the clipped updates (a trusted server)."""
    clipping: Literal["fixed", "adaptive"] = "fixed"
    """`fixed`: every round clips to `clip_norm`; `adaptive`: the clip norm starts at `clip_norm` and follows a privately estimated quantile of the update norms (Andrew et al., NeurIPS 2021)."""
    target_quantile: float = Field(default=0.5, gt=0.0, lt=1.0)
    """`adaptive`: gamma, the fraction of the sampled silos' updates the clip norm should leave unclipped."""
    clip_learning_rate: float = Field(default=0.2, gt=0.0, allow_inf_nan=False)
    """`adaptive`: eta_C of the geometric update C <- C exp(-eta_C (b - gamma)), b the noisy fraction of unclipped updates."""
    clipped_count_stddev: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    """`adaptive` (required there): sigma_b, the noise on the count of unclipped updates (Andrew et al. suggest the expected silos per round / 20); it must exceed noise_multiplier / 2, as the update's noise multiplier becomes (z^-2 - (2 sigma_b)^-2)^(-1/2)."""
    accountant: Literal["rdp", "pld"] = "rdp"
    """`rdp` (Renyi DP) or `pld` (privacy loss distributions via Google's dp_accounting: a tighter upper bound, reported as `epsilon` beside the RDP figure, `epsilon_rdp` and `epsilon_pld`)."""

    _pld_needs_its_smallest_delta = field_validator("accountant")(pld_needs_its_smallest_delta)

    @model_validator(mode="after")
    def _count_noise_fits(self) -> "DpFedAvgParams":
        if self.clipping == "adaptive":
            if self.clipped_count_stddev is None:
                raise ValueError("clipped_count_stddev: clipping 'adaptive' needs the noise sigma_b of the clipped count "
                                 "(Andrew et al. suggest the expected number of silos per round / 20)")
            if self.noise_multiplier > 0 and 2 * self.clipped_count_stddev <= self.noise_multiplier:
                raise ValueError(
                    "clipped_count_stddev: leaves no noise for the update: it must exceed "
                    f"noise_multiplier / 2 = {self.noise_multiplier / 2:g} (z_delta = (z^-2 - (2 sigma_b)^-2)^(-1/2))")
        return self

    def inert_settings(self) -> dict[str, str]:
        if self.clipping == "adaptive":
            return {}
        why = f"it sets adaptive clipping; clipping is '{self.clipping}'"
        return {"target_quantile": why, "clip_learning_rate": why, "clipped_count_stddev": why}

    def update_noise_multiplier(self) -> float:
        """z_delta, the update's own noise multiplier: z itself with fixed clipping; with adaptive clipping
        (z^-2 - (2 sigma_b)^-2)^(-1/2), so that the update (sensitivity C, noise z_delta C) and the centred clipped
        count (sensitivity 1/2, noise sigma_b) together are one Gaussian mechanism of multiplier z (Andrew et al.
        2021, Sec. 3.1)."""
        if self.clipping == "fixed" or self.noise_multiplier == 0.0:
            return self.noise_multiplier
        return 1.0 / math.sqrt(self.noise_multiplier**-2 - (2.0 * self.clipped_count_stddev) ** -2)
