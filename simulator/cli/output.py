"""Where a command writes (the ``--out`` policy of :mod:`privsilo.simulator.run_dir.ownership`) and what a command that failed or
was interrupted left there."""
from __future__ import annotations

import argparse
import os
import shlex
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.run_dir.ownership import RUNS_ROOT, claim, new_directory, removed_if_unused


@contextmanager
def output_dir(args: argparse.Namespace, *, default_parent: Path, kind: str) -> Iterator[Path]:
    """``--out``, refused if privsilo may not write ``kind`` of output there (:func:`privsilo.simulator.run_dir.ownership.claim`),
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
def run_directory(args: argparse.Namespace, *, scenario_name: str) -> Iterator[Path]:
    """``privsilo run``'s output directory, locked for the run (:mod:`privsilo.simulator.run_dir.lock`): ``--out``, refused
    where privsilo may not write a run (:func:`privsilo.simulator.run_dir.ownership.claim`) or it holds an interrupted one
    (without ``--overwrite``; resume it instead), or a new ``runs/<scenario name>/<UTC time>``, removed again if
    the run fails before writing."""
    from privsilo.simulator.run_dir.checkpoint import checkpoint_path, has_checkpoint
    from privsilo.simulator.run_dir.lifecycle import settle
    from privsilo.simulator.run_dir.lock import locked

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
                                f"{resume_command(args.out)} or pass --overwrite to start again")
        args.run_dir = args.out
        yield args.out


def resume_command(directory: Path) -> str:
    return f"privsilo resume {shlex.quote(str(directory))}"


def after_interrupt(args: argparse.Namespace) -> str:
    """What an interrupted command (or one that failed for a reason other than its input: a lost node, a full
    disk) left: for a run, the exact command that resumes it, if it can be resumed."""
    if args.command == "sweep":
        return "no results were written; the same command resumes the sweep from its journal"
    directory = getattr(args, "run_dir", None)
    if directory is None:
        return "no results were written"
    from privsilo.simulator.run_dir.checkpoint import has_checkpoint

    if has_checkpoint(directory):
        return f"no results were written; continue from the last checkpoint with: {resume_command(directory)}"
    return "no results were written and no checkpoint either (the run stopped before its first one); start it again"
