"""``privsilo ARGV``: the command table, where a command runs (the local pool's ready driver, else this process),
and how its errors and interrupts end (one line, an exit status)."""
from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
from typing import NoReturn, Sequence

from privsilo.simulator.cli.attack_audit import cmd_attack, cmd_audit
from privsilo.simulator.cli.data import cmd_data
from privsilo.simulator.cli.experiments import cmd_merge, cmd_sweep
from privsilo.simulator.cli.listing import cmd_list
from privsilo.simulator.cli.output import after_interrupt
from privsilo.simulator.cli.parser import build_parser
from privsilo.simulator.cli.pool import cmd_pool
from privsilo.simulator.cli.run import cmd_resume, cmd_run
from privsilo.simulator.cli.validate import cmd_validate
from privsilo.simulator.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, PrivsiloError

EXIT_USER_ERROR = EXIT_BAD_INPUT

COMMANDS = {"run": cmd_run, "resume": cmd_resume, "attack": cmd_attack, "audit": cmd_audit, "sweep": cmd_sweep, "merge": cmd_merge,
            "validate": cmd_validate, "list": cmd_list, "data": cmd_data, "pool": cmd_pool}


POOL_COMMANDS = ("run", "resume", "attack", "audit", "sweep")  # the commands that use the local pool without --address


def main(argv: Sequence[str] | None = None) -> int:
    """``privsilo ARGV``: in the local pool's ready driver when one can run it (:mod:`privsilo.simulator.cli.ready_driver`),
    else in this process."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.command in POOL_COMMANDS and args.address is None:
        from privsilo.simulator.runtime.pool.driver_protocol import delegate
        from privsilo.simulator.runtime.pool.local_head import state_dir

        def after_lost_driver() -> str:  # what the command left, as far as its command line tells
            args.run_dir = getattr(args, "out", None) or getattr(args, "directory", None)
            return after_interrupt(args)

        try:
            if (code := delegate(argv, state_dir=state_dir(), after_lost_driver=after_lost_driver)) is not None:
                return code
        except KeyboardInterrupt:  # before the driver took the command: a driver that did sees the caller leave
            print("privsilo: interrupted; no results were written", file=sys.stderr)
            return EXIT_INTERRUPTED
    return _execute(args, argv)


def execute(argv: Sequence[str]) -> int:
    """``privsilo ARGV`` in this process (what the ready driver runs for its caller)."""
    return _execute(build_parser().parse_args(list(argv)), list(argv))


def _execute(args: argparse.Namespace, argv: list[str]) -> int:
    args.argv = ["privsilo", *argv]
    from privsilo.simulator.run_dir.write_faults import FILE_SYSTEM_ERRNOS, FileSystemFault

    try:
        return COMMANDS[args.command](args)
    except OSError as exc:  # a write not named by its writer (file_faults.writing): one line all the same
        if exc.errno not in FILE_SYSTEM_ERRNOS:
            raise
        return _error(args, FileSystemFault(exc.filename or "a file", exc, action="write or read"))
    except PrivsiloError as exc:
        return _error(args, exc)
    except KeyboardInterrupt:
        print(f"privsilo: interrupted; {after_interrupt(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _error(args: argparse.Namespace, exc: PrivsiloError) -> int:
    """Print ``exc`` on one line and return its exit status: 2 (bad input), or its own (a lost node, a write the
    file system refused: with what the run left and the command that resumes it)."""
    code = exc.exit_code
    print(f"privsilo: error: {exc}" + ("" if code == EXIT_USER_ERROR else f"; {after_interrupt(args)}"), file=sys.stderr)
    return code


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
