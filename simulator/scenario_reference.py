"""The scenario reference (every key: default, constraint, description) generated from the pydantic models, so the
documentation cannot drift from what validation accepts. The documentation build calls
:func:`scenario_reference_markdown` (``docs/hooks.py``); descriptions are the docstrings under the fields.

Loads neither torch nor Ray: only the scenario models and each mechanism's ``Params``.
"""
from __future__ import annotations

import enum
import json
import types
import typing
from typing import Any, Iterator, Literal

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from mechanisms.registry import MECHANISM_NAMES, mechanism_class
from simulator.scenario import MechanismConfig, Scenario

_BOUNDS = ((annotated_types.Ge, "ge", ">="), (annotated_types.Gt, "gt", ">"), (annotated_types.Le, "le", "<="), (annotated_types.Lt, "lt", "<"))


def _yaml(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value)


def default_text(field: FieldInfo) -> str:
    """The field's default as it would be written in YAML (JSON is YAML); "required" when there is none."""
    if field.default_factory is not None:
        return f"`{_yaml(field.default_factory())}`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{_yaml(field.default)}`"


def _kinds(annotation: Any) -> list[str]:
    """What values a type annotation allows, one entry per member of a union."""
    if annotation is typing.Any:
        return ["see the description"]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return [kind for member in typing.get_args(annotation) for kind in _kinds(member)]
    if origin is Literal:
        return [", ".join(f"`{_yaml(choice)}`" for choice in typing.get_args(annotation))]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [", ".join(f"`{_yaml(member)}`" for member in annotation)]
    if annotation is type(None):
        return ["`null`"]
    if origin in (list, tuple):
        return [f"list of {' or '.join(_kinds(typing.get_args(annotation)[0]))}"]
    if origin is dict:
        return ["mapping"]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ["block"]
    return [getattr(annotation, "__name__", str(annotation))]


def constraint_text(field: FieldInfo) -> str:
    """Type and bounds of a field, e.g. ``float > 0 <= 1`` or ``one of `iid`, `shards```."""
    kinds = " or ".join(_kinds(field.annotation))
    bounds = [f"{symbol} {getattr(meta, name)}" for meta in field.metadata for cls, name, symbol in _BOUNDS if isinstance(meta, cls)]
    return " ".join([kinds, *bounds])


def _rows(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, FieldInfo]]:
    """(dotted key, field) of every leaf of ``model``; nested blocks are expanded, not listed."""
    for name, field in model.model_fields.items():
        nested = [arg for arg in (field.annotation, *typing.get_args(field.annotation)) if isinstance(arg, type) and issubclass(arg, BaseModel)]
        if nested and nested[0] is not MechanismConfig:
            yield from _rows(nested[0], f"{prefix}{name}.")
        elif nested:
            yield f"{prefix}{name}.name", MechanismConfig.model_fields["name"]
        else:
            yield f"{prefix}{name}", field


def _table(rows: Iterator[tuple[str, FieldInfo]]) -> list[str]:
    lines = ["| key | default | allowed | description |", "|---|---|---|---|"]
    for key, field in rows:
        description = (field.description or "").replace("\n", " ").replace("|", "\\|")
        constraint = constraint_text(field).replace("|", "\\|")
        lines.append(f"| `{key}` | {default_text(field)} | {constraint} | {description} |")
    return lines


def scenario_reference_markdown() -> str:
    """Markdown tables of every scenario key, then one table of parameters per mechanism."""
    lines = ["## Scenario keys", ""]
    lines += _table(_rows(Scenario, ""))
    for name in MECHANISM_NAMES:
        params = mechanism_class(name).Params
        lines += ["", f"## `mechanism.name: {name}`", ""]
        if params.model_fields:
            lines += _table(_rows(params, "mechanism."))
        else:
            lines.append("No further parameters.")
    return "\n".join(lines) + "\n"


def undocumented_keys() -> list[str]:
    """Keys whose field has no description (the tests require none)."""
    models: list[tuple[type[BaseModel], str]] = [(Scenario, "")]
    models += [(mechanism_class(name).Params, f"mechanism[{name}].") for name in MECHANISM_NAMES]
    return [key for model, prefix in models for key, field in _rows(model, prefix) if not field.description]
