"""The ``privsilo`` command line: run, resume, attack, audit, sweep, merge, validate, list, data fetch, pool start/status/stop.

User errors (a bad scenario, missing data, an unreachable cluster) print one line and exit with code 2, a run
whose processes or nodes failed with 3, an interrupted one with 130 (the table: docs/failures.md, "Exit statuses";
the codes: :mod:`privsilo.simulator.errors`). None leaves a half-written output directory. Without ``--out`` every run
gets a new directory, and a finished result in ``--out`` is replaced only with ``--overwrite``
(:mod:`privsilo.simulator.run_dir.ownership`). Every command imports what
it needs when it runs: ``list`` and ``validate`` never load torch, Ray or matplotlib.

One module per command group: :mod:`~privsilo.simulator.cli.parser` (the arguments and their help),
:mod:`~privsilo.simulator.cli.main` (the command table, the ready driver, errors and exit statuses),
:mod:`~privsilo.simulator.cli.output` (``--out`` and what a failed command left), :mod:`~privsilo.simulator.cli.run` (run,
resume), :mod:`~privsilo.simulator.cli.attack_audit`, :mod:`~privsilo.simulator.cli.experiments` (sweep, merge),
:mod:`~privsilo.simulator.cli.validate`, :mod:`~privsilo.simulator.cli.listing`, :mod:`~privsilo.simulator.cli.data` and
:mod:`~privsilo.simulator.cli.pool` (pool start/status/stop, and the cluster a command joins).
"""
from privsilo.simulator.cli.main import COMMANDS, EXIT_USER_ERROR, POOL_COMMANDS, entry_point, execute, main
from privsilo.simulator.errors import EXIT_INTERRUPTED

__all__ = ["COMMANDS", "EXIT_INTERRUPTED", "EXIT_USER_ERROR", "POOL_COMMANDS", "entry_point", "execute", "main"]
