"""The ``privsilo`` argument parser: every command, its options and their help texts."""
from __future__ import annotations

import argparse
from pathlib import Path

from privsilo.simulator.run_dir.invocation import privsilo_version
from privsilo.simulator.runtime.pool.local_head import DEFAULT_IDLE_TIMEOUT_S


def build_parser() -> argparse.ArgumentParser:
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

    for name, does in (("attack", "run a scenario's gradient-inversion attack (attack: block) and score it"),
                       ("audit", "audit a scenario's privacy with canaries (audit: block): an empirical lower bound on epsilon")):
        command = commands.add_parser(name, help=does)
        command.add_argument("scenario", type=Path, help=f"scenario YAML file (its {name}: block; defaults where absent)")
        _add_output_options(command, default=f"runs/<scenario name>_{name}/<UTC time>")
        _add_overrides(command, help="override a scenario key (repeatable)")
        _add_ray_options(command)

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
    """--out and --overwrite (see :mod:`privsilo.simulator.run_dir.ownership`)."""
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
