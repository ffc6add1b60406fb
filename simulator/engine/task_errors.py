"""Errors of remote tasks, in words: the exception a silo or the server raised, the user's code failing in a
worker, and a secure-aggregation overflow, each as one line naming the setting to change."""
from __future__ import annotations

import math

import ray

from privsilo.protocols.fixed_point import EncodingOverflowError
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import Scenario


def root_cause(exc: BaseException) -> BaseException:
    """The exception a remote task raised, through any Ray task errors that wrap it (a silo's error reaches the
    driver wrapped twice: by the silo's task and by the server's)."""
    while isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None:
        exc = exc.cause
    return exc


def user_code_error(scenario: Scenario, exc: ray.exceptions.RayTaskError) -> ScenarioError | None:
    """The user's model or dataset failing in a worker (on a cluster: code the workers cannot import), as one line
    naming the field; None for any other error."""
    from privsilo.simulator.user_code import UserCodeError

    cause = root_cause(exc)
    if not isinstance(cause, (UserCodeError, ImportError)):
        return None
    field, value = ("data.dataset", scenario.data.dataset) if scenario.model.builtin else ("model.name", scenario.model.name)
    hint, mode = "", scenario.ray.ship_code
    if scenario.ray.address and mode != "always" and "import" in str(cause):
        hint = (f"; ray.ship_code is '{mode}': set it to 'always' to send the module with the run (or 'auto' for modules "
                "under the current directory), or install it on every node")
    return ScenarioError(field, value, f"fails in a worker: {type(cause).__name__}: {' '.join(str(cause).split())}{hint}")


def overflow_as_scenario_error(scenario: Scenario, error: EncodingOverflowError) -> ScenarioError:
    """A secure-aggregation encoding overflow, as the setting to change: the learning rate when training diverged
    (a NaN or infinite update), else ``protocol.fractional_bits``."""
    if not math.isfinite(error.value):
        return ScenarioError(
            "federation.lr", scenario.federation.lr,
            "training diverged: a silo's update holds NaN or infinite values, which secure aggregation cannot "
            "encode; lower the learning rate",
        )
    return ScenarioError(
        "protocol.fractional_bits", scenario.protocol.fractional_bits,
        f"secure aggregation overflowed: {error}; each fractional bit fewer doubles the range, or make the "
        "updates smaller (e.g. a lower federation.lr)",
    )
