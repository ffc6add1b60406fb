"""Client-level accounting of the distributed discrete Gaussian (Kairouz, Liu, Steinke, ICML 2021, Proposition 14
and Theorem 1).

A round's sum carries the rounded updates of the n silos that uploaded and the sum of their n noises
``N_Z(0, sigma^2)^d``; zeroing out one silo's rounded update (norms at most Delta_2 and Delta_1) moves it by a
Delta in Z^d, and Proposition 14 bounds the Renyi divergence of order alpha by ::

    min( alpha/2 Delta_2^2/(n sigma^2) + tau d,
         alpha/2 (Delta_2^2/(n sigma^2) + 2 Delta_1 tau/(sqrt(n) sigma) + tau^2 d),
         alpha/2 (Delta_2/(sqrt(n) sigma) + tau sqrt(d))^2 ),   tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k/(k+1)).

n is counted from the round's events (the silos whose uploads reached the sum): dropouts shrink the noise and
raise the round's cost. Rounds compose by adding RDP, over the integer orders 2..63 (as Kairouz et al.'s
accounting code); (epsilon, delta) by Balle et al. 2020, Thm. 21. No amplification by client sampling is
claimed: dp_fedavg refuses ``federation.client_rate`` < 1 with distributed noise.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.mechanisms.events import DistributedDiscreteGaussianEvent
from privsilo.mechanisms.rdp import DEFAULT_ORDERS, epsilon_from_rdp

GUARANTEE = ("client-level (epsilon, delta)-DP (one silo's rounded update zeroed out, its share of the noise still "
             "added), DP-FedAvg with the distributed discrete Gaussian under secure aggregation; the server sees only the sum")
ORDERS = np.array([order for order in DEFAULT_ORDERS if order == int(order)], dtype=np.float64)


def tau(sigma: float, silos: int) -> float:
    """tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k+1)) (Kairouz et al., Proposition 14)."""
    k = np.arange(1, silos, dtype=np.float64)
    return float(10.0 * np.exp(-2.0 * math.pi**2 * sigma**2 * k / (k + 1)).sum())


def round_rdp(orders: np.ndarray, event: DistributedDiscreteGaussianEvent, silos: int) -> np.ndarray:
    """Proposition 14's bound at each order for one round summed over ``silos`` uploads."""
    t, d = tau(event.sigma, silos), event.dimension
    scale = math.sqrt(silos) * event.sigma
    l2, l1 = event.l2_bound / scale, event.l1_bound / scale
    half = np.asarray(orders, dtype=np.float64) / 2.0
    return np.minimum.reduce([half * l2**2 + t * d,
                              half * (l2**2 + 2.0 * l1 * t + t**2 * d),
                              half * (l2 + math.sqrt(d) * t) ** 2])


class DistributedAccountant(PrivacyAccountant):
    """Counts each round's uploading silos and composes Proposition 14's RDP over the rounds."""

    def __init__(self, *, delta: float) -> None:
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {delta}")
        self.delta = delta
        self._rounds: dict[int, tuple[DistributedDiscreteGaussianEvent, set[int]]] = {}

    def record(self, silo_id: int, event: Any) -> None:
        if not isinstance(event, DistributedDiscreteGaussianEvent):
            raise TypeError(f"distributed dp_fedavg accounts DistributedDiscreteGaussianEvent, got {type(event).__name__}")
        if not (event.sigma >= 0.5 and math.isfinite(event.sigma) and event.dimension >= 1
                and 0 <= event.l1_bound and 0 <= event.l2_bound < math.inf):
            raise ValueError(f"Proposition 14 needs sigma >= 1/2 and finite norm bounds, got {event}")
        known, silos = self._rounds.setdefault(int(event.round_index), (event, set()))
        if known != event:
            raise ValueError(f"silos disagree about round {event.round_index}: {known} vs {event}")
        silos.add(int(silo_id))

    def rdp(self) -> np.ndarray:
        """The composed RDP curve over :data:`ORDERS`."""
        total = np.zeros_like(ORDERS)
        for event, silos in self._rounds.values():
            total += round_rdp(ORDERS, event, len(silos))
        return total

    def report(self) -> dict[str, Any]:
        epsilon, order = epsilon_from_rdp(ORDERS, self.rdp(), self.delta)
        uploads = [len(silos) for _, silos in self._rounds.values()]
        return {
            "guarantee": GUARANTEE,
            "epsilon": epsilon if math.isfinite(epsilon) else None,
            "delta": self.delta,
            "rdp_order": order,
            "rounds_accounted": len(self._rounds),
            "fewest_uploads": min(uploads, default=None),
        }
