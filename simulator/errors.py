"""Errors that reach the user as one clear line (exit code 2), never as a traceback."""
from __future__ import annotations

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
