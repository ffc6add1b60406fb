"""The run-level accountant of rPDP-FL: per-record privacy spent, from the events silos report.

It recomputes, apart from the silos' own enforcement, each record's realised cost (the RDP of the rounds in
which it was eligible, Theorem 1 server view with realised participation) and its planned third-party
guarantee (Lemma 6 over all T rounds), and summarises budgets, rates and spent epsilon per budget level (or
per budget quantile when budgets are continuous). Both are incremental: the third-party figure depends on the
plan only and is computed once per silo, and the realised cost comes from a one-round RDP curve per distinct
rate (:class:`~privsilo.mechanisms.rpdp.budget_accountant.RealisedCost`), so a round's report costs milliseconds.

With ``normalization="expected_batch"`` (the paper's data-dependent divisor sum_j q_ij) no accountant covers the
mechanism: the report gives ``epsilon: None`` and keeps the paper's figures under ``paper_accounting``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.mechanisms.events import PersonalizedPoissonGaussianEvent, PersonalizedTrainingPlan
from privsilo.mechanisms.rpdp.accountant import epsilon
from privsilo.mechanisms.rpdp.budget_accountant import RealisedCost

MAX_LEVELS = 10
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
NORMALIZATIONS = ("public", "expected_batch")
GUARANTEE = "personalized record-level DP (rPDP-FL)"
NOT_COVERED = "not covered: expected_batch normalisation"
PAPER_MEANING = (
    "what the paper's analysis claims if the divisor sum_j q_ij were public; it is data-dependent, so this is "
    "not a guarantee (use normalization: public for one)"
)


@dataclass
class _SiloRecords:
    plan: PersonalizedTrainingPlan
    cost: RealisedCost
    third_party: np.ndarray
    rounds: np.ndarray = field(init=False)
    excluded: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.rounds = np.zeros(self.plan.budgets.shape, dtype=np.int64)
        self.excluded = np.zeros(self.plan.budgets.shape, dtype=bool)

    def spent(self) -> np.ndarray:
        return self.cost.epsilon(self.plan.planned_rates, self.rounds)


class PersonalizedAccountant(PrivacyAccountant):
    """Per-record accounting of rPDP-FL plans and rounds (records of silos are disjoint).

    Every silo's :class:`PersonalizedTrainingPlan` (announced at start-up) registers its records; each
    :class:`PersonalizedPoissonGaussianEvent` counts one realised round for the records eligible in it.
    """

    def __init__(self, *, delta: float, conversion: str = "opacus", normalization: str = "public") -> None:
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        self.delta, self.conversion, self.normalization = delta, conversion, normalization
        self._silos: dict[int, _SiloRecords] = {}
        self._costs: dict[tuple, RealisedCost] = {}  # per distinct settings, shared by the silos
        self._third_party: dict[tuple, dict[float, float]] = {}

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
            settings = dict(plan.schedule.as_settings(), delta=self.delta, conversion=self.conversion)
            key = tuple(sorted(settings.items()))
            if key not in self._costs:
                self._costs[key] = RealisedCost(**settings)
            third_party = self._third_party_epsilon(plan.planned_rates, key=key, settings=settings)
            silo = self._silos[silo_id] = _SiloRecords(plan=plan, cost=self._costs[key], third_party=third_party)
        elif plan.planned_rates.shape != silo.rounds.shape:
            raise ValueError(f"silo {silo_id}: plan for {plan.planned_rates.size} records, expected {silo.rounds.size}")
        return silo

    def _third_party_epsilon(self, rates: np.ndarray, *, key: tuple, settings: dict[str, Any]) -> np.ndarray:
        """Lemma 6 epsilon over all T rounds of every record; computed once per distinct rate and settings."""
        known = self._third_party.setdefault(key, {})
        unique, inverse = np.unique(rates, return_inverse=True)
        new = np.array([rate for rate in unique if rate not in known])
        if new.size:
            known.update(zip(new.tolist(), epsilon(new, **settings).tolist()))
        return np.array([known[rate] for rate in unique.tolist()])[inverse.reshape(-1)]

    def per_record(self) -> dict[str, np.ndarray]:
        """Silo id, budget, planned rate, realised rounds, realised spent epsilon, third-party epsilon and early
        exclusion of every record (silos in id order)."""
        names = ("silo", "budget", "rate", "rounds", "spent", "third_party", "excluded")
        columns: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for silo_id, silo in sorted(self._silos.items()):
            columns["silo"].append(np.full(silo.rounds.shape, silo_id, dtype=np.int64))
            columns["budget"].append(silo.plan.budgets)
            columns["rate"].append(silo.plan.planned_rates)
            columns["rounds"].append(silo.rounds.copy())
            columns["spent"].append(silo.spent())
            columns["third_party"].append(silo.third_party)
            columns["excluded"].append(silo.excluded.copy())
        return {k: np.concatenate(v) if v else np.zeros(0) for k, v in columns.items()}

    def report(self) -> dict[str, Any]:
        records = self.per_record()
        covered = self.normalization == "public"
        head = {"guarantee": GUARANTEE if covered else NOT_COVERED, "epsilon": None, "delta": self.delta}
        if records["budget"].size == 0:
            return {**head, "epsilon": 0.0 if covered else None, "epsilon_per_silo": {}, "records": 0}
        counts = {
            "records": int(records["budget"].size),
            "never_eligible": int((records["rate"] == 0).sum()),
            "never_trained": int((records["rounds"] == 0).sum()),
            "excluded_early": int(records["excluded"].sum()),
        }
        accounting = self._accounting(records)
        if covered:
            return {**head, **accounting, **counts}
        silos = {str(silo): None for silo in sorted(self._silos)}
        return {**head, "epsilon_per_silo": silos, **counts, "paper_accounting": {"meaning": PAPER_MEANING, **accounting}}

    def _accounting(self, records: dict[str, np.ndarray]) -> dict[str, Any]:
        budget, spent = records["budget"], records["spent"]
        per_silo = {str(silo): float(spent[records["silo"] == silo].max(initial=0.0)) for silo in sorted(self._silos)}
        return {
            "epsilon": float(spent.max()),
            "epsilon_per_silo": per_silo,
            "max_spent_over_budget": float((spent / budget).max()),
            "third_party_epsilon_max": float(records["third_party"].max()),
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
