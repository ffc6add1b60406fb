"""The honest account of PLDP-FL: pure epsilon-LDP per client, composed over coordinates and participations.

PDPM makes one *scalar* eps_i-LDP. An upload perturbs many scalars of the same client's input, and a client
uploads in every round it is sampled, so by basic composition of pure DP a client's whole input (hence its
local dataset: the neighbouring relation is any two inputs in its safe range) is protected at

    epsilon_per_client = sum over its uploads of (perturbed coordinates x epsilon per coordinate),

i.e. R_i * d * eps_i for R_i uploads of all d coordinates, or R_i * eps_i with ``coordinates: k``. Basic
composition is exact for pure DP here: the worst case puts every coordinate at an end of its range. The paper
reports eps_i (one scalar of one upload) for the whole training; that figure is kept as
``epsilon_per_coordinate``. Only uploads actually made are counted; no amplification from client sampling is
claimed. Clients hold disjoint data, so the run's ``epsilon`` is the largest per-client figure.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Iterable

from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.mechanisms.events import LocalDpPlan, LocalDpUpload

GUARANTEE = (
    "client-level pure epsilon-LDP of each client's uploads (PDPM, any two inputs in the client's safe range), "
    "basic composition over the perturbed coordinates and the client's participations; no amplification by "
    "client sampling"
)


def _check(event: LocalDpPlan | LocalDpUpload) -> None:
    if not isinstance(event, (LocalDpPlan, LocalDpUpload)):
        raise TypeError(f"LocalDpAccountant supports LocalDpPlan and LocalDpUpload, got {type(event).__name__}")
    eps, coordinates = event.epsilon_per_coordinate, event.coordinates
    if isinstance(eps, bool) or not isinstance(eps, Real) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"epsilon_per_coordinate must be a finite number > 0, got {eps!r}")
    if isinstance(coordinates, bool) or not isinstance(coordinates, Integral) or coordinates < 1:
        raise ValueError(f"coordinates must be an integer >= 1, got {coordinates!r}")


class LocalDpAccountant(PrivacyAccountant):
    """Per-client basic composition of :class:`LocalDpUpload` events; the plans give the per-coordinate figure."""

    def __init__(self) -> None:
        self._plans: dict[int, LocalDpPlan] = {}
        self._uploads: dict[int, dict[LocalDpUpload, int]] = {}

    def enrol(self, silo_ids: Iterable[int]) -> None:
        for silo in [int(s) for s in silo_ids]:
            self._uploads.setdefault(silo, {})

    def record(self, silo_id: int, event: LocalDpPlan | LocalDpUpload) -> None:
        """Add a client's plan or one of its uploads; validates before changing any state."""
        _check(event)
        silo = int(silo_id)
        if isinstance(event, LocalDpPlan):
            self._plans[silo] = event
            self._uploads.setdefault(silo, {})
            return
        counts = self._uploads.setdefault(silo, {})
        counts[event] = counts.get(event, 0) + 1

    def uploads(self, silo_id: int) -> int:
        return sum(self._uploads.get(silo_id, {}).values())

    def epsilon_per_client(self, silo_id: int) -> float:
        """Basic composition over every coordinate of every upload the client made (0 if it never uploaded)."""
        return math.fsum(n * u.coordinates * u.epsilon_per_coordinate for u, n in self._uploads.get(silo_id, {}).items())

    def epsilon_per_coordinate(self, silo_id: int) -> float | None:
        """The budget of one perturbed scalar (the paper's figure): the plan's, else the largest uploaded."""
        if silo_id in self._plans:
            return self._plans[silo_id].epsilon_per_coordinate
        return max((u.epsilon_per_coordinate for u in self._uploads.get(silo_id, {})), default=None)

    def epsilon_per_upload(self, silo_id: int) -> float | None:
        plan = self._plans.get(silo_id)
        return None if plan is None else plan.coordinates * plan.epsilon_per_coordinate

    def report(self) -> dict[str, Any]:
        silos = sorted(self._uploads)
        per_client = {str(s): self.epsilon_per_client(s) for s in silos}
        return {
            "guarantee": GUARANTEE,
            "epsilon": max(per_client.values(), default=0.0),
            "delta": 0.0,
            "composition": "basic",
            "epsilon_per_client": per_client,
            "epsilon_per_coordinate": {str(s): self.epsilon_per_coordinate(s) for s in silos},
            "epsilon_per_upload": {str(s): self.epsilon_per_upload(s) for s in silos},
            "coordinates_per_upload": {str(s): None if s not in self._plans else self._plans[s].coordinates for s in silos},
            "uploads": {str(s): self.uploads(s) for s in silos},
            "epsilon_per_silo": dict(per_client),
        }
