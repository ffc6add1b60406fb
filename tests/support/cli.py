"""``privsilo`` commands in fresh interpreters (run to their end, or started in a session of their own), and the one-line
user errors they print."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

# Run in a fresh interpreter: the CLI's exit code and the top-level modules it imported, as JSON.
IMPORT_PROBE = (
    "import json, sys\n"
    "from privsilo.simulator.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print(json.dumps({'code': code, 'modules': sorted({name.split('.')[0] for name in sys.modules})}))\n"
)


def privsilo(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 600,
             code: int | None = None) -> subprocess.CompletedProcess:
    """``privsilo ARGS`` in a fresh interpreter run from ``cwd``, with this process's environment plus ``env``;
    with ``code``, assert that it exited with that status (the ends of its output in the message otherwise)."""
    proc = subprocess.run([sys.executable, "-m", "privsilo.simulator.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, **(env or {})})
    if code is not None:
        assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    """The single stderr line of a user error (exit 2, no traceback)."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("privsilo: error: ")
    return lines[0]


def start_privsilo(scenario_file: Path | None, out: Path, *extra: str, command: tuple[str, ...] = ("run",)) -> subprocess.Popen:
    """``privsilo run [SCENARIO] --out OUT ...`` (or ``command`` with OUT) in a session of its own."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    scenario = [] if scenario_file is None else [str(scenario_file)]
    where = ["--out", str(out)] if command == ("run",) else [str(out)]
    return subprocess.Popen([sys.executable, "-m", "privsilo.simulator.cli", *command, *scenario, *where, "--no-progress", *extra],
                            cwd=REPO, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
