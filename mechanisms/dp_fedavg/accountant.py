"""Client-level accounting of DP-FedAvg (McMahan et al., ICLR 2018, Sec. 3 and Theorem 1 via the moments
accountant; here RDP, Mironov et al. 2019, or PLD).

Every round is one Gaussian mechanism on the sum of the silos' clipped updates: sensitivity C to one silo's update
(zeroed out: the silo is sampled and counted the same way, its update replaced by 0), noise z C, on silos the
server Poisson-samples at rate q = ``federation.client_rate``. So T rounds are T compositions of the
Poisson-subsampled Gaussian with noise multiplier z, the same curve as DP-SGD's with a client in place of a
record ([`privsilo.mechanisms.accounting.schedule_epsilon`][privsilo.mechanisms.accounting.schedule_epsilon]). A round counts once,
however many silos report it; a round without uploads released nothing of any silo.

The amplification assumes a party that does not learn which silos were sampled; the server draws the sample, so
its view (and that of anyone who reads the participants) is ``epsilon_without_sampling``, the rounds at q = 1.
"""
from __future__ import annotations

import math
from typing import Any

from privsilo.mechanisms.accounting import schedule_epsilon
from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.mechanisms.events import ClientLevelGaussianEvent

GUARANTEE = "client-level (epsilon, delta)-DP (one silo's noised contribution zeroed out), DP-FedAvg"


class ClientLevelAccountant(PrivacyAccountant):
    """Composes each round's [`ClientLevelGaussianEvent`][privsilo.mechanisms.events.ClientLevelGaussianEvent] once, by
    ``accountant`` (``rdp``, or ``pld`` reported beside RDP)."""

    def __init__(self, *, delta: float, noise_multiplier: float, accountant: str = "rdp") -> None:
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {delta}")
        if accountant not in ("rdp", "pld"):
            raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
        self.delta, self.accountant, self.noise_multiplier = delta, accountant, float(noise_multiplier)
        self._rounds: dict[int, tuple[float, float]] = {}  # round -> (q, z)

    def round_held(self, round_index: int, *, client_rate: float) -> None:
        self._add_round(round_index, (float(client_rate), self.noise_multiplier))

    def record(self, silo_id: int, event: Any) -> None:
        if not isinstance(event, ClientLevelGaussianEvent):
            raise TypeError(f"dp_fedavg accounts ClientLevelGaussianEvent, got {type(event).__name__}")
        self._add_round(int(event.round_index), (float(event.sampling_rate), float(event.noise_multiplier)))

    def _add_round(self, round_index: int, setting: tuple[float, float]) -> None:
        if not (0.0 < setting[0] <= 1.0 and math.isfinite(setting[1]) and setting[1] >= 0.0):
            raise ValueError(f"sampling_rate must lie in (0, 1] and noise_multiplier be finite and >= 0, got {setting}")
        known = self._rounds.setdefault(round_index, setting)
        if known != setting:
            raise ValueError(f"silos and server disagree about round {round_index}: (q, z) = {known} vs {setting}")

    def _epsilon(self, *, knows_sample: bool, accountant: str) -> float:
        counts: dict[tuple[float, float], int] = {}
        for q, z in self._rounds.values():
            key = (1.0 if knows_sample else q, z)
            counts[key] = counts.get(key, 0) + 1
        return schedule_epsilon(tuple((q, z, rounds) for (q, z), rounds in counts.items()), self.delta, accountant)

    def report(self) -> dict[str, Any]:
        sampled = any(q < 1.0 for q, _ in self._rounds.values())
        report: dict[str, Any] = {
            "guarantee": GUARANTEE + (
                "; amplified by Poisson client sampling, against a party who does not learn which silos were sampled "
                "(the server's view, and that of a reader of metrics.csv's participants, is epsilon_without_sampling)" if sampled else ""),
            "epsilon": _finite(self._epsilon(knows_sample=False, accountant=self.accountant)),
            "delta": self.delta,
            "rounds_accounted": len(self._rounds),
        }
        if sampled:
            report["epsilon_without_sampling"] = _finite(self._epsilon(knows_sample=True, accountant=self.accountant))
        if self.accountant == "pld":
            report["accountant"] = "pld"
            for key, knows in (("epsilon", False), ("epsilon_without_sampling", True))[: 1 + sampled]:
                for name in ("rdp", "pld"):
                    report[f"{key}_{name}"] = _finite(self._epsilon(knows_sample=knows, accountant=name))
        return report


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
