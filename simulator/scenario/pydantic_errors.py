"""Pydantic's validation errors translated into one ``ScenarioError`` naming the field, the value and what is
allowed (a misspelt key with the keys of its block)."""
from __future__ import annotations

import math
import typing
from typing import Any, Sequence

from pydantic import BaseModel, ValidationError

from privsilo.simulator.errors import MISSING, ScenarioError


def _to_scenario_error(exc: ValidationError, model: type[BaseModel], prefix: tuple[str, ...] = ()) -> ScenarioError:
    """Pydantic's first error in the scenario's words: the field as ``a.b[0].c``, never a class name."""
    err = exc.errors()[0]
    keys = tuple(str(part) for part in err["loc"] if not isinstance(part, int))  # the path of blocks, list items skipped
    field = _field_path(prefix + tuple(err["loc"]))
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(model, keys[:-1])
        return ScenarioError(field, err["input"], f"unknown key; allowed keys here: {', '.join(allowed) or 'none'}")
    if err["type"] == "value_error":
        return _validator_error(field, err["input"], str(err["ctx"]["error"]), keys=_allowed_keys(model, keys))
    if err["type"] == "missing":
        return ScenarioError(field, MISSING, "this key is required")
    if err["type"] in ("model_type", "model_attributes_type", "dict_type"):
        block = _allowed_keys(model, keys)
        allowed = f"must be a mapping of the keys {', '.join(block)}" if block else "must be a mapping"
        if isinstance(err["input"], bool):
            allowed += " (YAML reads yes, no, on and off as true and false)"
        return ScenarioError(field, err["input"], allowed)
    message = err["msg"]
    message = message[0].lower() + message[1:] if message else message
    return ScenarioError(field, err["input"], message + _number_read_as_text(err["type"], err["input"]))


def _number_read_as_text(error_type: str, value: Any) -> str:
    """A hint where YAML read a number as text: PyYAML (YAML 1.1) reads ``1e3`` and ``1.5e3`` (no dot, or no
    sign in the exponent) as strings."""
    if error_type not in ("int_type", "int_parsing", "float_type", "float_parsing") or not isinstance(value, str):
        return ""
    try:
        number = float(value)
    except ValueError:
        return ""
    if not math.isfinite(number):
        return ""
    if error_type.startswith("int"):
        if not number.is_integer():
            return ""
        written = str(int(number))
    else:
        mantissa, e, exponent = repr(number).partition("e")
        written = repr(number) if not e else f"{mantissa if '.' in mantissa else mantissa + '.0'}e{exponent if exponent[0] in '+-' else '+' + exponent}"
    return f" (YAML read {value} as text, not a number: write {written})"


def _field_path(loc: Sequence[str | int]) -> str:
    """``("faults", "crashes", 0, "round")`` -> ``faults.crashes[0].round``, the one syntax every message uses."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f"{'.' if path else ''}{part}"
    return path


def _validator_error(field: str, value: Any, message: str, *, keys: Sequence[str] = ()) -> ScenarioError:
    """A field validator's own words (without pydantic's "Value error, "); a message "key: problem" about a key
    of a mapping-valued field names that key and its value (None where the key, one of ``keys``, is absent)."""
    key, separator, problem = message.partition(": ")
    if separator and isinstance(value, dict) and (key in value or key in keys):
        return ScenarioError(f"{field}.{key}", value.get(key), problem)
    return ScenarioError(field, value, message)


def _allowed_keys(model: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The keys of the block at ``loc`` below ``model``; an optional block (``data.users``, ``attack``: the
    annotation ``Block | None``) counts as its block."""
    for part in loc:
        field = model.model_fields.get(part)
        annotation = getattr(field, "annotation", None)
        blocks = [a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not blocks:
            return []
        model = blocks[0]
    return sorted(model.model_fields)
