"""Which audits a scenario can run, checked before anything is loaded: the canary unit, kind and count."""
from __future__ import annotations

from typing import Any

from mechanisms.registry import mechanism_class
from simulator.errors import ScenarioError

# The functions take a validated ``simulator.scenario.Scenario`` (typed Any: the scenario's validation calls them,
# and simulator.scenario must not be imported back).
Scenario = Any

# The canaries each mechanism can host, by (mechanism, unit): the unit it protects (and `none`'s clients).
SUPPORTED_UNITS: dict[str, tuple[str, ...]] = {
    "none": ("client",),
    "dp_sgd": ("record",),
    "rpdp": ("record",),
    "uldp": ("user",),
    "pldp": ("client",),
    "dprivacy": ("client",),
    "dp_fedavg": ("client",),
}
ULDP_AUDITED_VARIANTS = ("avg", "avg_w", "sgd")
INPUT_CANARY_MECHANISMS = ("dp_sgd",)
UPLOADS_VIEW_MECHANISMS = ("none", "dp_sgd", "rpdp")  # uploads [weight x delta, weight] with the canaries inside
MAX_CANARY_CLIENTS_PER_SILO = 1000


def audit_unit(scenario: Scenario) -> str:
    """The unit of a scenario's audit: ``audit.unit``, else the one its mechanism protects (clients for ``none``)."""
    audit = scenario.audit
    if audit is not None and audit.unit is not None:
        return audit.unit
    return mechanism_class(scenario.mechanism.name).privacy_unit or "client"


def check_audit(scenario: Scenario, *, train_records: int | None) -> None:
    """Refuse (``ScenarioError``, exit 2) an audit the mechanism cannot host or the federation cannot hold."""
    audit, name = scenario.audit, scenario.mechanism.name
    unit = audit_unit(scenario)
    units = SUPPORTED_UNITS.get(name, ())
    if not units:
        raise ScenarioError("mechanism.name", name, f"audits run with {', '.join(SUPPORTED_UNITS)}")
    if unit not in units:
        protected = mechanism_class(name).privacy_unit or "nothing"
        raise ScenarioError("audit.unit", unit, f"'{name}' protects {protected}; audit unit allowed: {', '.join(units)}")
    if audit.kind == "input" and (name not in INPUT_CANARY_MECHANISMS or unit != "record"):
        raise ScenarioError("audit.kind", "input", f"input canaries are records of {', '.join(INPUT_CANARY_MECHANISMS)}; use gradient")
    if audit.kind == "input" and scenario.mechanism.params.sampling_rate is None:
        raise ScenarioError("mechanism.sampling_rate", None, "input canaries join the silos' records: set a fixed rate, "
                            "else q = batch_size / records would change with the canaries included")
    if audit.kind == "input" and audit.canary_direction != "gaussian":
        raise ScenarioError("audit.canary_direction", audit.canary_direction, "input canaries are records, not directions: "
                            "use gaussian, or kind gradient")
    if audit.view == "uploads" and (reason := uploads_view_refusal(scenario)):
        raise ScenarioError("audit.view", "uploads", reason)
    if audit.score == "likelihood" and (reason := likelihood_score_refusal(scenario)):
        raise ScenarioError("audit.score", "likelihood", reason)
    if name == "rpdp":
        _check_rpdp(scenario)
    if name == "uldp":
        _check_uldp(scenario)
    if name == "dp_fedavg" and scenario.federation.client_rate < 1.0:
        raise ScenarioError("federation.client_rate", scenario.federation.client_rate, "a dp_fedavg audit's canary clients "
                            "ride with their host silo, not sampled on their own as the claim's amplification assumes: set it to 1.0")
    capacity = _capacity(scenario, unit, train_records=train_records)
    if capacity is not None and audit.canaries > capacity:
        raise ScenarioError("audit.canaries", audit.canaries, f"at most {capacity} ({_capacity_reason(unit)})")


def uploads_view_refusal(scenario: Scenario) -> str | None:
    """Why the server cannot score the canaries against their host silos' uploads (None where it can)."""
    if scenario.protocol.secure_aggregation:
        return "under protocol.secure_aggregation the server sees only the sum of the uploads: use final_model or auto"
    if scenario.mechanism.name not in UPLOADS_VIEW_MECHANISMS:
        return f"the uploads view reads FedAvg uploads of {', '.join(UPLOADS_VIEW_MECHANISMS)}: use final_model or auto"
    if scenario.audit.kind != "gradient":
        return "input canaries are scored by the final model's loss: use final_model or auto"
    return None


def likelihood_score_refusal(scenario: Scenario) -> str | None:
    """Why a scenario's canaries cannot be scored with the subsampled Gaussian's per-round likelihood ratio
    (``simulator.audit.scores``; None where they can)."""
    if audit_view(scenario) != "uploads":
        return "the likelihood score reads each round's uploads: use audit.view uploads (or auto without secure aggregation), or score sum"
    params = scenario.mechanism.params
    if scenario.mechanism.name != "dp_sgd":
        return "the likelihood score models dp_sgd's canary records: use score sum"
    if params.noise_multiplier == 0.0:
        return "the likelihood score weighs rounds by the mechanism's noise, and noise_multiplier is 0: use score sum"
    return None


def audit_view(scenario: Scenario) -> str:
    """The view an audit scores: ``audit.view``, with ``auto`` the uploads where the threat model lets the server
    see them, else the final model."""
    view = scenario.audit.view
    if view == "auto":
        return "final_model" if uploads_view_refusal(scenario) else "uploads"
    return view


def _capacity(scenario: Scenario, unit: str, *, train_records: int | None) -> int | None:
    if unit == "client":
        return MAX_CANARY_CLIENTS_PER_SILO * scenario.data.silos
    if unit == "user":
        return None if scenario.data.users is None else scenario.data.users.count
    if scenario.audit.kind == "gradient":  # a gradient canary is a direction inside the mechanism, not a record
        return None
    limits = [train_records]
    if scenario.data.max_records_per_silo is not None:
        limits.append(scenario.data.max_records_per_silo * scenario.data.silos)
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def _capacity_reason(unit: str) -> str:
    return {
        "client": f"{MAX_CANARY_CLIENTS_PER_SILO} canary clients per silo",
        "user": "one canary per user of data.users.count",
        "record": "one input canary per training record the silos hold",
    }[unit]


def _check_rpdp(scenario: Scenario) -> None:
    """rPDP's audit is per privacy level: the canaries need budgets of a few discrete levels and rPDP's own rates."""
    params = scenario.mechanism.params
    if params.variant != "rpdp":
        raise ScenarioError("mechanism.variant", params.variant, "audits of rpdp run its own variant 'rpdp' (the baselines' rates are not per budget)")
    if params.budgets.get("distribution") != "three_levels":
        raise ScenarioError("mechanism.budgets", params.budgets.get("distribution"),
                            "an rpdp audit bounds each privacy level apart: use distribution three_levels")


def _check_uldp(scenario: Scenario) -> None:
    """Canary users are per-user clipped deltas: the per-user variants, with weights computed in the clear."""
    params = scenario.mechanism.params
    if params.variant not in ULDP_AUDITED_VARIANTS:
        raise ScenarioError("mechanism.variant", params.variant, f"uldp audits insert canary users into per-user training: use {', '.join(ULDP_AUDITED_VARIANTS)}")
    if params.weighting != "plain":
        raise ScenarioError("mechanism.weighting", params.weighting,
                            "an audit weights its canary users in the clear: use plain (the private weighting protocol releases the same sum)")
