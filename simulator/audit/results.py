"""What an audit found: per group of canaries the bound and the estimate, and the claims they are set against."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from privsilo.simulator.audit.bounds import AuditBound, GaussianEstimate, GdpAuditBound
from privsilo.simulator.run_dir.writers import finite_or_none
from privsilo.simulator.engine.results import RunResult
from privsilo.simulator.scenario import Scenario

NULLS = {
    "counting": "(epsilon, delta)-DP per canary (Steinke, Nasr and Jagielski 2023): a bound above epsilon refutes the claim",
    "gdp": ("mu-Gaussian DP per canary (Mahloujifar, Melis and Chaudhuri 2025): a bound on mu, set against the mechanism's "
            "own mu* (the smallest mu whose trade-off curve it dominates), not on epsilon"),
}
GDP_MEANING = ("the Gaussian-DP figure is a lower bound on mu, refuting the mechanism's privacy analysis only if above its own mu*; "
               "mu's epsilon is no lower bound on the (epsilon, delta) claim, since a mechanism that meets the claim can "
               "have a mu* whose epsilon exceeds it")
SCORES = {
    ("final_model", "gradient", "sum"): "cosine between the final model's change (its negative for record canaries, whose direction is a "
                                               "gradient) and the canary's direction; the largest over the hypotheses where the mechanism keeps several",
    ("final_model", "input", "sum"): "minus the final model's loss on the canary (a random Gaussian input with a random label)",
    ("uploads", "gradient", "sum"): "cosine between the canary's host silo's uploads, read as model changes and summed over the "
                                    "rounds (their negative for record canaries), and the canary's direction",
    ("uploads", "gradient", "likelihood"): "log-likelihood ratio of the subsampled Gaussian mechanism (in over out), summed over "
                                           "the rounds, of each round's host silo upload along minus the canary's direction, in "
                                           "units of one draw of the canary (batch_size / (lr C)); noise and rate from the scenario",
}


def testability(claim: float | None, ceiling: float, canaries: int, included: int) -> dict[str, Any]:
    """Whether an audit of ``canaries`` canaries, ``included`` of them included, whose bound cannot exceed ``ceiling``,
    could refute ``claim``: ``testable`` (None without a claim) and, when it could not, ``untestable_reason``."""
    if claim is None:
        return {"testable": None}
    if claim <= ceiling:
        return {"testable": True}
    return {"testable": False, "untestable_reason": (
        f"the claim {claim:.4g} is above the ceiling {ceiling:.4g}, the bound of perfectly separated scores with "
        f"{included} of {canaries} canaries included: no scores of this run can refute it (and no audit confirms a claim)")}


def ratio(bound: float | None, claim: float | None) -> float | None:
    """``bound / claim`` (None without both, or for a claim of 0 or inf): a tightness figure on one footing."""
    if bound is None or claim is None or not 0.0 < claim < float("inf"):
        return None
    return bound / claim


@dataclass(frozen=True)
class AuditGroup:
    """One set of canaries audited together: all of them, or (rPDP) those of one budget, tested at ``confidence``
    (with several groups, the audit's confidence split between them). A group of fewer than two canaries has no
    bound, and one whose included or excluded scores cannot be fitted (fewer than two, or all equal) no estimate."""

    budget: float | None
    claimed_epsilon: float | None
    mu_star: float | None  # the mechanism's own Gaussian-DP parameter (privsilo.simulator.audit.mechanism_mu), None where none
    confidence: float
    bound: AuditBound | None
    gdp_bound: GdpAuditBound | None
    estimate: GaussianEstimate | None
    scores: np.ndarray
    included: np.ndarray

    @property
    def lower_bound(self) -> float:
        """The group's bound (0, the trivial one, where it has too few canaries for any)."""
        return 0.0 if self.bound is None else self.bound.epsilon

    @property
    def ceiling(self) -> float:
        """The largest bound these canaries could give with this many included (perfectly separated scores; 0
        without a bound)."""
        return 0.0 if self.bound is None else self.bound.ceiling

    def testability(self) -> dict[str, Any]:
        """``testable`` (None without a claim) and, where the claim is above the ceiling, why not."""
        return testability(self.claimed_epsilon, self.ceiling, int(self.scores.size), int(self.included.sum()))

    def gdp_testable(self) -> bool | None:
        """Whether the Gaussian-DP bound could exceed mu* in this run (mu* at most its ceiling); None without both."""
        if self.gdp_bound is None or self.mu_star is None:
            return None
        return self.mu_star <= self.gdp_bound.ceiling_mu

    def signal_to_noise(self) -> float | None:
        """How far the included canaries' mean score lies above the excluded ones', in standard deviations of the
        excluded scores (which carry no canary: the data's and the other canaries' interference, and the noise);
        None without the Gaussian fits."""
        estimate = self.estimate
        if estimate is None:
            return None
        return finite_or_none((estimate.mu_observed - estimate.mu_unobserved) / estimate.std_unobserved)

    def _gdp_json(self) -> dict[str, Any] | None:
        """The f-DP bound's figures (None without a bound)."""
        gdp = self.gdp_bound
        if gdp is None:
            return None
        return {"null": NULLS["gdp"], "mu_lower_bound": gdp.mu, "mu_star": finite_or_none(self.mu_star),
                "mu_over_mu_star": ratio(gdp.mu, self.mu_star), "ceiling_mu": gdp.ceiling_mu, "testable": self.gdp_testable(),
                "guesses": gdp.guesses, "correct": gdp.correct,
                "guess_counts_tried": [{"guesses": k, "correct": v, "mu": mu} for k, v, mu in gdp.candidates]}

    def to_json(self) -> dict[str, Any]:
        bound, estimate = self.bound, self.estimate
        report = {
            **({} if self.budget is None else {"budget": self.budget}),
            "claimed_epsilon": self.claimed_epsilon,
            "empirical_epsilon_lower_bound": self.lower_bound,
            "empirical_epsilon_over_claim": ratio(self.lower_bound, self.claimed_epsilon),
            "confidence": self.confidence,
            "estimate": None if estimate is None else finite_or_none(estimate.epsilon),
            "canaries": int(self.scores.size),
            "included": int(self.included.sum()),
            "ceiling": self.ceiling,
            **self.testability(),
        }
        if bound is not None:
            report.update(guesses=bound.guesses, correct=bound.correct, per_guess_count_confidence=bound.per_test_confidence,
                          guess_counts_tried=[{"guesses": k, "correct": v, "epsilon": e} for k, v, e in bound.candidates])
        report["gdp"] = self._gdp_json()
        report["signal_to_noise"] = self.signal_to_noise()
        if estimate is not None:
            report["estimate_fit"] = {"mean_included": estimate.mu_observed, "std_included": estimate.std_observed,
                                      "mean_excluded": estimate.mu_unobserved, "std_excluded": estimate.std_unobserved}
        return report


@dataclass(frozen=True)
class AuditReport:
    """An audit's groups, the claims it checks and the audited run's result."""

    scenario: Scenario
    unit: str
    view: str  # final_model or uploads (audit.view, auto resolved)
    seed: int
    delta: float
    claims: Mapping[str, float | str | None]
    groups: tuple[AuditGroup, ...]
    result: RunResult
    mu_star_basis: str  # what the groups' mu* was computed from (privsilo.simulator.audit.mechanism_mu)

    @property
    def lower_bound(self) -> float:
        """The largest of the groups' bounds: valid at the audit's confidence, which the groups split (Bonferroni)."""
        return max(group.lower_bound for group in self.groups)

    @property
    def ceiling(self) -> float:
        """The largest bound the audit could give: the largest of the groups' ceilings."""
        return max(group.ceiling for group in self.groups)

    def testability(self) -> dict[str, Any]:
        """The headline claim against the audit's ceiling; with several groups (rPDP's levels) the claim is
        testable if some level's is (each level's own verdict is in ``levels``)."""
        if len(self.groups) > 1:
            verdicts = [group.testability() for group in self.groups]
            if any(verdict["testable"] for verdict in verdicts):
                return {"testable": True}
            reasons = [f"budget {g.budget:g}: {v['untestable_reason']}" for g, v in zip(self.groups, verdicts) if v["testable"] is False]
            return {"testable": False, "untestable_reason": "; ".join(reasons)} if reasons else {"testable": None}
        group = self.groups[0]
        return testability(self.claims.get("claimed_epsilon"), self.ceiling, int(group.scores.size), int(group.included.sum()))

    @property
    def joint_confidence(self) -> float:
        """The confidence of the two bounds together (a union bound over their two failure chances)."""
        return round(max(0.0, 1.0 - 2.0 * (1.0 - self.scenario.audit.confidence)), 12)

    def _gdp_group(self) -> AuditGroup | None:
        """The group with the largest Gaussian-DP bound on mu (None where no group has one)."""
        return max((g for g in self.groups if g.gdp_bound is not None), key=lambda g: g.gdp_bound.mu, default=None)

    def to_json(self) -> dict[str, Any]:
        audit = self.scenario.audit
        headline = max(self.groups, key=lambda group: group.lower_bound)
        gdp_group = self._gdp_group()
        gdp = None if gdp_group is None else gdp_group.gdp_bound
        mu_star = None if gdp_group is None else gdp_group.mu_star
        report = {
            "empirical_epsilon_lower_bound": self.lower_bound,
            "empirical_epsilon_over_claim": ratio(self.lower_bound, self.claims.get("claimed_epsilon")),
            "null": NULLS["counting"],
            "gdp_mu_lower_bound": None if gdp is None else gdp.mu,
            "gdp_mu_star": finite_or_none(mu_star),
            "gdp_mu_over_mu_star": None if gdp is None else ratio(gdp.mu, mu_star),
            "gdp_mu_star_basis": self.mu_star_basis,
            "gdp_ceiling_mu": None if gdp is None else gdp.ceiling_mu,
            "gdp_testable": None if gdp_group is None else gdp_group.gdp_testable(),
            "gdp_null": NULLS["gdp"],
            "gdp_meaning": GDP_MEANING,
            "confidence": audit.confidence,
            "joint_confidence": self.joint_confidence,
            "estimate": headline.to_json()["estimate"],
            "signal_to_noise": headline.signal_to_noise(),
            "ceiling": self.ceiling,
            **self.testability(),
            "estimate_note": "Andrew et al. 2024's Gaussian fit: an estimate, not a bound",
            **self.claims,
            "delta": self.delta,
            "canaries": audit.canaries,
            "guesses": None if headline.bound is None else headline.bound.guesses,
            "correct": None if headline.bound is None else headline.bound.correct,
            "unit": self.unit,
            "kind": audit.kind,
            "canary_direction": audit.canary_direction,
            "view": self.view,
            "score": SCORES[self.view, audit.kind, audit.score],
            "score_kind": audit.score,
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
        line = (f"audit ({self.unit} canaries, {self.scenario.audit.kind}, {self.view} view): epsilon >= {self.lower_bound:.3g} at "
                f"{self.scenario.audit.confidence:g} confidence, delta = {self.delta:g} ({claimed}; ceiling "
                f"{self.ceiling:.3g}{'' if self.testability()['testable'] is not False else ', claim untestable'}); "
                f"{self._gdp_phrase()} (each bound holds alone at that confidence; both together at {self.joint_confidence:g})")
        levels = [f"budget {g.budget:g}: >= {g.lower_bound:.3g}" for g in self.groups if g.budget is not None]
        return line + ("; " + ", ".join(levels) if levels else "")

    def _gdp_phrase(self) -> str:
        """The Gaussian-DP bound in mu beside the mechanism's own mu* (in mu only: its epsilon is no bound on the
        claim)."""
        group = self._gdp_group()
        mu = 0.0 if group is None else group.gdp_bound.mu
        phrase = f"not mu-GDP for mu < {mu:.3g}"
        star = None if group is None else finite_or_none(group.mu_star)
        if star is None:
            return phrase + " (no mu* for this mechanism to set it against)"
        share = ratio(mu, star)
        return phrase + (f" against the mechanism's own mu* {star:.3g} ({share:.2f} of it; only a bound above mu* refutes)"
                         if share is not None else f" against the mechanism's own mu* {star:.3g}")
