"""What a client-level audit checks for the mechanisms that report more than one ``epsilon``: PLDP's two figures
and d-privacy's leakage, each of the silos that host the audit's canary clients.

A canary client takes its host's parameters (PLDP's eps_i, range and coordinates; d-privacy's eps = n / (nu R))
and takes part in every round its host does, so its claim is its host's figure; the canaries of one audit are
pooled, so the claim checked is the largest over the hosts (a lower bound on a pool is at most its largest
member's epsilon).

* ``pldp`` (Shen et al. 2023; :mod:`mechanisms.pldp.accountant`): ``claimed_epsilon_per_client`` (pure LDP,
  basic composition over the coordinates and the participations: a guarantee) and
  ``claimed_epsilon_per_coordinate`` (one scalar of one upload, the paper's figure: not a guarantee for a client).
* ``dprivacy`` (Galli et al. 2023, Theorem 3.1; :mod:`mechanisms.dprivacy.accountant`): no (epsilon, delta)
  claim. ``claimed_leakage_per_client`` and ``claimed_leakage_per_participation`` are d-privacy's figures;
  under ``clipped`` they bound telling apart two clipped updates of the same hypothesis (replacing a client's
  update within the radius R: an audit's excluded canaries stand for an update along an unrelated direction),
  and the per-client total is the headline ``claimed_epsilon``; under ``paper`` they are the paper's numbers and
  no guarantee (the noise scale reveals ||delta||), so there is no ``claimed_epsilon``. The audit itself adds or
  removes canary clients, not replaces them: ``claim_mismatch`` says so in ``audit.json``.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

DPRIVACY_NOTES = {
    "clipped": ("d-privacy leakage (Galli et al. 2023, Theorem 3.1) of the hosts' clients: a bound for replacing a "
                "client's clipped update by another within R of the same hypothesis, summed over participations"),
    "paper": ("calibration 'paper': the paper's leakage figures, no guarantee (the noise scale reveals ||delta||); "
              "no claimed epsilon"),
}


DPRIVACY_MISMATCH = ("the leakage bounds replacing one client's clipped update by another; this audit adds or removes a "
                     "canary client (an excluded canary uploads nothing), a different neighbouring relation, so its bound "
                     "is set against a claim the claim does not make: a bound above the leakage would not by itself refute it")


def client_claims(mechanism: str, privacy: Mapping[str, Any], hosts: Iterable[int]) -> dict[str, Any]:
    """The claims of ``mechanism``'s privacy report for canary clients hosted by silos ``hosts`` (see the module
    docstring); nothing for the other mechanisms."""
    keys = [str(int(silo)) for silo in hosts]
    if mechanism == "pldp":
        return {
            "claimed_epsilon_per_client": _largest(privacy["epsilon_per_client"], keys),
            "claimed_epsilon_per_coordinate": _largest(privacy["epsilon_per_coordinate"], keys),
        }
    if mechanism == "dprivacy":
        leakage = privacy["leakage"]
        clients = [leakage["per_client"][key] for key in keys if key in leakage["per_client"]]
        total = max((client["total"] for client in clients), default=None)
        return {
            "claimed_epsilon": total if leakage["calibration"] == "clipped" else None,
            "claimed_leakage_per_client": total,
            "claimed_leakage_per_participation": max(
                (client["per_participation"] for client in clients if client["participations"]), default=None),
            "claim_note": DPRIVACY_NOTES[leakage["calibration"]],
            "claim_mismatch": DPRIVACY_MISMATCH,
        }
    return {}


def _largest(per_client: Mapping[str, float | None], keys: list[str]) -> float | None:
    return max((per_client[key] for key in keys if per_client.get(key) is not None), default=None)
