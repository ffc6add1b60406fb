"""The engine: builds the federation of Ray actors for a scenario, runs its rounds and collects the results.

[`run`][privsilo.simulator.engine.api.run] is the Python form of ``privsilo run``; [`Federation`][privsilo.simulator.engine.federation.Federation]
is the federation itself, for scripts that drive rounds. The modules, by job:

- ``api``: ``run``, locking and finishing the output directory around the round loop;
- ``rounds``: the round loop; ``accounting``, ``checkpoints`` and ``live``: its steps (the privacy accountant,
  checkpoints, what the run writes as it goes); ``run_summary``: the result's failures and timing;
- ``federation``: the actors, their start-up and recovery; ``placement``: which silos each worker hosts;
  ``task_errors``: a failing remote task in words; ``background``: work in a thread while the driver waits;
- ``protocol_setup``: the one place that builds a run's aggregation protocols, server and silo side.

The names below are imported from here on first use (PEP 562), so that importing one of these modules (an actor's
process does) does not import the others.
"""
from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "run": "api",
    "Federation": "federation", "initial_state": "federation",
    "pack_silos": "placement", "resources_needed": "placement",
    "record_events": "accounting",
    "RoundRecord": "results", "RunResult": "results", "resolve_scenario": "api",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
