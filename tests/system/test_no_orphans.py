"""No Ray process outlives a driver killed with SIGKILL however early, even in the seconds in which Ray is still
starting its agents (``privsilo.simulator.runtime.watchdog``): a real ``privsilo run`` is killed at several points right
after its Ray's GCS appears, and within a bound nothing of that Ray is left, neither a process the test saw below
the driver nor one that names the driver's session in its command line or open files."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.paths import REPO
from tests.support.processes import command_line

LEFT_BOUND_S = 45  # the watchdog's 5 s grace, its scans, and a loaded machine


def _children() -> dict[int, list[tuple[int, int]]]:
    """``{parent pid: [(pid, start time)]}`` of every running process."""
    from privsilo.simulator.runtime.processes import parent_and_start

    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (known := parent_and_start(int(entry))) is not None:
            children.setdefault(known[0], []).append((int(entry), known[1]))
    return children


def _below(root: int) -> dict[int, int]:
    """``{pid: start time}`` of the processes below ``root`` now."""
    children, found, frontier = _children(), {}, [root]
    while frontier:
        for pid, started in children.get(frontier.pop(), ()):
            found.setdefault(pid, started)
            frontier.append(pid)
    return found


@pytest.mark.parametrize("kill_after_s", [0.0, 1.5, 4.0])
def test_a_driver_killed_while_its_ray_starts_leaves_no_process_behind(tmp_path, kill_after_s):
    from privsilo.simulator.runtime.processes import process_start
    from privsilo.simulator.runtime.watchdog import session_pattern, session_processes

    driver = subprocess.Popen([sys.executable, "-m", "privsilo.simulator.cli", "run", str(REPO / "scenarios" / "quickstart.yaml"),
                               "--out", str(tmp_path / "out"), "--no-progress"], cwd=tmp_path, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    seen: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 300
        while not any(b"gcs_server" in command_line(pid) for pid in seen) and driver.poll() is None and time.monotonic() < deadline:
            seen.update(_below(driver.pid))
            time.sleep(0.02)
        assert driver.poll() is None, "the driver ended before its Ray started"
        kill_at = time.monotonic() + kill_after_s
        while time.monotonic() < kill_at:
            seen.update(_below(driver.pid))
            time.sleep(0.02)
        seen.update(_below(driver.pid))
        driver.kill()
        driver.wait(timeout=60)
        pattern = session_pattern(driver.pid)
        deadline = time.monotonic() + LEFT_BOUND_S
        while True:
            left = {pid for pid, started in seen.items() if process_start(pid) == started} | set(session_processes(pattern, since=0))
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert not left, {pid: command_line(pid) for pid in left}
    finally:
        driver.kill()
        leftovers = [pid for pid, started in seen.items() if process_start(pid) == started]
        for pid in {*leftovers, *session_processes(session_pattern(driver.pid), since=0)}:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
