"""The run-level accountant of rPDP-FL: per-record privacy spent, from the events silos report.

It recomputes, apart from the silos' own enforcement, each record's realised cost (the RDP of the rounds in
which it was eligible, Theorem 1 server view with realised participation) and its planned third-party
guarantee (Lemma 6 over all T rounds), and summarises budgets, rates and spent epsilon per budget level (or
per budget quantile when budgets are continuous).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mechanisms.base import PrivacyAccountant
from mechanisms.events import PersonalizedPoissonGaussianEvent
from mechanisms.rpdp.accountant import epsilon
from mechanisms.rpdp.budget_accountant import realised_epsilon

MAX_LEVELS = 10
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


@dataclass
class _SiloRecords:
    first: PersonalizedPoissonGaussianEvent
    rounds: np.ndarray = field(init=False)
    excluded: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.rounds = np.zeros(self.first.budgets.shape, dtype=np.int64)
        self.excluded = np.zeros(self.first.budgets.shape, dtype=bool)


class PersonalizedAccountant(PrivacyAccountant):
    """Per-record accounting of :class:`PersonalizedPoissonGaussianEvent` s (records of silos are disjoint)."""

    def __init__(self, *, delta: float, conversion: str = "opacus") -> None:
        self.delta, self.conversion = delta, conversion
        self._silos: dict[int, _SiloRecords] = {}

    def record(self, silo_id: int, event: PersonalizedPoissonGaussianEvent) -> None:
        if not isinstance(event, PersonalizedPoissonGaussianEvent):
            raise TypeError(f"PersonalizedAccountant supports PersonalizedPoissonGaussianEvent only, got {type(event).__name__}")
        silo = self._silos.get(silo_id)
        if silo is not None and event.rates.shape != silo.rounds.shape:
            raise ValueError(f"silo {silo_id}: event for {event.rates.size} records, expected {silo.rounds.size}")
        if silo is None:
            silo = self._silos[silo_id] = _SiloRecords(first=event)
        silo.rounds += event.rates > 0
        silo.excluded |= (event.planned_rates > 0) & (event.rates == 0)

    def _settings(self, event: PersonalizedPoissonGaussianEvent) -> dict[str, Any]:
        return dict(
            noise_multiplier=event.noise_multiplier,
            rounds=event.rounds,
            local_steps=event.steps,
            client_rate=event.client_rate,
            delta=self.delta,
            conversion=self.conversion,
        )

    def per_record(self) -> dict[str, np.ndarray]:
        """Budget, planned rate, realised spent epsilon, third-party epsilon and early exclusion, over all records."""
        columns: dict[str, list[np.ndarray]] = {k: [] for k in ("budget", "rate", "spent", "third_party", "excluded")}
        for silo in self._silos.values():
            event = silo.first
            columns["budget"].append(event.budgets)
            columns["rate"].append(event.planned_rates)
            settings = self._settings(event)
            columns["spent"].append(realised_epsilon(event.planned_rates, silo.rounds, **settings))
            rates, inverse = np.unique(event.planned_rates, return_inverse=True)
            columns["third_party"].append(epsilon(rates, **settings)[inverse.reshape(-1)])
            columns["excluded"].append(silo.excluded)
        return {k: np.concatenate(v) if v else np.zeros(0) for k, v in columns.items()}

    def report(self) -> dict[str, Any]:
        records = self.per_record()
        if records["budget"].size == 0:
            return {"guarantee": "personalized record-level DP", "epsilon": 0.0, "delta": self.delta, "records": 0}
        budget, spent = records["budget"], records["spent"]
        return {
            "guarantee": "personalized record-level DP (rPDP-FL)",
            "epsilon": float(spent.max()),
            "delta": self.delta,
            "records": int(budget.size),
            "max_spent_over_budget": float((spent / budget).max()),
            "third_party_epsilon_max": float(records["third_party"].max()),
            "never_eligible": int((records["rate"] == 0).sum()),
            "excluded_early": int(records["excluded"].sum()),
            "by_budget": _summary_rows(records),
        }


def _summary_rows(records: dict[str, np.ndarray]) -> list[dict[str, float]]:
    """One row per budget level, or per budget quantile when there are more than MAX_LEVELS levels."""
    budget = records["budget"]
    levels = np.unique(budget)
    rows = []
    if levels.size <= MAX_LEVELS:
        for level in levels:
            mask = budget == level
            rows.append(_row({"budget": float(level)}, records, mask))
        return rows
    order = np.argsort(budget, kind="stable")
    for quantile in QUANTILES:
        index = order[min(int(round(quantile * (budget.size - 1))), budget.size - 1)]
        mask = np.zeros(budget.size, dtype=bool)
        mask[index] = True
        rows.append(_row({"quantile": quantile, "budget": float(budget[index])}, records, mask))
    return rows


def _row(head: dict[str, float], records: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, float]:
    return {
        **head,
        "records": int(mask.sum()),
        "q_mean": float(records["rate"][mask].mean()),
        "spent_mean": float(records["spent"][mask].mean()),
        "spent_max": float(records["spent"][mask].max()),
        "third_party_max": float(records["third_party"][mask].max()),
    }
