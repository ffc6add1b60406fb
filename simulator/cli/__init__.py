"""The ``privsilo`` command line: run, resume, attack, audit, sweep, merge, validate, list, data fetch, pool start/status/stop.

User errors (a bad scenario, missing data, an unreachable cluster) print one line and exit with code 2, a run
whose processes or nodes failed with 3, an interrupted one with 130 (the table: docs/failures.md, "Exit statuses";
the codes: :mod:`simulator.errors`). None leaves a half-written output directory. Without ``--out`` every run
gets a new directory, and a finished result in ``--out`` is replaced only with ``--overwrite``
(:mod:`simulator.output_dirs`). Every command imports what
it needs when it runs: ``list`` and ``validate`` never load torch, Ray or matplotlib.

One module per command group: :mod:`~simulator.cli.parser` (the arguments and their help),
:mod:`~simulator.cli.main` (the command table, the ready driver, errors and exit statuses),
:mod:`~simulator.cli.output` (``--out`` and what a failed command left), :mod:`~simulator.cli.run` (run,
resume), :mod:`~simulator.cli.attack_audit`, :mod:`~simulator.cli.experiments` (sweep, merge),
:mod:`~simulator.cli.validate`, :mod:`~simulator.cli.listing`, :mod:`~simulator.cli.data` and
:mod:`~simulator.cli.pool` (pool start/status/stop, and the cluster a command joins).
"""
from simulator.cli.experiments import _seed_option  # what tests/test_sweep.py checks
from simulator.cli.main import COMMANDS, EXIT_USER_ERROR, POOL_COMMANDS, entry_point, execute, main
from simulator.errors import EXIT_INTERRUPTED

__all__ = ["COMMANDS", "EXIT_INTERRUPTED", "EXIT_USER_ERROR", "POOL_COMMANDS", "entry_point", "execute", "main"]
