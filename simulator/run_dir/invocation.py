"""How a run was asked for, recorded in ``summary.json`` under ``invocation``: the command line (``argv``, None for
a Python API call), the ``--set`` overrides in the order given and the privsilo version."""
from __future__ import annotations

import importlib.metadata
from typing import Any, Sequence


def privsilo_version() -> str:
    """The installed package's version, or a note saying the package metadata is missing."""
    try:
        return importlib.metadata.version("privsilo")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed: no package metadata; pip install -e .)"


def invocation(argv: Sequence[str] | None, overrides: Sequence[str] | None) -> dict[str, Any]:
    """``{argv, overrides, privsilo_version}``: ``argv`` is the full command line (``["privsilo", "run", ...]``)."""
    return {
        "argv": None if argv is None else list(argv),
        "overrides": list(overrides or ()),
        "privsilo_version": privsilo_version(),
    }


__all__ = ["invocation", "privsilo_version"]
