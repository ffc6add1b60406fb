"""A scenario from a mapping, a file or a validated scenario: the blocks, the mechanism's own parameters and the
cross-field checks, in that order; changes merged into a scenario's explicit settings and validated again."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from privsilo.mechanisms.registry import mechanism_class, mechanism_names
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario.checks import _check_consistency
from privsilo.simulator.scenario.files import apply_overrides, load_scenario_file
from privsilo.simulator.scenario.pydantic_errors import _to_scenario_error
from privsilo.simulator.scenario.schema import MechanismConfig, Scenario, _name_alone


def resolve_scenario(scenario: Scenario | Mapping[str, Any] | str | Path, overrides: list[str] | None = None) -> Scenario:
    """Accept a Scenario, a raw mapping or a YAML path; apply ``key=value`` overrides; validate."""
    if isinstance(scenario, Scenario):
        return _revalidated(scenario, apply_overrides(scenario.explicit_dict(), overrides)) if overrides else scenario
    raw = load_scenario_file(scenario) if isinstance(scenario, (str, Path)) else dict(scenario)
    return validate_scenario(apply_overrides(raw, overrides or []))


def with_changes(scenario: Scenario, changes: Mapping[str, Any]) -> Scenario:
    """``scenario`` with ``changes`` (blocks of keys, e.g. ``{"ray": {"address": ...}}``) merged into its explicit
    settings and checked again: what it left at the defaults stays at the defaults, not given."""
    return _revalidated(scenario, _merged(scenario.explicit_dict(), changes))


def _merged(raw: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(raw)
    for key, value in changes.items():
        old = merged.get(key)
        merged[key] = _merged(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return merged


def _revalidated(scenario: Scenario, raw: Mapping[str, Any]) -> Scenario:
    """``raw`` (a changed form of ``scenario``'s explicit settings) validated, with the objects ``scenario`` carries."""
    return validate_scenario(raw, model=scenario.model.factory, dataset=scenario.data.source)


def validate_scenario(raw: Mapping[str, Any] | Scenario, *, model: Any = None, dataset: Any = None) -> Scenario:
    """Validate a raw scenario mapping; raise ScenarioError on the first problem.

    ``model`` (a factory returning an ``nn.Module``) and ``dataset`` (a loader, its return value or a ``Dataset``)
    are objects of the user's, attached to the ``model`` and ``data`` blocks (see ``privsilo.run``).
    """
    if isinstance(raw, Scenario) and model is None and dataset is None:
        return raw
    raw = raw.explicit_dict() if isinstance(raw, Scenario) else dict(raw)
    mechanism_raw = raw.pop("mechanism", {})
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as exc:
        raise _to_scenario_error(exc, Scenario) from None
    if model is not None:
        scenario.model._factory = model
    if dataset is not None:
        scenario.data._source = dataset
    scenario = scenario.model_copy(update={"mechanism": _validate_mechanism(mechanism_raw)})
    scenario = _with_attack_batch(scenario)
    _check_consistency(scenario)
    return scenario


def with_attack_block(scenario: Scenario, *, address: str | None = None) -> Scenario:
    """The scenario with an ``attack`` block (the defaults where it has none) and, if given, ``ray.address``."""
    if scenario.attack is not None and not address:
        return scenario
    return with_changes(scenario, {"attack": {}, **({"ray": {"address": address}} if address else {})})


def _with_attack_batch(scenario: Scenario) -> Scenario:
    """``attack.batch_size``, when set, is the batch of every silo's local steps in the run: it replaces
    ``federation.batch_size`` (so the attacked upload and a sweep's accuracy come from the same training)."""
    attack = scenario.attack
    if attack is None or attack.batch_size is None or attack.batch_size == scenario.federation.batch_size:
        return scenario
    return scenario.model_copy(update={"federation": scenario.federation.model_copy(update={"batch_size": attack.batch_size})})


def _validate_mechanism(raw: Any) -> MechanismConfig:
    raw = _name_alone(raw)
    if not isinstance(raw, dict):
        raise ScenarioError("mechanism", raw, "must be a mechanism's name or a mapping with at least a 'name' key")
    params = dict(raw)
    name = params.pop("name", "none")
    if name not in mechanism_names():
        raise ScenarioError("mechanism.name", name, f"allowed: {', '.join(mechanism_names())}")
    params_class = mechanism_class(name).Params
    try:
        validated = params_class.model_validate(params)
    except ValidationError as exc:
        raise _to_scenario_error(exc, params_class, prefix=("mechanism",)) from None
    return MechanismConfig(name=name, params=validated)
