"""YAML parameters of the ``dp_fedavg`` mechanism (validated; no torch here)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from mechanisms.base import MechanismParams


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
    clipping: Literal["fixed"] = "fixed"
    """`fixed`: every round clips to `clip_norm`."""
    accountant: Literal["rdp", "pld"] = "rdp"
    """`rdp` (Renyi DP) or `pld` (privacy loss distributions via Google's dp_accounting: a tighter upper bound, reported as `epsilon` beside the RDP figure, `epsilon_rdp` and `epsilon_pld`)."""
