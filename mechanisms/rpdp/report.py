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
from mechanisms.events import PersonalizedPoissonGaussianEvent, PersonalizedTrainingPlan
from mechanisms.rpdp.accountant import epsilon
from mechanisms.rpdp.budget_accountant import realised_epsilon

MAX_LEVELS = 10
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


@dataclass
class _SiloRecords:
    plan: PersonalizedTrainingPlan
    rounds: np.ndarray = field(init=False)
    excluded: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.rounds = np.zeros(self.plan.budgets.shape, dtype=np.int64)
        self.excluded = np.zeros(self.plan.budgets.shape, dtype=bool)


class PersonalizedAccountant(PrivacyAccountant):
    """Per-record accounting of rPDP-FL plans and rounds (records of silos are disjoint).

    Every silo's :class:`PersonalizedTrainingPlan` (announced at start-up) registers its records; each
    :class:`PersonalizedPoissonGaussianEvent` counts one realised round for the records eligible in it.
    """

    def __init__(self, *, delta: float, conversion: str = "opacus") -> None:
        self.delta, self.conversion = delta, conversion
        self._silos: dict[int, _SiloRecords] = {}

    def record(self, silo_id: int, event: PersonalizedTrainingPlan | PersonalizedPoissonGaussianEvent) -> None:
        if isinstance(event, PersonalizedTrainingPlan):
            self._silo(silo_id, event)
            return
        if not isinstance(event, PersonalizedPoissonGaussianEvent):
            raise TypeError(
                f"PersonalizedAccountant supports PersonalizedTrainingPlan and PersonalizedPoissonGaussianEvent, got {type(event).__name__}"
            )
        silo = self._silo(silo_id, event.plan)
        silo.rounds += event.rates > 0
        silo.excluded |= (event.plan.planned_rates > 0) & (event.rates == 0)

    def _silo(self, silo_id: int, plan: PersonalizedTrainingPlan) -> _SiloRecords:
        silo = self._silos.get(silo_id)
        if silo is None:
            silo = self._silos[silo_id] = _SiloRecords(plan=plan)
        elif plan.planned_rates.shape != silo.rounds.shape:
            raise ValueError(f"silo {silo_id}: plan for {plan.planned_rates.size} records, expected {silo.rounds.size}")
        return silo

    def _settings(self, plan: PersonalizedTrainingPlan) -> dict[str, Any]:
        return dict(plan.schedule.as_settings(), delta=self.delta, conversion=self.conversion)

    def per_record(self) -> dict[str, np.ndarray]:
        """Budget, planned rate, realised spent epsilon, third-party epsilon and early exclusion, over all records."""
        columns: dict[str, list[np.ndarray]] = {k: [] for k in ("budget", "rate", "spent", "third_party", "excluded")}
        for _, silo in sorted(self._silos.items()):
            plan = silo.plan
            columns["budget"].append(plan.budgets)
            columns["rate"].append(plan.planned_rates)
            settings = self._settings(plan)
            columns["spent"].append(realised_epsilon(plan.planned_rates, silo.rounds, **settings))
            rates, inverse = np.unique(plan.planned_rates, return_inverse=True)
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
