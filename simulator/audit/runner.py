"""``privsilo audit``: run a scenario with canaries and turn the final model into a lower bound on epsilon.

The run is the scenario's own (secure aggregation, client sampling and the mechanism's noise as configured),
with the audit's canaries hosted by the silos (:mod:`simulator.audit.canaries`). The adversary's view is the
final global model only, the weakest of the threat model's server views, so a bound holds for every stronger one.
Each group of canaries (all of them; per privacy level for rPDP) gives Steinke et al.'s one-run lower bound and
Andrew et al.'s Gaussian-fit estimate (:mod:`simulator.audit.bounds`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from simulator.audit.bounds import AuditBound, GaussianEstimate, gaussian_fit_estimate, one_run_audit
from simulator.audit.canaries import CanaryPlan
from simulator.audit.client_claims import client_claims
from simulator.audit.config import audit_unit
from simulator.results import RunResult
from simulator.scenario import Scenario, resolve_scenario, validate_scenario

# The delta of the bound for a mechanism that reports none (`none`): the default delta of the DP mechanisms.
DELTA_WITHOUT_GUARANTEE = 1e-5
VIEW = "final model"
SCORE = ("cosine between the final model's change (its negative for record canaries, whose direction is a gradient) and the "
         "canary's direction; the largest over the hypotheses where the mechanism keeps several")


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
    delta: float
    claims: Mapping[str, float | str | None]
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
            "score": SCORE,
            "guess_counts": "Bonferroni over a grid fixed before scoring: each count tested at level (1 - confidence) / count of the grid",
            "seed": CanaryPlan.draw(self.scenario).seed,
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


def with_audit_block(scenario: Scenario) -> Scenario:
    """The scenario with an ``audit`` block (the defaults where it has none), validated."""
    if scenario.audit is not None:
        return scenario
    return validate_scenario({**scenario.to_dict(), "audit": {}})


def audit(
    scenario: Scenario | Mapping[str, Any] | str | Path,
    *,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
    address: str | None = None,
    progress: bool = False,
    invocation: Mapping[str, Any] | None = None,
) -> AuditReport:
    """Audit a scenario (its ``audit`` block, defaults where absent); write the run's files and ``audit.json`` and
    ``audit.png`` to ``out_dir`` if given, all or nothing."""
    from simulator.engine import run

    scenario = with_audit_block(resolve_scenario(scenario, overrides))
    plan = CanaryPlan.draw(scenario)
    result = run(scenario, address=address, progress=progress, canaries=plan.by_silo())
    report = _report(scenario, plan, result)
    if out_dir is not None:
        from simulator.audit.outputs import write_audit
        from simulator.invocation import invocation as api_invocation

        write_audit(report, Path(out_dir), invocation=invocation or api_invocation(None, overrides))
    return report


def _report(scenario: Scenario, plan: CanaryPlan, result: RunResult) -> AuditReport:
    unit = audit_unit(scenario)
    # a canary record's direction is a gradient, which training descends; a user's or a client's is an update
    # several hypotheses (IFCA): a canary's score is its largest over them, a function of the final models only
    sign = -1.0 if unit == "record" else 1.0
    scores = np.max([plan.scores(change * sign) for change in _model_changes(scenario, result)], axis=0)
    privacy = result.privacy
    delta = privacy.get("delta") or DELTA_WITHOUT_GUARANTEE
    confidence = scenario.audit.confidence
    claims = {"claimed_epsilon": privacy.get("epsilon")}
    for key in ("epsilon_rdp", "epsilon_pld"):
        if key in privacy:
            claims[f"claimed_{key}"] = privacy[key]
    claims.update(client_claims(scenario.mechanism.name, privacy, hosts=np.unique(plan.hosts[plan.included])))
    if plan.budgets is None:
        groups = (_group(scores, plan.included, budget=None, claim=claims["claimed_epsilon"], delta=delta, confidence=confidence),)
    else:
        groups = tuple(_group(scores[plan.budgets == b], plan.included[plan.budgets == b], budget=float(b), claim=float(b),
                              delta=delta, confidence=confidence) for b in np.unique(plan.budgets))
    return AuditReport(scenario=scenario, unit=unit, delta=delta, claims=claims, groups=groups, result=result)


def _group(scores: np.ndarray, included: np.ndarray, *, budget: float | None, claim: float | None, delta: float,
           confidence: float) -> AuditGroup:
    bound = one_run_audit(scores, included, delta=delta, confidence=confidence)
    estimate = gaussian_fit_estimate(scores[included], scores[~included], delta)
    return AuditGroup(budget=budget, claimed_epsilon=claim, bound=bound, estimate=estimate, scores=scores, included=included)


def _model_changes(scenario: Scenario, result: RunResult) -> tuple[np.ndarray, ...]:
    """``theta_T - theta_0`` of each hypothesis of the global state (one for most mechanisms; a personalised
    run's final hypotheses are ``personalisation.state_dicts``), flat vectors in ``model_to_vector`` order."""
    from mechanisms.base import model_to_vector
    from simulator.data.silos import run_seeds
    from simulator.data.sources import scenario_dataset
    from simulator.engine import _initial_state
    from simulator.models import build_scenario_model

    dataset = scenario_dataset(scenario.data, seed=scenario.seed)
    initial = _initial_state(scenario, dataset, run_seeds(scenario.seed, scenario.data.silos)["init"])
    finals = [result.model_state] if result.personalisation is None else result.personalisation["state_dicts"]
    model = build_scenario_model(scenario.model, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes)
    changes = []
    for state, start in zip(finals, initial, strict=True):
        model.load_state_dict(dict(state))
        changes.append(model_to_vector(model) - start)
    return tuple(changes)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
