"""YAML parameters of the ``dprivacy`` mechanism (validated; no torch here)."""
from __future__ import annotations

import enum
from typing import Any

from pydantic import Field, field_validator, model_validator

from privsilo.mechanisms.base import FederationShape, MechanismParams


class Calibration(str, enum.Enum):
    """How a client sets the Laplace parameter eps of its upload (n = number of model parameters)."""

    CLIPPED = "clipped"  # delta clipped to the public radius R, eps = n / (nu R): a guarantee of eps * d(x, x')
    PAPER = "paper"  # eps = n / (nu ||delta||) (Galli et al., Algorithm 2): the noise scale reveals ||delta||


class DPrivacyParams(MechanismParams):
    """``mechanism: {name: dprivacy, hypotheses: k, nu, calibration, radius, local_epochs}``; see the d-privacy page of the documentation."""

    hypotheses: int = Field(default=1, ge=1)
    """Number k of model hypotheses (1 to `data.silos`), each from its own seeded initialisation."""
    nu: float = Field(default=5.0, allow_inf_nan=False)
    """Noise multiplier nu > 0, or exactly 0 for the no-noise baseline."""
    calibration: Calibration = Calibration.CLIPPED
    """`clipped` (update clipped to the public `radius` R, eps = n / (nu R): a guarantee) or `paper` (eps = n / (nu ||delta||), the paper's, which leaks ||delta||; no `radius`)."""
    radius: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    """`clipped` (required there): public clip radius R of the update theta_c - theta_j."""
    local_epochs: int | None = Field(default=None, ge=1)
    """E local epochs per round (shuffled passes in batches of `federation.batch_size`) instead of `federation.local_steps` steps; with an `attack` block only on silos of one batch (`data.max_records_per_silo` = `federation.batch_size`)."""

    @field_validator("calibration", mode="before")
    @classmethod
    def _calibration_from_yaml(cls, value: Any) -> Any:
        """YAML gives a string; strict mode would otherwise accept only the Enum itself."""
        if isinstance(value, str) and value in {c.value for c in Calibration}:
            return Calibration(value)
        if isinstance(value, str):
            raise ValueError(f"must be one of {', '.join(c.value for c in Calibration)}")
        return value

    @field_validator("nu")
    @classmethod
    def _check_nu(cls, value: float) -> float:
        if value < 0:
            raise ValueError("must be > 0 (the noise multiplier nu), or exactly 0 for the no-noise baseline")
        return value

    @model_validator(mode="after")
    def _radius_fits_calibration(self) -> "DPrivacyParams":
        if self.calibration is Calibration.CLIPPED and self.radius is None:
            raise ValueError(
                "radius: calibration 'clipped' needs a public clip radius R > 0 for the update theta_c - theta_j "
                "(or calibration 'paper', which leaks ||delta||)"
            )
        if self.calibration is Calibration.PAPER and self.radius is not None:
            raise ValueError("radius: calibration 'paper' scales the noise by ||delta|| and uses no radius; remove it")
        return self

    def update_clip_norm(self) -> float | None:
        return self.radius

    def check_federation(self, federation: FederationShape) -> None:
        if self.hypotheses > federation.num_silos:
            raise ValueError(f"hypotheses: must not exceed the number of clients data.silos = {federation.num_silos}")
