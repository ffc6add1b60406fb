"""privsilo's Python API for your own work: run a scenario with a model and a dataset of your own.

>>> import privsilo
>>> result = privsilo.run("scenario.yaml", model=make_model, dataset=load_data, out_dir="runs/mine")

Everything else (the mechanism, the protocol, sampling, Ray) comes from the scenario as for ``privsilo run``; the
scenario's ``model`` and ``data.dataset`` are replaced by the objects given. The scripting interfaces of the
simulator (``privsilo.simulator.engine.run`` and ``Federation``, ``privsilo.simulator.attacks.runner.attack``) are re-exported.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from privsilo.simulator.engine import Federation
    from privsilo.simulator.engine import run as run_scenario
    from privsilo.simulator.engine.results import RunResult
    from privsilo.simulator.scenario import Scenario

__all__ = ["Federation", "run", "run_scenario"]


def __getattr__(name: str) -> Any:
    """``Federation`` and ``run_scenario``, imported when first asked for: importing ``privsilo`` (which every
    ``privsilo.mechanisms`` or ``privsilo.protocols`` import does first) loads neither Ray nor torch."""
    if name in ("Federation", "run_scenario"):
        from privsilo.simulator import engine

        return engine.Federation if name == "Federation" else engine.run
    raise AttributeError(f"module 'privsilo' has no attribute {name!r}")


def run(
    scenario: Scenario | Mapping[str, Any] | str | Path,
    *,
    model: Callable[..., Any] | None = None,
    dataset: Any = None,
    model_kwargs: Mapping[str, Any] | None = None,
    dataset_kwargs: Mapping[str, Any] | None = None,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
    address: str | None = None,
    progress: bool = False,
    log: Sequence[str] = (),
) -> RunResult:
    """Run ``scenario`` (a YAML path, a mapping or a ``Scenario``) with your own ``model`` and ``dataset``.

    ``model``: a callable returning a ``torch.nn.Module``, called with ``model_kwargs`` and, if it asks for them,
    ``feature_shape`` and ``num_classes``; it is sent to the Ray actors, so it must be picklable by cloudpickle (a
    module-level function, or a function defined in your script). ``dataset``: a loader (called with
    ``dataset_kwargs`` and, if it asks, ``seed``), or what a loader returns, ``((x_train, y_train), (x_test,
    y_test))`` with integer class labels. Either may be omitted (the scenario's own is used). Checked like a
    scenario: problems raise [`ScenarioError`][privsilo.simulator.errors.ScenarioError] naming ``model.name`` or
    ``data.dataset``. ``log``: trackers that also receive the metrics, as ``privsilo run --log`` (``"tensorboard"``,
    written under ``out_dir``). Returns the run's [`RunResult`][privsilo.simulator.engine.results.RunResult].
    """
    from privsilo.simulator.engine import run as run_scenario
    from privsilo.simulator.scenario import Scenario, apply_overrides, load_scenario_file, validate_scenario

    raw = scenario.explicit_dict() if isinstance(scenario, Scenario) else (
        load_scenario_file(scenario) if isinstance(scenario, (str, Path)) else dict(scenario))
    raw = apply_overrides(raw, list(overrides or []))
    if model is not None:
        raw["model"] = {**raw.get("model", {}), "name": _label(model, "model"), "kwargs": dict(model_kwargs or {})}
    if dataset is not None:
        raw["data"] = {**raw.get("data", {}), "dataset": _label(dataset, "dataset"), "kwargs": dict(dataset_kwargs or {})}
    if address:
        raw["ray"] = {**raw.get("ray", {}), "address": address}
    validated = validate_scenario(raw, model=model, dataset=dataset)
    return run_scenario(validated, out_dir=out_dir, progress=progress, log=log)


def _label(source: Any, kind: str) -> str:
    """The name a run records for a model or dataset given as an object: ``module:qualname`` where that is a
    valid import string, else ``user:<kind>``."""
    from privsilo.simulator.user_code import describe, is_import_string

    name = describe(source) if callable(source) else ""
    return name if is_import_string(name) else f"user:{kind}"
