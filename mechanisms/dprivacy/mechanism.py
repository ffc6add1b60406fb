"""``dprivacy``: d-privacy (metric privacy) with IFCA (Galli et al., "Group Privacy for Personalized Federated
Learning", ICISSP 2023, Algorithms 1 and 2).

The server keeps k hypotheses. Each round every sampled client evaluates its loss under each, trains the best
one locally, and uploads its parameters perturbed with Euclidean-Laplace noise (``privsilo.mechanisms.dprivacy.sanitize``),
without saying which hypothesis it trained; the server runs k-means on the uploads initialised at the current
hypotheses, and each hypothesis becomes its cluster's mean (``privsilo.mechanisms.dprivacy.ifca``).

Neighbouring relation: none in the DP sense. d-privacy protects a client's uploaded parameters x against every
other value x' in proportion to their Euclidean distance, ``exp(eps d(x, x'))``; with the default ``clipped``
calibration every upload of the same hypothesis lies within R of it, so any two are told apart by at most
``2n/nu`` per participation, composed over participations by addition (Theorem 3.1;
``privsilo.mechanisms.dprivacy.accountant``). The server must see every upload, so secure aggregation is refused.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from privsilo.mechanisms.base import TRAINED_PARAMETERS, Mechanism, PrivacyAccountant, ServerMechanism, SiloContext, SiloMechanism
from privsilo.mechanisms.dprivacy.ifca import IfcaServer
from privsilo.mechanisms.dprivacy.params import Calibration, DPrivacyParams

HYPOTHESIS_PUBLIC = "which hypothesis each upload trained (its cluster): the leakage bound covers uploads of the same hypothesis"
UPDATE_NORM_PUBLIC = "each upload's update norm ||delta|| (calibration 'paper' scales the noise by it)"

# What an audit's claims say (``audit.json``), by calibration; see ``DPrivacy.audit_claims``.
CLAIM_NOTES = {
    "clipped": ("d-privacy leakage (Galli et al. 2023, Theorem 3.1) of the hosts' clients: a bound for replacing a "
                "client's clipped update by another within R of the same hypothesis, summed over participations"),
    "paper": ("calibration 'paper': the paper's leakage figures, no guarantee (the noise scale reveals ||delta||); "
              "no claimed epsilon"),
}
CLAIM_MISMATCH = ("the leakage bounds replacing one client's clipped update by another; this audit adds or removes a "
                  "canary client (an excluded canary uploads nothing), a different neighbouring relation, so its bound "
                  "is set against a claim the claim does not make: a bound above the leakage would not by itself refute it")


class DPrivacy(Mechanism):
    """IFCA with d-private uploads (see the module docstring)."""

    name = "dprivacy"
    privacy_unit = "client"
    Params = DPrivacyParams
    needs_individual_contributions = True
    supports_regression = True
    personalised = True
    # theta_j + delta' + noise (Galli et al. 2023, Algorithm 2), delta' clipped to the radius (params.update_clip_norm)
    upload_form = TRAINED_PARAMETERS
    trains_local_epochs = True
    audit_units = ("client",)

    def silo(self, context: SiloContext) -> SiloMechanism:
        from privsilo.mechanisms.dprivacy.silo import DPrivacySilo  # torch-side code, imported by the silos only

        return DPrivacySilo(context, self.params)

    def server(self) -> ServerMechanism:
        return IfcaServer()

    def num_hypotheses(self) -> int:
        return self.params.hypotheses

    def accountant(self) -> PrivacyAccountant:
        from privsilo.mechanisms.dprivacy.accountant import LeakageAccountant

        return LeakageAccountant(calibration=self.params.calibration, nu=self.params.nu)

    @classmethod
    def audit_claims(cls, privacy: Mapping[str, Any], hosts: Sequence[str]) -> dict[str, Any]:
        """No (epsilon, delta) claim: d-privacy's leakage figures of the hosts' clients (Galli et al. 2023, Theorem
        3.1), the largest over ``hosts``. Under ``clipped`` they bound telling apart two clipped updates of the same
        hypothesis, and the per-client total is the headline ``claimed_epsilon``; under ``paper`` they are no
        guarantee, so there is none. The audit adds or removes canary clients: ``claim_mismatch`` says so."""
        leakage = privacy["leakage"]
        clients = [leakage["per_client"][key] for key in hosts if key in leakage["per_client"]]
        total = max((client["total"] for client in clients), default=None)
        return {
            "claimed_epsilon": total if leakage["calibration"] == "clipped" else None,
            "claimed_leakage_per_client": total,
            "claimed_leakage_per_participation": max(
                (client["per_participation"] for client in clients if client["participations"]), default=None),
            "claim_note": CLAIM_NOTES[leakage["calibration"]],
            "claim_mismatch": CLAIM_MISMATCH,
        }

    @classmethod
    def gdp_mu_star_basis(cls) -> str:
        return "none: d-privacy makes no add/remove (epsilon, delta) claim"

    @classmethod
    def privacy_line(cls, privacy: Mapping[str, Any]) -> str:
        """The leakage per client over the run (Theorem 3.1), or why there is no bound."""
        leakage = privacy["leakage"]
        if leakage.get("max") is None or not math.isfinite(leakage["max"]):
            return f"no d-privacy leakage bound ({privacy.get('guarantee')})"
        figures = f"max {leakage['max']:.4g}, median {leakage['median']:.4g} (summary.json privacy.leakage)"
        if leakage["calibration"] == "paper":
            return f"no guarantee (calibration 'paper' reveals ||delta||); the paper's leakage per client: {figures}"
        return f"d-privacy leakage per client over the run: {figures}"

    def write_plots(self, privacy: Mapping[str, Any], directory: Path) -> None:
        from privsilo.mechanisms.dprivacy.plots import plot_leakage  # matplotlib: only where a run writes its files

        plot_leakage(privacy, path=directory / "leakage.png")

    def assumed_public(self) -> tuple[str, ...]:
        if self.params.calibration is Calibration.PAPER:
            return (HYPOTHESIS_PUBLIC, UPDATE_NORM_PUBLIC)
        return (HYPOTHESIS_PUBLIC,)
