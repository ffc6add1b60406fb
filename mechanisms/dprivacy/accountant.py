"""Per-client privacy leakage of d-private uploads (Galli et al., ICISSP 2023, Sec. 3.2 and Theorem 3.1).

One upload with Euclidean-Laplace parameter eps is eps-d-private in the uploaded parameters (Prop. 3.1): two
secrets x, x' are told apart by at most ``exp(eps d(x, x'))``. Independent uploads compose by adding their eps
(Theorem 3.1), so a client's leakage over a run is the sum over its participations. Per participation:

* ``clipped``: ``eps * 2R = 2n / nu``, the largest leakage between two clipped uploads of the same hypothesis
  (both lie within R of it). Which hypothesis a client trained is not hidden: between uploads of different
  hypotheses the bound is ``eps * (2R + s)`` with s the largest distance between the broadcast hypotheses,
  reported as ``total_across_hypotheses``.
* ``paper``: ``eps * ||delta|| = n / nu``, the paper's figure for secrets within ||delta|| of the update. eps is
  set from the client's own ||delta||, so this is not a guarantee (see ``privsilo.mechanisms.dprivacy.sanitize``).

nu = 0 (no noise) leaks without bound: the figures are infinite (``null`` in summary.json).
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.mechanisms.dprivacy.params import Calibration
from privsilo.mechanisms.events import EuclideanLaplaceEvent, PrivacyEvent

GUARANTEE_CLIPPED = (
    "d-privacy (metric privacy; Galli et al. 2023, Prop. 3.1 and Theorem 3.1), per client: each upload is "
    "eps-d-private in the clipped parameters with eps = n / (nu R); two uploads of the same hypothesis are told "
    "apart by at most 2n/nu per participation, summed over participations (privacy.leakage); the hypothesis a "
    "client trained is not hidden"
)
GUARANTEE_PAPER = (
    "none: calibration 'paper' sets eps = n / (nu ||delta||) from the client's own update, so the noise scale "
    "reveals ||delta||; privacy.leakage gives the paper's n/nu per participation for comparison only"
)
GUARANTEE_NO_NOISE = "none: nu = 0 adds no noise (the no-noise baseline)"


class LeakageAccountant(PrivacyAccountant):
    """Sums each client's d-privacy leakage over its participations (Theorem 3.1)."""

    def __init__(self, *, calibration: Calibration, nu: float) -> None:
        self.calibration = Calibration(calibration)
        self.nu = nu
        self._clients: dict[int, list[tuple[float, float]]] = {}  # silo -> [(leakage, across hypotheses)]

    def enrol(self, silo_ids: Iterable[int]) -> None:
        for silo in silo_ids:
            self._clients.setdefault(int(silo), [])

    def record(self, silo_id: int, event: PrivacyEvent) -> None:
        if not isinstance(event, EuclideanLaplaceEvent):
            raise TypeError(f"the d-privacy accountant cannot account {type(event).__name__}")
        if event.calibration != self.calibration.value:
            raise ValueError(f"event calibrated '{event.calibration}', accountant '{self.calibration.value}'")
        self._clients.setdefault(int(silo_id), []).append(participation_leakage(event))

    def report(self) -> dict[str, Any]:
        per_client = {str(silo): _client_report(items) for silo, items in sorted(self._clients.items())}
        totals = [c["total"] for c in per_client.values()]
        across = [c["total_across_hypotheses"] for c in per_client.values()]
        leakage = {
            "calibration": self.calibration.value,
            "nu": self.nu,
            "max_per_participation": max((c["per_participation"] for c in per_client.values() if c["participations"]), default=None),
            "max": max(totals, default=0.0),
            "median": float(np.median(totals)) if totals else 0.0,
            "max_across_hypotheses": None if self.calibration is Calibration.PAPER else max(across, default=0.0),
            "per_client": per_client,
        }
        if self.nu == 0:
            guarantee = GUARANTEE_NO_NOISE
        else:
            guarantee = GUARANTEE_CLIPPED if self.calibration is Calibration.CLIPPED else GUARANTEE_PAPER
        return {
            "guarantee": guarantee,
            "epsilon": None,  # not an (epsilon, delta)-DP guarantee: see leakage
            "delta": None,
            "epsilon_per_silo": {silo: None for silo in per_client},
            "leakage": leakage,
        }


def participation_leakage(event: EuclideanLaplaceEvent) -> tuple[float, float]:
    """(leakage, leakage across hypotheses) of one upload; see the module docstring."""
    if math.isinf(event.epsilon):
        return math.inf, math.inf
    if event.calibration == Calibration.PAPER.value:
        return event.epsilon * event.radius, math.nan
    return event.epsilon * 2 * event.radius, event.epsilon * (2 * event.radius + event.hypothesis_spread)


def _client_report(items: list[tuple[float, float]]) -> dict[str, Any]:
    leakages = [leak for leak, _ in items]
    return {
        "participations": len(items),
        "per_participation": max(leakages, default=None),
        "total": math.fsum(leakages),
        "total_across_hypotheses": math.fsum(across for _, across in items),
    }
