"""Gradient canaries of a privacy audit, as a silo-side mechanism sees them (see ``privsilo.simulator.audit``).

A white-box ("Dirac") canary is a unit whose contribution is a fixed, public, random unit direction ``u_i`` in
parameter space, scaled to the mechanism's sensitivity: a canary *record* of DP-SGD is a record whose clipped
gradient is ``C u_i`` at every step it is sampled in (Steinke, Nasr, Jagielski 2023, Sec. 6, white-box
auditing); a canary *client* uploads the update ``c u_i`` (Andrew et al. 2024, Sec. 3). The directions are
independent Gaussian vectors normalised to length 1, each drawn from the audit seed and the canary's id, so a silo and
the auditor derive the same direction without sending it, and nearly orthogonal to one another for large ``d``. A
*Dirac* canary's direction is instead a one-hot vector ``e_j`` on a coordinate ``j`` of its own (distinct canaries,
distinct coordinates: exactly orthogonal), chosen by the auditor before training (``privsilo.simulator.audit.directions``)
and handed to the silo with the canary.

A silo hosts only the canaries the audit *included*; the excluded ones exist only in the auditor's scoring.
*Input* canaries (out-of-distribution records, Steinke et al. Sec. 6) are not seen by a mechanism at all: the
silo's worker appends them to the silo's records.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


DIRECTION_STREAM = 3  # directions come from (seed, 3, id); the plan's draws from (seed, 1), user sampling (seed, 2, ...)


def canary_directions(seed: int, ids: np.ndarray, dimension: int, coordinates: np.ndarray | None = None) -> np.ndarray:
    """Unit directions ``u_i`` of the canaries ``ids``, shape ``(len(ids), dimension)``, float64: Gaussian ones from
    ``(seed, id)``, or, given each canary's Dirac ``coordinates``, the one-hot rows ``e_j``."""
    if coordinates is not None:
        rows = np.zeros((len(ids), dimension))
        rows[np.arange(len(ids)), np.asarray(coordinates, dtype=np.int64)] = 1.0
        return rows
    rows = np.empty((len(ids), dimension))
    for row, canary in enumerate(np.asarray(ids, dtype=np.int64)):
        vector = np.random.default_rng([int(seed), DIRECTION_STREAM, int(canary)]).standard_normal(dimension)
        rows[row] = vector / np.linalg.norm(vector)
    return rows


@dataclass(frozen=True)
class SiloCanaries:
    """The included canaries one silo hosts: global ids, the audit's direction seed, and per canary its privacy
    budget where the mechanism personalises budgets (rPDP: canaries get levels as records do) or, for canary users
    whose records span several silos (ULDP), the user's weight ``w_{s,u}`` in this silo; for Dirac canaries, each
    one's coordinate."""

    ids: np.ndarray
    seed: int
    budgets: np.ndarray | None = field(default=None)
    weights: np.ndarray | None = field(default=None)
    # input canaries (out-of-distribution records): their features and labels
    features: np.ndarray | None = field(default=None)
    labels: np.ndarray | None = field(default=None)
    coordinates: np.ndarray | None = field(default=None)  # Dirac canaries: the coordinate j of each direction e_j

    def __len__(self) -> int:
        return int(len(self.ids))

    @property
    def are_inputs(self) -> bool:
        """Input canaries are records the silo trains on like its own; the others act inside the mechanism."""
        return self.features is not None

    def directions(self, dimension: int) -> np.ndarray:
        """The hosted canaries' directions, ``(len(self), dimension)`` float32, computed once per silo (every round
        and local step reuses them; a snapshot leaves them out and the silo draws them again)."""
        cached = self.__dict__.get("_directions")
        if cached is None or cached.shape[1] != dimension:
            cached = canary_directions(self.seed, self.ids, dimension, self.coordinates).astype(np.float32)
            object.__setattr__(self, "_directions", cached)
        return cached

    def __getstate__(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key != "_directions"}

    def sampled(self, round_index: int, rate: float) -> np.ndarray:
        """Which canaries take part in ``round_index`` under Poisson sampling at ``rate`` (a canary user's draw is
        the same in every silo: it comes from the audit's seed, the round and the canary's id only)."""
        if rate >= 1.0:
            return np.ones(len(self), dtype=bool)
        return np.array([np.random.default_rng([self.seed, 2, round_index, int(c)]).random() < rate for c in self.ids], dtype=bool)


@dataclass(frozen=True)
class CanaryGradients:
    """Canary records inside DP-SGD: canary ``i`` is Poisson-sampled at ``rates[i]`` in each step (from the silo's
    generator, after its records) and, when sampled, adds its clipped gradient ``C u_i`` to the clipped sum."""

    directions: "torch.Tensor"  # (k, d)
    rates: "torch.Tensor"  # (k,) float64

    @classmethod
    def of(cls, canaries: SiloCanaries | None, *, dimension: int, rates: np.ndarray | float | None,
           device: "torch.device | str" = "cpu") -> "CanaryGradients | None":
        """The canaries a silo hosts at the given Poisson rates (one, or one per canary), on the silo's ``device``;
        None without canaries. A silo that hosts canaries but gives no rates is a mechanism that does not take
        canary records: an error."""
        import torch

        if canaries is None or len(canaries) == 0:
            return None
        if rates is None:
            raise TypeError("this silo hosts canary records but its training gives them no sampling rate")
        rates = np.broadcast_to(np.asarray(rates, dtype=np.float64), (len(canaries),))
        return cls(torch.from_numpy(canaries.directions(dimension)).to(device), torch.tensor(rates.copy(), device=device))

    def sampled_sum(self, *, scale: float, generator: "torch.Generator") -> "torch.Tensor":
        """``scale`` times the sum of the directions of the canaries drawn in this step, flat ``(d,)``, drawn on
        the generator's device (a 0/1 vector times the directions, so the host never waits for the draw)."""
        import torch

        drawn = torch.rand(self.rates.shape[0], generator=generator, device=generator.device, dtype=torch.float64)
        kept = (drawn.to(self.rates.device) < self.rates).to(self.directions.dtype)
        return (kept @ self.directions) * scale


def with_canary_clients(vector: np.ndarray, uploads: np.ndarray, *, weight: float) -> np.ndarray:
    """A FedAvg contribution ``[weight * delta, weight]`` plus ``[weight * upload_c, weight]`` for each canary
    client c, one upload per row of ``uploads`` (k, d): each canary client counts as one more client of the
    silo's weight in the server's weighted mean (Andrew et al. 2024, Sec. 3)."""
    uploads = np.asarray(uploads, dtype=np.float64)
    return vector + np.concatenate([weight * uploads.sum(axis=0), [weight * uploads.shape[0]]])
