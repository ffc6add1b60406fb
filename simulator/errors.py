"""Errors that reach the user as one clear line, never as a traceback, and the exit statuses of the ``privsilo``
command (the table in docs/failures.md, "Exit statuses", lists them; a test checks each)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


EXIT_SUCCESS = 0
EXIT_BAD_INPUT = 2  # the input is wrong: a scenario, a file, an option, an address; the same command fails again
EXIT_RUNTIME_FAULT = 3  # the run's processes or nodes failed (a lost node, a worker not restarted); resume may succeed
EXIT_FILE_SYSTEM_FAULT = 4  # a write failed (a full disk, a read-only file system, no permission)
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT), as a shell reports a process it ended: 128 + 2


class PrivsiloError(Exception):
    """Base class of every error privsilo reports to the user without a traceback; ``exit_code``: the command's
    exit status when it ends with this error."""

    exit_code = EXIT_BAD_INPUT


class RuntimeFault(PrivsiloError):
    """The run's processes or Ray nodes failed, not its input: the command ends with `EXIT_RUNTIME_FAULT`
    and, where the run kept a checkpoint, the command that resumes it."""

    exit_code = EXIT_RUNTIME_FAULT


class _Missing:
    """The value of a required key the scenario leaves out."""

    def __repr__(self) -> str:
        return "nothing"


MISSING = _Missing()


def yaml_words(value: Any) -> str:
    """``value`` as a scenario file writes it: ``true``, ``false``, ``null``, ``{key: value}``; strings quoted."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{key}: {yaml_words(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_words(item) for item in value) + "]"
    return repr(value)


class ScenarioError(PrivsiloError):
    """A scenario field holds a value that is not allowed.

    The message names the field (dotted path, list items as ``[i]``), the offending value in the scenario file's
    words (``true``, ``null``) and what is allowed.
    """

    def __init__(self, field: str, value: Any, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: got {yaml_words(value)}; {allowed}")


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
