"""What an audit found: per group of canaries the bound and the estimate, and the claims they are set against."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from simulator.audit.bounds import AuditBound, GaussianEstimate
from simulator.reports import finite_or_none
from simulator.results import RunResult
from simulator.scenario import Scenario

VIEW = "final model"
SCORES = {
    "gradient": "cosine between the final model's change (its negative for record canaries, whose direction is a gradient) and the "
                "canary's direction; the largest over the hypotheses where the mechanism keeps several",
    "input": "minus the final model's loss on the canary (a random Gaussian input with a random label)",
}


@dataclass(frozen=True)
class AuditGroup:
    """One set of canaries audited together: all of them, or (rPDP) those of one budget, tested at ``confidence``
    (with several groups, the audit's confidence split between them). A group of fewer than two canaries has no
    bound, and one whose included or excluded scores cannot be fitted (fewer than two, or all equal) no estimate."""

    budget: float | None
    claimed_epsilon: float | None
    confidence: float
    bound: AuditBound | None
    estimate: GaussianEstimate | None
    scores: np.ndarray
    included: np.ndarray

    @property
    def lower_bound(self) -> float:
        """The group's bound (0, the trivial one, where it has too few canaries for any)."""
        return 0.0 if self.bound is None else self.bound.epsilon

    def to_json(self) -> dict[str, Any]:
        bound, estimate = self.bound, self.estimate
        report = {
            **({} if self.budget is None else {"budget": self.budget}),
            "claimed_epsilon": self.claimed_epsilon,
            "empirical_epsilon_lower_bound": self.lower_bound,
            "confidence": self.confidence,
            "estimate": None if estimate is None else finite_or_none(estimate.epsilon),
            "canaries": int(self.scores.size),
            "included": int(self.included.sum()),
        }
        if bound is not None:
            report.update(guesses=bound.guesses, correct=bound.correct, per_guess_count_confidence=bound.per_test_confidence,
                          guess_counts_tried=[{"guesses": k, "correct": v, "epsilon": e} for k, v, e in bound.candidates])
        if estimate is not None:
            report["estimate_fit"] = {"mean_included": estimate.mu_observed, "std_included": estimate.std_observed,
                                      "mean_excluded": estimate.mu_unobserved, "std_excluded": estimate.std_unobserved}
        return report


@dataclass(frozen=True)
class AuditReport:
    """An audit's groups, the claims it checks and the audited run's result."""

    scenario: Scenario
    unit: str
    seed: int
    delta: float
    claims: Mapping[str, float | str | None]
    groups: tuple[AuditGroup, ...]
    result: RunResult

    @property
    def lower_bound(self) -> float:
        """The largest of the groups' bounds: valid at the audit's confidence, which the groups split (Bonferroni)."""
        return max(group.lower_bound for group in self.groups)

    def to_json(self) -> dict[str, Any]:
        audit = self.scenario.audit
        headline = max(self.groups, key=lambda group: group.lower_bound)
        report = {
            "empirical_epsilon_lower_bound": self.lower_bound,
            "confidence": audit.confidence,
            "estimate": headline.to_json()["estimate"],
            "estimate_note": "Andrew et al. 2024's Gaussian fit: an estimate, not a bound",
            **self.claims,
            "delta": self.delta,
            "canaries": audit.canaries,
            "guesses": None if headline.bound is None else headline.bound.guesses,
            "correct": None if headline.bound is None else headline.bound.correct,
            "unit": self.unit,
            "kind": audit.kind,
            "view": VIEW,
            "score": SCORES[audit.kind],
            "guess_counts": "a grid fixed before scoring (from M only); each count tested at level (1 - confidence) / "
                            "(grid size x groups), Bonferroni, and the largest bound reported",
            "seed": self.seed,
        }
        if len(self.groups) > 1 or self.groups[0].budget is not None:
            report["levels"] = [group.to_json() for group in self.groups]
        else:
            report["details"] = self.groups[0].to_json()
        return report

    def headline(self) -> str:
        claim = self.claims.get("claimed_epsilon")
        claimed = "no claim" if claim is None else f"claimed epsilon {claim:.4g}"
        line = (f"audit ({self.unit} canaries, {self.scenario.audit.kind}): epsilon >= {self.lower_bound:.3g} at "
                f"{self.scenario.audit.confidence:g} confidence, delta = {self.delta:g} ({claimed})")
        levels = [f"budget {g.budget:g}: >= {g.lower_bound:.3g}" for g in self.groups if g.budget is not None]
        return line + ("; " + ", ".join(levels) if levels else "")
