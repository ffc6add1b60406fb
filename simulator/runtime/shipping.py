"""Users' code on a cluster: the modules a run's workers import, sent along with the run's Ray job.

A scenario's own model or dataset (``package.module:callable``, a registered name, or an object given to
``privsilo.run``) is imported by the driver, and again by every worker that builds the model or unpickles the
scenario. A local Ray session's workers find a module beside the driver; a cluster's may run on other nodes, and
the warm pool's actors were started by earlier runs, from other directories. So a run that joins a cluster
(``ray.address``) uploads the code per ``ray.ship_code`` as the job's ``runtime_env`` ``py_modules``: every actor
and task the job starts has it on its path, and the warm pool is keyed by it (:mod:`privsilo.simulator.runtime.pool.registry`), so a
leased actor always runs the code of the run that leases it.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal

if TYPE_CHECKING:
    from privsilo.simulator.scenario import Scenario

ShipCode = Literal["auto", "always", "never"]
PRIVSILO_PACKAGES = ("privsilo", "privsilo.simulator", "privsilo.mechanisms", "privsilo.protocols")  # on every node


def code_to_ship(scenarios: Iterable[Scenario]) -> tuple[str, ...]:
    """The source (a top-level package's directory or a module's file) of the users' modules that runs of
    ``scenarios`` send to a cluster, each per its ``ray.ship_code``: ``auto``: the modules under the current
    directory (found there, so not installed on the cluster), ``always``: every module of the user's that the
    workers import, ``never``: none."""
    here = Path(os.getcwd()).resolve()
    shipped: set[str] = set()
    for scenario in scenarios:
        mode = scenario.ray.ship_code
        if mode == "never":
            continue
        for name in user_modules(scenario):
            source = _top_level_source(name)
            if source is not None and (mode == "always" or source.is_relative_to(here)):
                shipped.add(str(source))
    return tuple(sorted(shipped))


def user_modules(scenario: Scenario) -> list[str]:
    """The modules a worker of ``scenario`` imports for the user's code: the model factory's (it builds the model)
    and the dataset loader's (an object given to ``privsilo.run`` travels pickled by reference with the scenario)."""
    from privsilo.simulator.user_code import is_import_string, registered

    names = []
    for kind, name, given in (("model", scenario.model.name, scenario.model.factory),
                              ("dataset", scenario.data.dataset, scenario.data.source)):
        if callable(given):
            names.append(getattr(given, "__module__", None) or "")
        elif given is None and is_import_string(name):
            names.append(name.partition(":")[0])
        elif given is None and name in registered(kind):
            names.append(registered(kind)[name].module)
    return [name for name in names if name]


def _top_level_source(module_name: str) -> Path | None:
    """The directory of the top-level package of ``module_name``, or its file for a top-level module; None for
    privsilo's packages, a script's ``__main__`` (cloudpickle sends its functions by value), modules not imported
    here, and Python's own."""
    root = module_name.split(".")[0]
    module = sys.modules.get(root)
    if module is None or root == "privsilo" or root == "__main__" or root in sys.stdlib_module_names:
        return None
    directories = list(getattr(module, "__path__", ()))  # a package (a namespace package: its first directory)
    if directories:
        return Path(directories[0]).resolve()
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def privsilo_sources() -> Iterator[tuple[str, Path]]:
    """Every source file of privsilo's packages as this interpreter imports them (from a checkout's folders or an
    installed ``privsilo``), in a fixed order, each with a name that does not depend on where it is installed."""
    top = importlib.util.find_spec("privsilo")
    if top is not None and top.origin:
        yield "privsilo/__init__.py", Path(top.origin)
    for package in PRIVSILO_PACKAGES[1:]:
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(root).rglob("*.py")):
                yield f"{package}/{path.relative_to(root)}", path


def runtime_env(sources: tuple[str, ...]) -> dict[str, Any] | None:
    """The Ray job's ``runtime_env`` that ships ``sources`` (None: nothing to ship)."""
    return {"py_modules": list(sources)} if sources else None
