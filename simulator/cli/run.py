"""``privsilo run`` and ``privsilo resume``: a scenario's run, new or continued from its last checkpoint."""
from __future__ import annotations

import argparse
from pathlib import Path

from privsilo.simulator.cli.output import run_directory
from privsilo.simulator.cli.pool import ray_address
from privsilo.simulator.errors import PrivsiloError, ScenarioError
from privsilo.simulator.run_dir.ownership import check_out_directory


def cmd_run(args: argparse.Namespace) -> int:
    check_out_directory(args.out)
    if args.resume:
        if args.out is None:
            raise ScenarioError("--resume", True, "needs --out DIR, the output directory of the interrupted run (or use privsilo resume DIR)")
        if args.overwrite:
            raise ScenarioError("--overwrite", True, "--resume continues the run in --out and --overwrite starts it again: give one of them")
        return _resume(args, directory=args.out, scenario_file=args.scenario)
    if args.scenario is None:
        raise ScenarioError("scenario", None, "give a scenario YAML file (only --resume --out DIR, or privsilo resume DIR, reads it from a checkpoint)")
    from privsilo.simulator.scenario import resolve_scenario
    from privsilo.simulator.run_dir.tracking import check_trackers

    scenario = resolve_scenario(args.scenario, args.overrides)  # a bad file fails before torch and Ray load
    check_trackers(args.log)
    from privsilo.simulator.engine import run
    from privsilo.simulator.run_dir.invocation import invocation

    address = ray_address(args, configured=scenario.ray.address)
    with run_directory(args, scenario_name=scenario.name) as out:
        result = run(scenario, out_dir=out, address=address, progress=not args.no_progress, log=args.log,
                     invocation=invocation(args.argv, args.overrides))
    return _report(result, out)


def cmd_resume(args: argparse.Namespace) -> int:
    check_out_directory(args.directory, field="resume", names="the output directory of an interrupted run")
    return _resume(args, directory=args.directory, scenario_file=None)


def _resume(args: argparse.Namespace, *, directory: Path, scenario_file: Path | None) -> int:
    """Continue the interrupted run in ``directory`` with the scenario, ``--set`` overrides and trackers its
    checkpoint records; ``scenario_file`` (with those overrides and the new ones applied) must agree with it."""
    from privsilo.simulator.run_dir.checkpoint import read_header
    from privsilo.simulator.run_dir.lifecycle import is_finished, settle
    from privsilo.simulator.run_dir.lock import locked
    from privsilo.simulator.scenario import resolve_scenario
    from privsilo.simulator.run_dir.tracking import check_trackers

    with locked(directory, field="--resume"):
        settle(directory)
        if is_finished(directory):
            raise PrivsiloError(f"--resume: {directory} holds a finished run (summary.json); there is nothing to resume")
        recorded = read_header(directory)
        overrides = [*recorded["resume_with"].get("overrides", []), *args.overrides]
        if scenario_file is None:
            # the settings as given (every key written out would read as given, and ULDP refuses inert ones)
            scenario = resolve_scenario(recorded["resume_with"].get("scenario", recorded["scenario"]), args.overrides)
        else:
            scenario = resolve_scenario(scenario_file, overrides)
        log = list(dict.fromkeys([*recorded["resume_with"].get("log", []), *args.log]))
        check_trackers(log)
        from privsilo.simulator.engine import run
        from privsilo.simulator.run_dir.invocation import invocation

        args.run_dir = directory
        result = run(scenario, out_dir=directory, address=ray_address(args, configured=scenario.ray.address), progress=not args.no_progress, log=log,
                     invocation=invocation(args.argv, overrides), resume=True)
    return _report(result, directory)


def _report(result: object, out: Path) -> int:
    from privsilo.simulator.run_dir.writers import result_line  # loaded by run() meanwhile

    print(result_line(result))
    print(f"results written to {out}")
    return 0
