"""Scenario files: YAML read strictly (a repeated key refused), a file's problems as one error naming it, and
``--set key=value`` overrides."""
from __future__ import annotations

import copy
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Mapping

import yaml

from privsilo.simulator.errors import ScenarioError, ScenarioFileError


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping that gives one key twice (YAML forbids it; PyYAML would keep the last silently)."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key (naming the key and both lines)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, Hashable) and key in first:
                lines = (first[key].start_mark.line + 1, key_node.start_mark.line + 1)
                where = "" if lines[0] == lines[1] else f", on line {lines[0]} and on line {lines[1]}"
                raise DuplicateKeyError(None, None, f"the key {key!r} is given twice{where}; keep one", key_node.start_mark)
            if isinstance(key, Hashable):
                first[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """``text`` parsed as YAML with PyYAML's safe loader, a repeated key refused (`DuplicateKeyError`)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)


def load_scenario_file(path: str | Path) -> dict[str, Any]:
    """Read a scenario (or sweep grid) file into a raw mapping, not yet validated.

    A file that is missing, not UTF-8, not YAML, empty or not a mapping raises one error naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise ScenarioError("scenario", str(path), "must be an existing YAML file")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8")
        line, column = _line_and_column(before, len(before))
        problem = f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        raise ScenarioFileError(path, problem, line=line, column=column) from None
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        raise _yaml_file_error(path, text, exc) from None
    expected = "a YAML mapping of keys such as `name:` and `data:`"
    if raw is None:
        raise ScenarioFileError(path, f"the file is empty; expected {expected}")
    if not isinstance(raw, dict):
        raise ScenarioFileError(path, f"the top level is a {type(raw).__name__}; expected {expected}")
    return raw


def _line_and_column(text: str, index: int) -> tuple[int, int]:
    """1-based line and column of character ``index`` of ``text``."""
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


def _yaml_file_error(path: Path, text: str, exc: yaml.YAMLError) -> ScenarioFileError:
    """PyYAML's diagnosis in one line, at the file's line and column (PyYAML names the text "<unicode string>")."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark, context = exc.problem_mark, ""
        if exc.context and exc.context_mark is not None and exc.context_mark.line != mark.line:
            context = f" ({exc.context} that starts at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1})"
        elif exc.context:
            context = f" ({exc.context})"
        return ScenarioFileError(path, f"invalid YAML: {exc.problem}{context}", line=mark.line + 1, column=mark.column + 1)
    if isinstance(exc, yaml.reader.ReaderError):  # a control character
        line, column = _line_and_column(text, exc.position)
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return ScenarioFileError(path, f"invalid YAML: the character U+{code:04X} is not allowed", line=line, column=column)
    return ScenarioFileError(path, f"invalid YAML: {' '.join(str(exc).split())}")


def apply_overrides(raw: Mapping[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (values parsed as YAML) to a copy of ``raw``."""
    result = copy.deepcopy(dict(raw))
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ScenarioError("--set", item, "must look like key.path=value")
        node = result
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ScenarioError(".".join(parts[: i + 1]), child, "is not a block, so it has no sub-keys")
            node = child
        try:
            node[parts[-1]] = load_yaml(text) if text else None
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
            raise ScenarioError("--set", item, f"the value must be YAML, as in a scenario file ({problem})") from None
    return result
