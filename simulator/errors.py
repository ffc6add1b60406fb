"""Errors that reach the user as one clear line (exit code 2), never as a traceback."""
from __future__ import annotations

from pathlib import Path
from typing import Any


class PrivsiloError(Exception):
    """Base class of every error privsilo reports to the user without a traceback."""


class ScenarioError(PrivsiloError):
    """A scenario field holds a value that is not allowed.

    The message names the field (dotted path), the offending value and what is allowed.
    """

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: got {value!r}; {allowed}")


class DataUnavailableError(PrivsiloError):
    """A dataset's files are not on this machine; the message says how to get them."""


class ScenarioFileError(PrivsiloError):
    """A scenario or grid file cannot be read as a YAML mapping.

    The message names the file and, where known (a YAML syntax error, a byte that is not UTF-8), the line and
    column: ``FILE, line L, column C: problem``.
    """

    def __init__(self, path: Path, problem: str, *, line: int | None = None, column: int | None = None) -> None:
        self.path, self.line, self.column = path, line, column
        where = str(path) if line is None else f"{path}, line {line}, column {column}"
        super().__init__(f"{where}: {problem}")
