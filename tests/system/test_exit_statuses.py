"""The exit statuses of ``privsilo``: the table in docs/failures.md lists exactly the codes ``privsilo.simulator.errors``
defines, and the command returns each in its case (those cheap to cause here; a lost node's 3 is in
tests/system/test_cluster_runs.py). Ctrl-C is a real SIGINT to a real ``privsilo run``: status 130, the resume command,
and a checkpoint that ``privsilo resume`` finishes."""
from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time

from privsilo.simulator import errors
from privsilo.simulator.cli import main
from tests.support.paths import REPO
from tests.support.processes import foreground_job, signal_masks

QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
INTERRUPT_BOUND_S = 30  # measured 1.5 s on a loaded 2-core machine; the bound only catches a hang


def _documented_statuses() -> dict[int, str]:
    text = (REPO / "docs" / "failures.md").read_text()
    section = text[text.index("## Exit statuses"):]
    section = section[:section.index("\n## ", 1)]
    return {int(code): meaning for code, meaning in re.findall(r"^\| (\d+) \| ([^|]+) \|", section, flags=re.M)}


def test_the_table_lists_exactly_the_statuses_the_code_defines():
    defined = {value for name, value in vars(errors).items() if name.startswith("EXIT_")}
    assert set(_documented_statuses()) == defined | {1}  # 1: Python's own status for an unexpected error
    assert errors.PrivsiloError.exit_code == errors.EXIT_BAD_INPUT == 2
    assert errors.RuntimeFault.exit_code == errors.EXIT_RUNTIME_FAULT != errors.EXIT_BAD_INPUT


def test_success_and_bad_input(tmp_path, capsys):
    assert main(["validate", str(QUICKSTART)]) == errors.EXIT_SUCCESS
    assert main(["validate", str(tmp_path / "missing.yaml")]) == errors.EXIT_BAD_INPUT
    assert main(["run", str(QUICKSTART), "--set", "federation.rounds=-1", "--no-progress"]) == errors.EXIT_BAD_INPUT
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("privsilo: error: ") for line in lines), lines


def test_ctrl_c_exits_130_with_the_resume_command_and_a_checkpoint_that_resumes(tmp_path):
    out, rounds = tmp_path / "out", 6
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    command = [sys.executable, "-m", "privsilo.simulator.cli", "run", str(QUICKSTART), "--out", str(out), "--no-progress",
               "--set", f"federation.rounds={rounds}"]
    run = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, preexec_fn=foreground_job)
    deadline = time.monotonic() + 300
    while not (out / "checkpoint.pkl").exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.poll() is None, run.communicate()[1][-3000:]
    signals = signal_masks(run.pid)  # what the driver blocks, ignores and catches, should the Ctrl-C go unanswered
    os.killpg(run.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground process group
    interrupted = time.monotonic()
    stdout, stderr = run.communicate(timeout=120)
    assert time.monotonic() - interrupted < INTERRUPT_BOUND_S
    assert run.returncode == errors.EXIT_INTERRUPTED, (signals, stdout[-1000:], stderr[-3000:])
    assert stderr.strip().splitlines()[-1] == (
        f"privsilo: interrupted; no results were written; continue from the last checkpoint with: privsilo resume {out}")
    assert not (out / "summary.json").exists()
    resumed = subprocess.run([sys.executable, "-m", "privsilo.simulator.cli", "resume", str(out), "--no-progress"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == errors.EXIT_SUCCESS, resumed.stderr[-3000:]
    assert len(list(csv.DictReader((out / "metrics.csv").open()))) == rounds
