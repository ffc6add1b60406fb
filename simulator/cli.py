"""The ``privsilo`` command line: run, resume, attack, audit, sweep, merge, validate, list, data fetch, pool start/status/stop.

User errors (a bad scenario, missing data, an unreachable cluster) print one line and exit with code 2, a run
whose processes or nodes failed with 3, an interrupted one with 130 (the table: docs/failures.md, "Exit statuses";
the codes: :mod:`simulator.errors`). None leaves a half-written output directory. Without ``--out`` every run
gets a new directory, and a finished result in ``--out`` is replaced only with ``--overwrite``
(:mod:`simulator.output_dirs`). Every command imports what
it needs when it runs: ``list`` and ``validate`` never load torch, Ray or matplotlib.
"""
from __future__ import annotations

import argparse
import atexit
import os
import shlex
import sys
import threading
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Iterator, NoReturn, Sequence

from simulator.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, PrivsiloError, ScenarioError
from simulator.invocation import privsilo_version
from simulator.local_pool import DEFAULT_IDLE_TIMEOUT_S
from simulator.output_dirs import RUNS_ROOT, check_out_directory, claim, new_directory, removed_if_unused

EXIT_USER_ERROR = EXIT_BAD_INPUT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="privsilo", description="Simulate privacy-preserving cross-silo federated learning on Ray.",
                                     epilog="exit statuses: 0 done, 2 bad input, 3 the run's processes or nodes failed, 4 a write "
                                            "failed, 130 interrupted (docs/failures.md, Exit statuses)")
    parser.add_argument("--version", action="version", version=f"privsilo {privsilo_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a scenario and write its results")
    run.add_argument("scenario", type=Path, nargs="?", help="scenario YAML file (with --resume: optional, must agree with the checkpoint)")
    _add_output_options(run, default="runs/<scenario name>/<UTC time>")
    run.add_argument("--resume", action="store_true",
                     help="continue the interrupted run whose outputs go to --out, from its last checkpoint (as privsilo resume)")
    _add_log_option(run, into="<out>/tensorboard/")
    _add_overrides(run, help="override a scenario key (repeatable)")
    _add_ray_options(run)

    resume = commands.add_parser("resume", help="continue an interrupted run from its last checkpoint (its scenario and --set overrides come from the checkpoint)")
    resume.add_argument("directory", type=Path, help="the interrupted run's output directory")
    _add_log_option(resume, into="<directory>/tensorboard/, besides the trackers the run was started with")
    _add_overrides(resume, help="change a key that may differ on resume: ray.*, checkpoint.* (repeatable)")
    _add_ray_options(resume)

    attack = commands.add_parser("attack", help="run a scenario's gradient-inversion attack (attack: block) and score it")
    attack.add_argument("scenario", type=Path, help="scenario YAML file (its attack: block; defaults where absent)")
    _add_output_options(attack, default="runs/<scenario name>_attack/<UTC time>")
    _add_overrides(attack, help="override a scenario key (repeatable)")
    _add_ray_options(attack)

    audit = commands.add_parser("audit", help="audit a scenario's privacy with canaries (audit: block): an empirical lower bound on epsilon")
    audit.add_argument("scenario", type=Path, help="scenario YAML file (its audit: block; defaults where absent)")
    _add_output_options(audit, default="runs/<scenario name>_audit/<UTC time>")
    _add_overrides(audit, help="override a scenario key (repeatable)")
    _add_ray_options(audit)

    sweep = commands.add_parser("sweep", help="run a grid of scenarios x seeds and tabulate mean/std accuracy")
    sweep.add_argument("grid", type=Path, help="grid YAML file (base scenario, seeds, axes)")
    _add_output_options(sweep, default="the latest unfinished sweep in runs/<grid name>/, else runs/<grid name>/<UTC time>")
    sweep.add_argument("--seeds", default=None, metavar="N|S1,S2,...", help="run seeds 0..N-1, or the listed seeds, instead of the grid's seeds")
    _add_overrides(sweep, help="override a key of the base scenario (repeatable)")
    sweep.add_argument("--only", action="append", default=[], metavar="AXIS=LABEL[,LABEL]", help="run only these labels of an axis (repeatable)")
    _add_log_option(sweep, into="<out>/tensorboard/<run>/, one TensorBoard run per grid run; <out>.unfinished/tensorboard/ while the sweep runs")
    _add_ray_options(sweep)

    merge = commands.add_parser("merge", help="merge the runs of several sweep output directories into one table")
    merge.add_argument("sweeps", type=Path, nargs="+", help="sweep output directories (each with a runs.csv)")
    merge.add_argument("--out", type=Path, required=True, help="output directory for the merged runs, table and plot")
    merge.add_argument("--overwrite", action="store_true", help="replace a finished result in --out (refused without this)")

    validate = commands.add_parser("validate", help="check a scenario or grid file (and that its data is here) without running it")
    validate.add_argument("scenario", type=Path)
    _add_overrides(validate, help=None)

    listing = commands.add_parser("list", help="list mechanisms, datasets, models, partitions and protocols; or, given a "
                                  "KEY-PREFIX, the scenario keys under it")
    listing.add_argument("prefix", nargs="?", metavar="KEY-PREFIX", help="a block (federation, data.users), a key, or "
                         "mechanism.NAME: print its keys with their types, defaults and descriptions")

    pool = commands.add_parser("pool", help="start a local warm pool of actors, or show or stop a pool (runs lease from it)")
    pool_commands = pool.add_subparsers(dest="pool_command", required=True)
    start = pool_commands.add_parser("start", help="start a Ray head and its warm pool in the background; run, sweep, "
                                     "audit and attack use it when no address is given")
    start.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S, metavar="SECONDS",
                       help=f"stop the head and its actors after this long without a command (default {DEFAULT_IDLE_TIMEOUT_S:g})")
    start.add_argument("--num-cpus", type=int, default=None, help="logical CPUs of the head (default: this machine's cores)")
    for name, text in (("status", "list the pool's actors: shape, version, idle or leased, idle time"),
                       ("stop", "stop every actor of the pool, idle or leased, and its registry; "
                                "without --address: the local pool's Ray head too")):
        pool_command = pool_commands.add_parser(name, help=text)
        pool_command.add_argument("--address", default=None, help="the Ray cluster's address (HOST:PORT of the head's "
                                  "GCS); default: the local pool that `privsilo pool start` started")

    data = commands.add_parser("data", help="manage datasets")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    fetch = data_commands.add_parser("fetch", help="download a dataset (or copy a local one) into the local cache")
    fetch.add_argument("name", help="dataset to fetch (heart_disease, mnist)")
    fetch.add_argument("--dir", type=Path, default=None, help="destination directory (default: the privsilo data cache)")
    fetch.add_argument("--from", dest="source", type=Path, default=None, metavar="DIR",
                       help="copy the dataset's files from this local directory instead of downloading them")
    return parser


def _add_output_options(command: argparse.ArgumentParser, *, default: str) -> None:
    """--out and --overwrite (see :mod:`simulator.output_dirs`)."""
    command.add_argument("--out", type=Path, default=None, help=f"output directory (default: {default})")
    command.add_argument("--overwrite", action="store_true", help="replace a finished result in --out (refused without this)")


def _add_log_option(command: argparse.ArgumentParser, *, into: str) -> None:
    command.add_argument("--log", action="append", default=[], metavar="TRACKER",
                         help=f"also log each round's metrics as it ends for this tracker: tensorboard (into {into})")


def _add_overrides(command: argparse.ArgumentParser, *, help: str | None) -> None:
    command.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE", help=help)


def _add_ray_options(command: argparse.ArgumentParser) -> None:
    """The options of every command that starts (or joins) Ray: --address and --no-progress."""
    command.add_argument("--address", default=None, help="join an existing Ray cluster at this address (default: the local "
                         "pool of `privsilo pool start` if it runs, else Ray started for this command)")
    command.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _ray_address(args: argparse.Namespace, *, configured: str | None) -> str | None:
    """``--address``, else the scenario's ``ray.address`` (``configured``), else the local pool's head if it runs
    (saying so in one line), else None: Ray of the command's own."""
    from simulator.local_pool import address_for_command, exit_when_stopped, serving

    address, note = address_for_command(args.address or configured)
    if note:
        print(f"privsilo: {note}", flush=True)
    if (pool := serving(address)) is not None:
        exit_when_stopped(pool, lambda why: print(f"privsilo: error: {why}; {_after_interrupt(args)}", file=sys.stderr))
    return address


@contextmanager
def _output_dir(args: argparse.Namespace, *, default_parent: Path, kind: str) -> Iterator[Path]:
    """``--out``, refused if privsilo may not write ``kind`` of output there (:func:`simulator.output_dirs.claim`),
    or a new ``<default_parent>/<UTC time>``; either is removed again if the command created it and fails before
    writing into it."""
    if args.out is not None:
        claim(args.out, kind=kind, overwrite=args.overwrite)
        with _removed_if_created(args.out) as out:
            yield out
        return
    with removed_if_unused(new_directory(default_parent)) as out:
        yield out


def _removed_if_created(out: Path) -> AbstractContextManager[Path]:
    """``removed_if_unused(out)`` where ``out`` does not exist yet (this command creates it), else ``out`` as is."""
    return nullcontext(out) if os.path.lexists(out) else removed_if_unused(out)


@contextmanager
def _run_directory(args: argparse.Namespace, *, scenario_name: str) -> Iterator[Path]:
    """``privsilo run``'s output directory, locked for the run (:mod:`simulator.run_lock`): ``--out``, refused
    where privsilo may not write a run (:func:`simulator.output_dirs.claim`) or it holds an interrupted one
    (without ``--overwrite``; resume it instead), or a new ``runs/<scenario name>/<UTC time>``, removed again if
    the run fails before writing."""
    from simulator.checkpoint import checkpoint_path, has_checkpoint
    from simulator.run_directory import settle
    from simulator.run_lock import locked

    if args.out is None:
        with removed_if_unused(new_directory(RUNS_ROOT / scenario_name)) as out, locked(out):
            args.run_dir = out
            yield out
        return
    with _removed_if_created(args.out), locked(args.out):
        settle(args.out)
        claim(args.out, kind="run", overwrite=args.overwrite)
        if not args.overwrite and has_checkpoint(args.out):
            raise ScenarioError("--out", str(args.out), f"holds an interrupted run ({checkpoint_path(args.out).name}); continue it with "
                                f"{_resume_command(args.out)} or pass --overwrite to start again")
        args.run_dir = args.out
        yield args.out


def _resume_command(directory: Path) -> str:
    return f"privsilo resume {shlex.quote(str(directory))}"


def _cmd_run(args: argparse.Namespace) -> int:
    check_out_directory(args.out)
    if args.resume:
        if args.out is None:
            raise ScenarioError("--resume", True, "needs --out DIR, the output directory of the interrupted run (or use privsilo resume DIR)")
        if args.overwrite:
            raise ScenarioError("--overwrite", True, "--resume continues the run in --out and --overwrite starts it again: give one of them")
        return _resume(args, directory=args.out, scenario_file=args.scenario)
    if args.scenario is None:
        raise ScenarioError("scenario", None, "give a scenario YAML file (only --resume --out DIR, or privsilo resume DIR, reads it from a checkpoint)")
    from simulator.scenario import resolve_scenario
    from simulator.tracking import check_trackers

    scenario = resolve_scenario(args.scenario, args.overrides)  # a bad file fails before torch and Ray load
    check_trackers(args.log)
    from simulator.engine import run
    from simulator.invocation import invocation

    address = _ray_address(args, configured=scenario.ray.address)
    with _run_directory(args, scenario_name=scenario.name) as out:
        result = run(scenario, out_dir=out, address=address, progress=not args.no_progress, log=args.log,
                     invocation=invocation(args.argv, args.overrides))
    return _report(result, out)


def _cmd_resume(args: argparse.Namespace) -> int:
    check_out_directory(args.directory, field="resume", names="the output directory of an interrupted run")
    return _resume(args, directory=args.directory, scenario_file=None)


def _resume(args: argparse.Namespace, *, directory: Path, scenario_file: Path | None) -> int:
    """Continue the interrupted run in ``directory`` with the scenario, ``--set`` overrides and trackers its
    checkpoint records; ``scenario_file`` (with those overrides and the new ones applied) must agree with it."""
    from simulator.checkpoint import read_header
    from simulator.run_directory import is_finished, settle
    from simulator.run_lock import locked
    from simulator.scenario import resolve_scenario
    from simulator.tracking import check_trackers

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
        from simulator.engine import run
        from simulator.invocation import invocation

        args.run_dir = directory
        result = run(scenario, out_dir=directory, address=_ray_address(args, configured=scenario.ray.address), progress=not args.no_progress, log=log,
                     invocation=invocation(args.argv, overrides), resume=True)
    return _report(result, directory)


def _report(result: object, out: Path) -> int:
    from simulator.reports import result_line  # loaded by run() meanwhile

    print(result_line(result))
    print(f"results written to {out}")
    return 0


def _cmd_attack(args: argparse.Namespace) -> int:
    from simulator.scenario import resolve_scenario, with_attack_block

    scenario = with_attack_block(resolve_scenario(args.scenario, args.overrides))  # bad input fails before torch loads
    from simulator.attacks.targets import check_targets_fit
    from simulator.data.sources import scenario_dataset

    check_targets_fit(scenario, scenario_dataset(scenario.data, seed=scenario.seed))
    from simulator.attacks.runner import attack

    address = _ray_address(args, configured=scenario.ray.address)
    with _output_dir(args, default_parent=RUNS_ROOT / f"{scenario.name}_attack", kind="attack") as out:
        report = attack(scenario, out_dir=out, address=address, progress=not args.no_progress)
    print(report.headline())
    print(f"results written to {out}")
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from simulator.audit.runner import audit, with_audit_block
    from simulator.scenario import resolve_scenario

    scenario = with_audit_block(resolve_scenario(args.scenario, args.overrides))  # bad input fails before torch loads
    from simulator.invocation import invocation

    address = _ray_address(args, configured=scenario.ray.address)
    with _output_dir(args, default_parent=RUNS_ROOT / f"{scenario.name}_audit", kind="audit") as out:
        report = audit(scenario, out_dir=out, address=address, progress=not args.no_progress,
                       invocation=invocation(args.argv, args.overrides))
    print(report.headline())
    print(f"results written to {out}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from simulator.experiments.sweep import load_grid, sweep
    from simulator.tracking import check_trackers

    check_trackers(args.log)
    if args.out is not None:  # an unfinished sweep in --out (its journal beside it) resumes
        claim(args.out, kind="sweep", overwrite=args.overwrite)
    seeds = _seed_option(args.seeds)
    configured = (load_grid(args.grid, overrides=args.overrides).base.get("ray") or {}).get("address")  # bad input fails here
    result = sweep(args.grid, out_dir=args.out, seeds=seeds, overrides=args.overrides, only=args.only,
                   address=_ray_address(args, configured=configured), progress=not args.no_progress, log=args.log)
    print(result.headline())
    print((result.out_dir / "table.md").read_text(), end="")
    print(f"results written to {result.out_dir}")
    return 0


def _seed_option(text: str | None) -> int | list[int] | None:
    """``--seeds``: a count N (seeds 0..N-1) or a comma-separated list of seeds (``2,`` lists seed 2 alone)."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()] if "," in text else int(text)
    except ValueError:
        raise ScenarioError("--seeds", text, "a seed count N (seeds 0..N-1) or a comma-separated list such as 1,2 (one listed seed: 2,)") from None


def _cmd_merge(args: argparse.Namespace) -> int:
    from simulator.experiments.merge import merge_sweeps

    claim(args.out, kind="merge", overwrite=args.overwrite)
    _, runs, table = merge_sweeps(args.sweeps, out_dir=args.out)
    print(f"merged {len(runs)} runs of {len(args.sweeps)} sweeps ({len(table)} combinations)")
    print((args.out / "table.md").read_text(), end="")
    print(f"results written to {args.out}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    """Check the file, load its data, and check every attack block's target silos against their records."""
    from simulator.attacks.targets import check_targets_fit
    from simulator.data.sources import scenario_dataset
    from simulator.scenario import load_scenario_file, resolve_scenario

    if "axes" in load_scenario_file(args.scenario):  # a grid file: check every combination x seed
        from simulator.experiments.sweep import count, load_grid

        grid = load_grid(args.scenario, overrides=args.overrides)
        scenarios = [grid.scenario(labels, seed) for labels in grid.combinations() for seed in grid.seeds]
        loaded = {}
        for scenario in scenarios:
            key = (scenario.data.dataset, scenario.data.path, scenario.data.silos, scenario.seed)
            if key not in loaded:
                loaded[key] = scenario_dataset(scenario.data, seed=scenario.seed)
            check_targets_fit(scenario, loaded[key])
        combinations = len(scenarios) // len(grid.seeds)
        print(f"{args.scenario}: valid grid ({count(len(scenarios), 'run')}: {count(combinations, 'combination')} x {count(len(grid.seeds), 'seed')})")
        return 0
    scenario = resolve_scenario(args.scenario, args.overrides)
    check_targets_fit(scenario, scenario_dataset(scenario.data, seed=scenario.seed))
    print(f"{args.scenario}: valid ({scenario.mechanism.name} on {scenario.data.dataset}, {scenario.data.silos} silos, {scenario.federation.rounds} rounds)")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    if args.prefix is not None:
        from simulator.scenario_reference import keys_text

        print(keys_text(args.prefix))
        return 0
    from mechanisms.registry import MECHANISM_NAMES
    from mechanisms.server_optimizers import SERVER_OPTIMIZERS
    from simulator.data import DATASETS
    from simulator.data.partition import PARTITIONS
    from simulator.models import MODELS
    from simulator.user_code import GROUPS, registered

    print("mechanisms: " + ", ".join(MECHANISM_NAMES))
    print("datasets:")
    for name, info in sorted(DATASETS.items()):
        print(f"  {name:15s} {info.description}")
    for name, entry in sorted(registered("dataset").items()):
        print(f"  {name:15s} {entry.value} (registered under {GROUPS['dataset']})")
    print("models: " + ", ".join(MODELS))
    for name, entry in sorted(registered("model").items()):
        print(f"  {name:15s} {entry.value} (registered under {GROUPS['model']})")
    print("partitions: " + ", ".join(PARTITIONS))
    print("protocols: plain sum (default), secure_aggregation (protocol.secure_aggregation: true; dropout recovery; "
          "protocol.neighbours: auto (the default where safe) | all | K for SecAgg+)")
    print("server optimizers: " + ", ".join(SERVER_OPTIMIZERS) + " (federation.server_optimizer: NAME or {name: NAME, ...}; "
          "FedProx: federation.proximal_mu)")
    print("attacks: dlg, idlg (privsilo attack; the scenario's attack: block)")
    print("audits: canaries of a record, user or client (privsilo audit; the scenario's audit: block)")
    print("faults: crashes at listed rounds and points, or silo_failure_rate (the scenario's faults: block); "
          "checkpoints for --resume (checkpoint.every)")
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    from simulator.data.fetch import FETCHABLE, fetch_dataset

    if args.name not in FETCHABLE:
        raise PrivsiloError(f"data fetch: got {args.name!r}; allowed: {', '.join(FETCHABLE)}")
    path = fetch_dataset(args.name, dest=args.dir, source=args.source)
    print(f"{args.name} is ready in {path}")
    return 0


def _cmd_pool(args: argparse.Namespace) -> int:
    """``pool start``: a local Ray head and warm pool (:mod:`simulator.local_pool`); ``pool status`` / ``pool stop``
    against the cluster at ``--address``, else the local pool (:mod:`simulator.detached_pool`)."""
    from simulator import local_pool

    if args.pool_command == "start":
        state = local_pool.start(idle_timeout=args.idle_timeout, num_cpus=args.num_cpus)
        print(f"started the local pool: Ray head at {state.address} ({state.num_cpus} CPUs); run, sweep, audit and "
              f"attack use it without --address; it stops after {state.idle_timeout:g} s without a command, or "
              f"with `privsilo pool stop`")
        return 0
    if args.address is None:
        return _local_pool_command(args.pool_command)
    import ray

    from simulator.cluster import join_cluster
    from simulator.detached_pool import status_table, stop_pool
    from simulator.scenario import RayConfig

    join_cluster(args.address, connect_timeout=RayConfig().connect_timeout, field="--address")
    try:
        if args.pool_command == "status":
            print(status_table())
        else:
            print(f"stopped {stop_pool()} actors of the warm pool (registry included); none is left")
    finally:
        ray.shutdown()
    return 0


def _local_pool_command(command: str) -> int:
    """``pool status`` / ``pool stop`` without ``--address``: the local pool of ``privsilo pool start``."""
    import ray

    from simulator import local_pool
    from simulator.cluster import join_cluster
    from simulator.detached_pool import status_table

    state = local_pool.read_state()
    if state is None:
        raise PrivsiloError(f"pool {command}: no local pool is running (`privsilo pool start` starts one); "
                            "give --address for a cluster's pool")
    if command == "stop":
        local_pool.stop()
        print(f"stopped the local pool (Ray head at {state.address}, supervisor pid {state.pid}) and every process it started")
        return 0
    if (reason := local_pool.problem(state)) is not None:
        print(f"the local pool is not usable: {reason} (log: {local_pool.log_path()}); `privsilo pool stop` clears it")
        return 0
    print(local_pool.describe(state))
    local_pool.use_credentials()
    join_cluster(state.address, connect_timeout=local_pool.REACH_TIMEOUT_S, field="local pool")
    try:
        print(status_table(local=True))
    finally:
        ray.shutdown()
    return 0


COMMANDS = {"run": _cmd_run, "resume": _cmd_resume, "attack": _cmd_attack, "audit": _cmd_audit, "sweep": _cmd_sweep, "merge": _cmd_merge,
            "validate": _cmd_validate, "list": _cmd_list, "data": _cmd_data, "pool": _cmd_pool}


POOL_COMMANDS = ("run", "resume", "attack", "audit", "sweep")  # the commands that use the local pool without --address


def main(argv: Sequence[str] | None = None) -> int:
    """``privsilo ARGV``: in the local pool's ready driver when one can run it (:mod:`simulator.ready_driver`),
    else in this process."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.command in POOL_COMMANDS and args.address is None:
        from simulator.driver_protocol import delegate
        from simulator.local_pool import state_dir

        def after_lost_driver() -> str:  # what the command left, as far as its command line tells
            args.run_dir = getattr(args, "out", None) or getattr(args, "directory", None)
            return _after_interrupt(args)

        try:
            if (code := delegate(argv, state_dir=state_dir(), after_lost_driver=after_lost_driver)) is not None:
                return code
        except KeyboardInterrupt:  # before the driver took the command: a driver that did sees the caller leave
            print("privsilo: interrupted; no results were written", file=sys.stderr)
            return EXIT_INTERRUPTED
    return _execute(args, argv)


def execute(argv: Sequence[str]) -> int:
    """``privsilo ARGV`` in this process (what the ready driver runs for its caller)."""
    return _execute(_parser().parse_args(list(argv)), list(argv))


def _execute(args: argparse.Namespace, argv: list[str]) -> int:
    args.argv = ["privsilo", *argv]
    from simulator.file_faults import FILE_SYSTEM_ERRNOS, FileSystemFault

    try:
        return COMMANDS[args.command](args)
    except OSError as exc:  # a write not named by its writer (file_faults.writing): one line all the same
        if exc.errno not in FILE_SYSTEM_ERRNOS:
            raise
        return _error(args, FileSystemFault(exc.filename or "a file", exc, action="write or read"))
    except PrivsiloError as exc:
        return _error(args, exc)
    except KeyboardInterrupt:
        print(f"privsilo: interrupted; {_after_interrupt(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _error(args: argparse.Namespace, exc: PrivsiloError) -> int:
    """Print ``exc`` on one line and return its exit status: 2 (bad input), or its own (a lost node, a write the
    file system refused: with what the run left and the command that resumes it)."""
    code = exc.exit_code
    print(f"privsilo: error: {exc}" + ("" if code == EXIT_USER_ERROR else f"; {_after_interrupt(args)}"), file=sys.stderr)
    return code


def _after_interrupt(args: argparse.Namespace) -> str:
    """What an interrupted command (or one that failed for a reason other than its input: a lost node, a full
    disk) left: for a run, the exact command that resumes it, if it can be resumed."""
    if args.command == "sweep":
        return "no results were written; the same command resumes the sweep from its journal"
    directory = getattr(args, "run_dir", None)
    if directory is None:
        return "no results were written"
    from simulator.checkpoint import has_checkpoint

    if has_checkpoint(directory):
        return f"no results were written; continue from the last checkpoint with: {_resume_command(directory)}"
    return "no results were written and no checkpoint either (the run stopped before its first one); start it again"


def entry_point() -> NoReturn:
    """The ``privsilo`` command: :func:`main`, then the exit as the interpreter would make it (other threads
    joined, ``atexit`` handlers run, output flushed) but without tearing down the modules it loaded, which with
    torch, Ray and matplotlib loaded takes seconds (most of the time a Ctrl-C'd run took to exit)."""
    code = main()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry_point()
