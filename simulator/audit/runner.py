"""``privsilo audit``: run a scenario with canaries and turn what the server sees into lower bounds on epsilon.

The run is the scenario's own (secure aggregation, client sampling and the mechanism's noise as configured),
with the audit's canaries hosted by the silos (``privsilo.simulator.audit.canaries``). The adversary's view
(``audit.view``) is the final global model, the weakest of the threat model's server views, or, where secure
aggregation is off, each silo's uploads: a canary is scored against the sum over the rounds of its host silo's
uploads, read as model changes (``UploadSums``), or, with ``audit.score: likelihood`` (DP-SGD), with the
subsampled Gaussian's log-likelihood ratio of each round's upload, added over the rounds
(``privsilo.simulator.audit.scores``). Scoring each round's aggregate would add nothing: the aggregates sum to the final
model.
Each group of canaries (all of them; per privacy level for rPDP) gives Steinke et al.'s one-run lower bound (null:
(epsilon, delta)-DP), Mahloujifar et al.'s f-DP one (null: mu-Gaussian DP) and Andrew et al.'s Gaussian-fit
estimate ([`privsilo.simulator.audit.bounds`][privsilo.simulator.audit.bounds]), each bound with its ceiling; the f-DP bound on mu is set
against the mechanism's own mu* ([`privsilo.simulator.audit.mechanism_mu`][privsilo.simulator.audit.mechanism_mu]).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from privsilo.simulator.audit.bounds import fdp_one_run_audit, gaussian_fit_estimate, one_run_audit
from privsilo.simulator.audit.canaries import CanaryPlan
from privsilo.simulator.audit.directions import dirac_coordinates
from privsilo.simulator.audit.mechanism_mu import mechanism_mu
from privsilo.simulator.audit.results import AuditGroup, AuditReport
from privsilo.simulator.audit.scores import UploadLikelihoods, uploaded_changes
from privsilo.simulator.data import Dataset
from privsilo.simulator.engine.results import RunResult
from privsilo.simulator.scenario import Scenario, audit_unit, audit_view, resolve_scenario, with_changes

# The delta of the bound for a mechanism that reports none (`none`): the default delta of the DP mechanisms.
DELTA_WITHOUT_GUARANTEE = 1e-5


def with_audit_block(scenario: Scenario) -> Scenario:
    """The scenario with an ``audit`` block (the defaults where it has none), validated."""
    if scenario.audit is not None:
        return scenario
    return with_changes(scenario, {"audit": {}})


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
    from privsilo.simulator.data.sources import scenario_dataset
    from privsilo.simulator.engine import run

    scenario = with_audit_block(resolve_scenario(scenario, overrides))
    dataset = scenario_dataset(scenario.data, seed=scenario.seed)
    plan = CanaryPlan.draw(scenario, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes)
    plan = replace(plan, coordinates=dirac_coordinates(scenario, dataset, seed=plan.seed))
    uploads = _upload_scorer(scenario, plan)
    result = run(scenario, address=address, progress=progress, canaries=plan.by_silo(), on_round=uploads)
    scores = _final_model_scores(scenario, plan, result, dataset) if uploads is None else _upload_scores(scenario, plan, uploads)
    report = _report(scenario, plan, result, scores)
    if out_dir is not None:
        from privsilo.simulator.audit.outputs import write_audit
        from privsilo.simulator.run_dir.invocation import invocation as api_invocation

        write_audit(report, Path(out_dir), invocation=invocation or api_invocation(None, overrides))
    return report


def _report(scenario: Scenario, plan: CanaryPlan, result: RunResult, scores: np.ndarray) -> AuditReport:
    unit = audit_unit(scenario)
    privacy = result.privacy
    delta = privacy.get("delta") or DELTA_WITHOUT_GUARANTEE
    confidence = scenario.audit.confidence
    claims = {"claimed_epsilon": privacy.get("epsilon")}
    for key in ("epsilon_rdp", "epsilon_pld"):
        if key in privacy:
            claims[f"claimed_{key}"] = privacy[key]
    hosts = [str(int(silo)) for silo in np.unique(plan.hosts[plan.included])]
    claims.update(scenario.mechanism.plugin.audit_claims(privacy, hosts))
    plugin = scenario.mechanism.plugin
    if plan.budgets is None:
        groups = (_group(scores, plan.included, budget=None, claim=claims["claimed_epsilon"], delta=delta, confidence=confidence,
                         mu_star=mechanism_mu(plugin, result, claims)),)
    else:  # one bound per level; the levels split the confidence, so that their largest bound keeps it
        levels = np.unique(plan.budgets)
        split = 1.0 - (1.0 - confidence) / levels.size
        groups = tuple(_group(scores[plan.budgets == b], plan.included[plan.budgets == b], budget=float(b), claim=float(b),
                              delta=delta, confidence=split, mu_star=mechanism_mu(plugin, result, claims, budget=float(b)))
                       for b in levels)
    return AuditReport(scenario=scenario, unit=unit, view=audit_view(scenario), seed=plan.seed, delta=delta, claims=claims,
                       groups=groups, result=result, mu_star_basis=plugin.gdp_mu_star_basis())


def _group(scores: np.ndarray, included: np.ndarray, *, budget: float | None, claim: float | None, mu_star: float | None,
           delta: float, confidence: float) -> AuditGroup:
    bound = one_run_audit(scores, included, delta=delta, confidence=confidence) if scores.size >= 2 else None
    gdp_bound = fdp_one_run_audit(scores, included, confidence=confidence) if scores.size >= 2 else None
    observed, unobserved = scores[included], scores[~included]
    fits = min(observed.size, unobserved.size) >= 2 and np.ptp(observed) > 0 and np.ptp(unobserved) > 0
    estimate = gaussian_fit_estimate(observed, unobserved, delta) if fits else None
    return AuditGroup(budget=budget, claimed_epsilon=claim, mu_star=mu_star, confidence=confidence, bound=bound, gdp_bound=gdp_bound,
                      estimate=estimate, scores=scores, included=included)


class UploadSums:
    """Called after each round (``run``'s ``on_round``): adds each silo's upload in the server's inbox, FedAvg's
    ``[weight x delta, weight]`` read as ``delta``, to that silo's sum over the rounds."""

    def __init__(self) -> None:
        self.sums: dict[int, np.ndarray] = {}

    def __call__(self, federation: Any) -> None:
        for silo, delta in uploaded_changes(federation):
            self.sums[silo] = delta if silo not in self.sums else self.sums[silo] + delta


def _upload_scorer(scenario: Scenario, plan: CanaryPlan) -> UploadSums | UploadLikelihoods | None:
    """What reads the uploads after each round (``audit.score``), None in the final model's view."""
    if audit_view(scenario) != "uploads":
        return None
    return UploadLikelihoods(scenario, plan) if scenario.audit.score == "likelihood" else UploadSums()


def _upload_scores(scenario: Scenario, plan: CanaryPlan, uploads: UploadSums | UploadLikelihoods) -> np.ndarray:
    """Every canary's score from its host silo's uploads: the likelihood scores as added round by round, or the
    cosine with the uploads summed over the rounds (the sign as in ``_final_model_scores``)."""
    if isinstance(uploads, UploadLikelihoods):
        return uploads.scores
    sign = -1.0 if audit_unit(scenario) == "record" else 1.0
    return plan.scores_by_host({silo: sign * total for silo, total in uploads.sums.items()})


def _final_model_scores(scenario: Scenario, plan: CanaryPlan, result: RunResult, dataset: Dataset) -> np.ndarray:
    """Every canary's score from the final model(s) (higher: more likely included; see ``privsilo.simulator.audit.canaries``):
    with several hypotheses (IFCA) a canary's largest over them, a function of the final models only."""
    import torch

    models = _final_models(scenario, result, dataset)
    if scenario.audit.kind == "input":
        (model,) = models
        model.eval()
        with torch.no_grad():
            logits = model(torch.as_tensor(plan.features, dtype=torch.as_tensor(dataset.x_train[:1]).dtype))
            loss = torch.nn.functional.cross_entropy(logits, torch.as_tensor(plan.labels), reduction="none")
        return -loss.double().numpy()
    from privsilo.mechanisms.base import model_to_vector
    from privsilo.simulator.data.silos import run_seeds
    from privsilo.simulator.engine import initial_state

    initial = initial_state(scenario, dataset, run_seeds(scenario.seed, scenario.data.silos)["init"])
    # a canary record's direction is a gradient, which training descends; a user's or a client's is an update
    sign = -1.0 if audit_unit(scenario) == "record" else 1.0
    return np.max([plan.scores(sign * (model_to_vector(model) - start)) for model, start in zip(models, initial, strict=True)], axis=0)


def _final_models(scenario: Scenario, result: RunResult, dataset: Dataset) -> list[Any]:
    """The final global model of each hypothesis (one for most mechanisms; a personalised run's are
    ``personalisation.state_dicts``)."""
    from privsilo.simulator.models.builtin import build_scenario_model

    finals = [result.model_state] if result.personalisation is None else result.personalisation["state_dicts"]
    models = []
    for state in finals:
        model = build_scenario_model(scenario.model, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes)
        model.load_state_dict(dict(state))
        models.append(model)
    return models
