"""Scenario files: schema, defaults, loading, ``--set`` overrides and validation.

A scenario is a YAML mapping with the blocks ``name``, ``seed``, ``secure_rng``, ``data``, ``model``, ``federation``,
``mechanism``, ``protocol``, ``resources``, ``ray`` and, for gradient-inversion attacks, ``attack`` (every key is
documented in the scenario reference of the documentation). Validation
turns every problem into one [`ScenarioError`][privsilo.simulator.errors.ScenarioError] naming the field, the value and what is
allowed; a file that cannot be read as a YAML mapping is one [`ScenarioFileError`][privsilo.simulator.errors.ScenarioFileError] naming
the file (and the line and column of a YAML syntax error). Scripts rely on these key names: extend the schema,
never rename a key. This package loads neither torch nor Ray (``privsilo validate`` uses it).

Its modules: ``schema`` (the blocks), ``files`` (YAML and ``--set`` overrides), ``validation`` (the entry points),
``checks`` (the checks that span several fields) and ``pydantic_errors`` (pydantic's errors as one ``ScenarioError``).
"""
from __future__ import annotations

from privsilo.simulator.scenario.checks import (
    MAX_CANARY_CLIENTS_PER_SILO,
    SECURE_AGGREGATION_KEYS,
    attacked_epochs,
    audit_unit,
    audit_view,
    likelihood_score_refusal,
    secure_aggregation_codec,
    uploads_view_refusal,
)
from privsilo.simulator.scenario.files import DuplicateKeyError, apply_overrides, load_scenario_file, load_yaml
from privsilo.simulator.scenario.schema import (
    LATER_KEYS,
    ActorResources,
    AttackConfig,
    AuditConfig,
    CheckpointConfig,
    CrashConfig,
    DataConfig,
    FaultsConfig,
    FederationConfig,
    MechanismConfig,
    ModelConfig,
    ProtocolConfig,
    RayConfig,
    ResourcesConfig,
    Scenario,
    ServerOptimizerConfig,
    UsersConfig,
)
from privsilo.simulator.scenario.validation import resolve_scenario, validate_scenario, with_attack_block, with_changes

__all__ = [
    "LATER_KEYS", "MAX_CANARY_CLIENTS_PER_SILO", "SECURE_AGGREGATION_KEYS", "ActorResources", "AttackConfig", "AuditConfig",
    "CheckpointConfig", "CrashConfig", "DataConfig", "DuplicateKeyError", "FaultsConfig", "FederationConfig",
    "MechanismConfig", "ModelConfig", "ProtocolConfig", "RayConfig", "ResourcesConfig", "Scenario", "ServerOptimizerConfig",
    "UsersConfig", "apply_overrides", "attacked_epochs", "audit_unit", "audit_view", "likelihood_score_refusal",
    "load_scenario_file", "load_yaml", "resolve_scenario", "secure_aggregation_codec", "uploads_view_refusal",
    "validate_scenario", "with_attack_block", "with_changes",
]
