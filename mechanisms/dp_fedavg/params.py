"""YAML parameters of the ``dp_fedavg`` mechanism (validated; no torch here)."""
from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from privsilo.mechanisms.base import FederationShape, MechanismParams, pld_needs_its_smallest_delta
from privsilo.mechanisms.dp_fedavg.distributed import MIN_SIGMA, DistributedSetting

RATE_BITS = 20  # q travels as a multiple of 2^-20: any number of copies sums exactly, so sum / count is q exactly


def public_rate(rate: float) -> float:
    """The client rate as every silo uploads it, ``round(q 2^20) 2^-20``: its sum over any set of uploads is exact
    (also through secure aggregation's fixed point), so the divisor the server reads never depends on how many
    silos took part, not even in its last bit."""
    return round(rate * 2**RATE_BITS) / 2**RATE_BITS


class DpFedAvgParams(MechanismParams):
    """``mechanism: {name: dp_fedavg, ...}``; see the DP-FedAvg page of the documentation."""

    noise_multiplier: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    """Client-level noise multiplier z: the noise on the sum of the clipped updates is N(0, (z C)^2) per coordinate (0 gives no guarantee)."""
    clip_norm: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    """C, the L2 bound of a silo's model update (the sensitivity of the sum to one silo)."""
    delta: float = Field(default=1e-5, gt=0.0, lt=1.0)
    """Delta of the reported client-level (epsilon, delta)."""
    noise: Literal["central", "distributed"] = "central"
    """`central`: the server adds the noise to the sum of the clipped updates (a trusted server); `distributed`: each silo rounds its rotated update to integers and adds its share of discrete Gaussian noise, and secure aggregation sums them (Kairouz, Liu, Steinke 2021: needs protocol.secure_aggregation and client_rate 1)."""
    rounding_beta: float = Field(default=math.exp(-0.5), ge=0.0, lt=1.0)
    """`distributed`: beta of conditional randomized rounding (Kairouz et al.'s Theorem 1): a rounded update is redrawn until its norm is within the bound that holds with probability 1 - beta (0: the bound C/gamma + sqrt(d) that always holds)."""
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
        if self.noise == "distributed" and self.clipping == "adaptive":
            raise ValueError("clipping: adaptive clipping is implemented for noise 'central' only; use 'fixed' with distributed noise")
        if self.noise == "distributed" and self.accountant == "pld":
            raise ValueError("accountant: distributed noise is accounted by RDP (Kairouz et al., Proposition 14); use 'rdp'")
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
        inert = {} if self.noise == "distributed" else {"rounding_beta": "it sets distributed noise; noise is 'central'"}
        if self.clipping != "adaptive":
            why = f"it sets adaptive clipping; clipping is '{self.clipping}'"
            inert.update(target_quantile=why, clip_learning_rate=why, clipped_count_stddev=why)
        return inert

    def audit_refusal(self, *, client_rate: float) -> tuple[str, Any, str] | None:
        if self.noise == "distributed":
            return ("mechanism.noise", "distributed", "client canaries are implemented for noise 'central' only; "
                    "audit that (the claim of distributed noise is the same Gaussian's, for the sum)")
        if client_rate < 1.0:
            return ("federation.client_rate", client_rate, "a dp_fedavg audit's canary clients "
                    "ride with their host silo, not sampled on their own as the claim's amplification assumes: set it to 1.0")
        return None

    def needs_secure_aggregation(self) -> bool:
        """Distributed noise: each silo adds a share, which protects only the sum of the uploads."""
        return self.noise == "distributed"

    def check_federation(self, federation: FederationShape) -> None:
        """Distributed noise: no client sampling (no subsampled bound for the sum of discrete Gaussians is
        implemented), Proposition 14's sigma >= 1/2, and uploads within secure aggregation's range."""
        if self.noise != "distributed":
            self._check_public_rate(federation)
            return
        if federation.client_rate != 1.0:
            raise ValueError("federation.client_rate: distributed noise has no client-sampling amplification "
                             "implemented (set it to 1.0, or use noise: central)")
        setting = self.distributed_setting(federation.num_silos, federation.num_parameters)
        if setting.sigma < MIN_SIGMA:
            raise ValueError(f"noise_multiplier: each silo's discrete noise would be {setting.sigma:.3g} < 1/2 (in units of "
                             f"the granularity), below what Kairouz et al.'s Proposition 14 covers; raise it")
        if federation.upload_limit is not None and setting.upload_bound > federation.upload_limit:
            raise ValueError(f"protocol.fractional_bits: a silo's integers reach {setting.upload_bound:.4g}, beyond the "
                             f"{federation.upload_limit:.4g} secure aggregation carries at this precision; lower it")

    @staticmethod
    def _check_public_rate(federation: FederationShape) -> None:
        """Central noise divides by the q the silos upload: it must not round to 0 on its way (2^-20 steps, then
        secure aggregation's 2^-f)."""
        bits = federation.upload_fractional_bits
        rate = public_rate(federation.client_rate)
        if rate == 0.0 or (bits is not None and round(rate * 2**bits) == 0):
            smallest = 2.0 ** -min(20, 20 if bits is None else bits)
            raise ValueError(f"federation.client_rate: the q that silos upload for the server's divisor q N rounds to 0 "
                             f"(it travels in steps of {smallest:g}); allowed: client_rate >= {smallest:g}"
                             + ("" if bits is None else ", or raise protocol.fractional_bits"))

    def distributed_setting(self, num_silos: int, num_parameters: int) -> DistributedSetting:
        """Gamma, sigma, Delta_2 and the modulus bits of distributed noise for N silos and d parameters."""
        return DistributedSetting.choose(clip_norm=self.clip_norm, noise_multiplier=self.noise_multiplier,
                                         num_silos=num_silos, num_parameters=num_parameters, beta=self.rounding_beta)

    def update_noise_multiplier(self) -> float:
        """z_delta, the update's own noise multiplier: z itself with fixed clipping; with adaptive clipping
        (z^-2 - (2 sigma_b)^-2)^(-1/2), so that the update (sensitivity C, noise z_delta C) and the centred clipped
        count (sensitivity 1/2, noise sigma_b) together are one Gaussian mechanism of multiplier z (Andrew et al.
        2021, Sec. 3.1)."""
        if self.clipping == "fixed" or self.noise_multiplier == 0.0:
            return self.noise_multiplier
        return 1.0 / math.sqrt(self.noise_multiplier**-2 - (2.0 * self.clipped_count_stddev) ** -2)
