"""YAML parameters of the ``uldp`` mechanism (validated; no torch here)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from privsilo.mechanisms.base import MechanismParams, pld_needs_its_smallest_delta

AUDITED_VARIANTS = ("avg", "avg_w", "sgd")  # an audit's canary users are per-user clipped deltas


class UldpParams(MechanismParams):
    """``mechanism: {name: uldp, ...}``; see the ULDP-FL page of the documentation."""

    variant: Literal["naive", "group", "avg", "avg_w", "sgd"] = "avg_w"
    """`naive`, `group`, `avg`, `avg_w` or `sgd` (see ULDP-FL)."""
    noise_multiplier: float = Field(default=5.0, ge=0.0, allow_inf_nan=False)
    """User-level noise multiplier sigma."""
    max_grad_norm: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    """User-level clipping norm C."""
    delta: float = Field(default=1e-5, gt=0.0, lt=1.0)
    """Delta of the reported user-level (epsilon, delta)."""
    user_rate: float = Field(default=1.0, gt=0.0, le=1.0)
    """User-level Poisson sub-sampling rate q (must be 1 for `group`)."""
    global_lr: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    """Global learning rate eta_g."""
    group_k: int | str | None = None
    """`group` (required there): records kept per user across silos, a public integer >= 1; `max` or `median` of records per user reproduce the paper and are reported without an epsilon."""
    naive_noise: Literal["safe", "paper"] = "safe"
    """`naive`: `safe` (sigma 2C sqrt|S| per silo, the true sensitivity) or `paper` (sigma C sqrt|S|, accounted at sigma / 2)."""
    group_rounding: Literal["up", "paper"] = "up"
    """`group`: `up` (next power of two, a guarantee) or `paper` (the paper's code, not a guarantee)."""
    weighting: Literal["plain", "private"] = "plain"
    """`avg_w`: how the weights n_{s,u}/N_u are computed: `plain` (in the clear, trusted mode) or `private` (the Private Weighting Protocol); `private` with another variant is refused."""
    paillier_key_bits: int = Field(default=3072, ge=2048)
    """`weighting: private`: the server's Paillier modulus in bits."""
    max_records_per_user: int = Field(default=2000, ge=1)
    """`weighting: private`: the public bound N_max on any user's records across silos; lcm(1..N_max) must fit the key (at most 1,320 for 2,048 bits, 2,038 for 3,072); a run whose data has a user above it stops (exit 2)."""
    accountant: Literal["rdp", "pld"] = "rdp"
    """`rdp` (Renyi DP) or `pld` (privacy loss distributions via Google's dp_accounting: a tighter upper bound, reported as `epsilon` beside the RDP figure, `epsilon_rdp` and `epsilon_pld`); `pld` is refused with variant `group`, whose group privacy is a statement about RDP."""

    def audit_refusal(self, *, client_rate: float) -> tuple[str, Any, str] | None:
        """Canary users are per-user clipped deltas: the per-user variants, with weights computed in the clear."""
        if self.variant not in AUDITED_VARIANTS:
            return ("mechanism.variant", self.variant,
                    f"uldp audits insert canary users into per-user training: use {', '.join(AUDITED_VARIANTS)}")
        if self.weighting != "plain":
            return ("mechanism.weighting", self.weighting,
                    "an audit weights its canary users in the clear: use plain (the private weighting protocol releases the same sum)")
        return None

    def clips_record_gradients(self) -> bool:
        """GROUP-k runs record-level DP-SGD; the other variants clip per-user model deltas."""
        return self.variant == "group"

    def needs_independent_records(self) -> bool:
        """Every variant: per-user deltas are trained in batches padded and shared across users (vmap)."""
        return True

    @field_validator("group_k")
    @classmethod
    def _check_group_k(cls, value: int | str) -> int | str:
        if isinstance(value, str) and value not in ("max", "median"):
            raise ValueError("must be an integer >= 1, 'max' or 'median'")
        if isinstance(value, int) and (isinstance(value, bool) or value < 1):
            raise ValueError("must be an integer >= 1, 'max' or 'median'")
        return value

    @field_validator("user_rate")
    @classmethod
    def _no_user_sampling_for_group(cls, value: float, info: ValidationInfo) -> float:
        if value != 1.0 and info.data.get("variant") == "group":
            raise ValueError("variant 'group' has no user-level sub-sampling; must be 1.0")
        return value

    _pld_needs_its_smallest_delta = field_validator("accountant")(pld_needs_its_smallest_delta)

    @model_validator(mode="after")
    def _group_needs_k(self) -> "UldpParams":
        if self.variant == "group" and self.group_k is None:
            raise ValueError(
                "group_k: variant 'group' needs a public integer >= 1 (or 'max'/'median' of records per user, the "
                "paper's choice, taken from the data and therefore reported without an epsilon)"
            )
        return self

    @model_validator(mode="after")
    def _pld_needs_user_level_rounds(self) -> "UldpParams":
        """GROUP-k converts record-level RDP to user level by group privacy for RDP (Mironov 2017, Prop. 2), which
        has no PLD counterpart here."""
        if self.accountant == "pld" and self.variant == "group":
            raise ValueError(
                "accountant: variant 'group' is accounted by group privacy over RDP (Mironov 2017, Prop. 2), which has "
                "no PLD counterpart; allowed: rdp, or pld with variant naive, avg, avg_w or sgd"
            )
        return self

    @model_validator(mode="after")
    def _private_weighting_fits(self) -> "UldpParams":
        if self.weighting == "private" and self.variant != "avg_w":
            raise ValueError(
                f"weighting: 'private' computes AVG-w's weights n_su/N_u; variant '{self.variant}' has none to "
                "hide: use variant avg_w, or weighting plain"
            )
        if self.weighting == "private":
            from privsilo.protocols.private_weighting.layout import HeadroomError, check_conversion

            try:
                check_conversion(key_bits=self.paillier_key_bits, max_records_per_user=self.max_records_per_user)
            except HeadroomError as exc:
                # name the setting the scenario gave (the message names both)
                field = "max_records_per_user" if "max_records_per_user" in self.model_fields_set else "paillier_key_bits"
                raise ValueError(f"{field}: {exc.message}") from None
        return self

    def inert_settings(self) -> dict[str, str]:
        """Each variant's own settings under another variant, and the Private Weighting Protocol's without it."""
        inert = {}
        if self.variant != "naive":
            inert["naive_noise"] = f"it sets variant naive's noise; variant is '{self.variant}'"
        if self.variant != "group":
            inert["group_k"] = f"it is variant group's records per user; variant is '{self.variant}'"
            inert["group_rounding"] = f"it rounds variant group's k; variant is '{self.variant}'"
        if self.weighting != "private":
            why = f"it configures weighting: private; weighting is '{self.weighting}'"
            inert.update(paillier_key_bits=why, max_records_per_user=why)
        return inert

    def needs_secure_aggregation(self) -> bool:
        """AVG, AVG-w and SGD split the noise across silos (sigma C / sqrt|S| each): safe only for the sum."""
        return self.variant in ("avg", "avg_w", "sgd")

    def proximal_term_refusal(self) -> str | None:
        if self.variant == "sgd":
            return (
                "variant 'sgd' uploads one gradient per user taken at the global model, where the proximal "
                "term's gradient mu (w - w_t) is 0: it would change nothing; use variant avg, avg_w, naive or group"
            )
        return None
