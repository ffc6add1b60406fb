"""``run(scenario)``, the Python form of ``privsilo run``: it returns a [`RunResult`][privsilo.simulator.engine.results.RunResult] and,
given ``out_dir``, writes the run's files there atomically (see ``privsilo.simulator.run_dir.writers``)."""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from privsilo.mechanisms.canaries import SiloCanaries
from privsilo.simulator.engine.federation import Federation
from privsilo.simulator.engine.live import LiveOutput
from privsilo.simulator.engine.rounds import run_rounds
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.run_dir.ownership import check_replaceable
from privsilo.simulator.engine.results import RunResult
from privsilo.simulator.run_dir.lifecycle import settle
from privsilo.simulator.run_dir.lock import locked
from privsilo.simulator.scenario import Scenario, resolve_scenario, with_changes


def run(
    scenario: Scenario | Mapping[str, Any] | str | Path,
    *,
    out_dir: str | Path | None = None,
    address: str | None = None,
    overrides: list[str] | None = None,
    progress: bool = False,
    log: Sequence[str] = (),
    invocation: Mapping[str, Any] | None = None,
    resume: bool = False,
    checkpoint_dir: str | Path | None = None,
    canaries: Mapping[int, SiloCanaries] | None = None,
    on_round: Callable[[Federation], None] | None = None,
    tracking_dir: str | Path | None = None,
) -> RunResult:
    """Run a scenario on Ray and return its results; write them to ``out_dir`` if given (a fresh run first
    empties it), with each round's metrics also logged, as the round ends, for each tracker in ``log``
    (``"tensorboard"``) into ``tracking_dir`` (default ``out_dir/tensorboard``). ``invocation`` is recorded in
    summary.json (default: this call's ``overrides``, no command line; see ``privsilo.simulator.run_dir.invocation``). ``address``:
    the Ray head to join for this run alone; summary.json and the checkpoint record it as ``ray.address``, but a
    resume joins the head its own command gives (a local pool's head may be gone by then).

    Checkpoints go to ``checkpoint_dir`` (default ``out_dir``; none without either) every ``checkpoint.every``
    rounds; ``resume`` continues the run from the checkpoint there, with the same results as a run never
    interrupted (see ``privsilo.simulator.run_dir.checkpoint``). Both directories are locked for the run
    (``privsilo.simulator.run_dir.lock``), and the run finishes in one step (``privsilo.simulator.run_dir.lifecycle``).
    ``canaries``: an audit's canaries by host silo (see ``privsilo.simulator.audit``); ``on_round``: called with the
    federation after each round (an audit reading what the server received, ``server_inbox()``)."""
    from privsilo.simulator.run_dir.invocation import invocation as api_invocation
    from privsilo.simulator.run_dir.tracking import TENSORBOARD_DIR, check_trackers

    check_trackers(log)
    scenario = resolve_scenario(scenario, overrides)
    if scenario.audit is not None and canaries is None:
        raise ScenarioError("audit", scenario.audit.model_dump(), "a plain run does nothing with it (privsilo audit reads it); "
                            "remove the block, or run privsilo audit (`--set audit=null` runs the scenario without it)")
    given = scenario.explicit_dict()  # what a resume runs: not the head it ran on (a local pool's lives no longer)
    if address:
        scenario = with_changes(scenario, {"ray": {"address": address}})
    checkpoints = checkpoint_dir if checkpoint_dir is not None else out_dir
    if resume and checkpoints is None:
        raise ScenarioError("resume", True, "needs the directory of the interrupted run (out_dir or checkpoint_dir)")
    invocation = invocation or api_invocation(None, overrides)
    if tracking_dir is None and out_dir is not None:
        tracking_dir = Path(out_dir) / TENSORBOARD_DIR
    output = LiveOutput(fresh=None if resume or out_dir is None else Path(out_dir), log=log if tracking_dir else (),
                        tracking_dir=tracking_dir, resume_with={"overrides": list(invocation["overrides"]), "log": list(log),
                                                          "scenario": given})
    with ExitStack() as held:
        for directory in dict.fromkeys(Path(d) for d in (out_dir, checkpoints) if d is not None):
            held.enter_context(locked(directory))
        if out_dir is not None:
            settle(Path(out_dir))
            if not resume:  # before any work: a fresh run empties it (LiveOutput.open)
                check_replaceable(Path(out_dir))
        result = run_rounds(scenario, progress=progress, checkpoint_dir=None if checkpoints is None else Path(checkpoints),
                            resume=resume, import_reports=out_dir is not None, canaries=canaries, on_round=on_round,
                            output=output)
        if out_dir is not None:
            from privsilo.simulator.run_dir.writers import write_run  # imported during the rounds

            write_run(result, Path(out_dir), invocation=invocation)
    return result
