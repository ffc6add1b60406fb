"""What an audit found: per group of canaries the bound and the estimate, and the claims they are set against."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from simulator.audit.bounds import AuditBound, GaussianEstimate
from simulator.results import RunResult
from simulator.scenario import Scenario

VIEW = "final model"
SCORES = {
    "gradient": "cosine between the final model's change (its negative for record canaries, whose direction is a gradient) and the canary's direction",
    "input": "minus the final model's loss on the canary (a random Gaussian input with a random label)",
}


@dataclass(frozen=True)
class AuditGroup:
    """One set of canaries audited together: all of them, or (rPDP) those of one budget."""

    budget: float | None
    claimed_epsilon: float | None
    bound: AuditBound
    estimate: GaussianEstimate
    scores: np.ndarray
    included: np.ndarray

    def to_json(self) -> dict[str, Any]:
        return {
            **({} if self.budget is None else {"budget": self.budget}),
            "claimed_epsilon": self.claimed_epsilon,
            "empirical_epsilon_lower_bound": self.bound.epsilon,
            "estimate": _finite_or_none(self.estimate.epsilon),
            "canaries": self.bound.canaries,
            "included": int(self.included.sum()),
            "guesses": self.bound.guesses,
            "correct": self.bound.correct,
            "guess_counts_tried": [{"guesses": k, "correct": v, "epsilon": e} for k, v, e in self.bound.candidates],
            "estimate_fit": {"mean_included": self.estimate.mu_observed, "std_included": self.estimate.std_observed,
                             "mean_excluded": self.estimate.mu_unobserved, "std_excluded": self.estimate.std_unobserved},
        }


@dataclass(frozen=True)
class AuditReport:
    """An audit's groups, the claims it checks and the audited run's result."""

    scenario: Scenario
    unit: str
    seed: int
    delta: float
    claims: Mapping[str, float | None]
    groups: tuple[AuditGroup, ...]
    result: RunResult

    @property
    def lower_bound(self) -> float:
        return max(group.bound.epsilon for group in self.groups)

    def to_json(self) -> dict[str, Any]:
        audit = self.scenario.audit
        headline = max(self.groups, key=lambda group: group.bound.epsilon)
        report = {
            "empirical_epsilon_lower_bound": self.lower_bound,
            "confidence": audit.confidence,
            "estimate": _finite_or_none(headline.estimate.epsilon),
            "estimate_note": "Andrew et al. 2024's Gaussian fit: an estimate, not a bound",
            **self.claims,
            "delta": self.delta,
            "canaries": audit.canaries,
            "guesses": headline.bound.guesses,
            "correct": headline.bound.correct,
            "unit": self.unit,
            "kind": audit.kind,
            "view": VIEW,
            "score": SCORES[audit.kind],
            "guess_counts": "Bonferroni over a grid fixed before scoring: each count tested at level (1 - confidence) / count of the grid",
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
        levels = [f"budget {g.budget:g}: >= {g.bound.epsilon:.3g}" for g in self.groups if g.budget is not None]
        return line + ("; " + ", ".join(levels) if levels else "")


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
