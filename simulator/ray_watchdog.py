"""A watchdog that ends the local Ray a privsilo command started, however that command ends.

``ray.init`` starts the GCS, the raylet and their agents as processes of their own. When the driver is killed
outright (SIGKILL, as the OOM killer does) nothing runs ``ray.shutdown()``, and some of them (the dashboard and
runtime-env agents) would live on. So before starting Ray the driver starts this watchdog, in a session of its
own, with a pipe on its standard input, and tells it the Ray session's directory once Ray is up. Every
:data:`SCAN_SECONDS` the watchdog notes the driver's descendants (pid and start time: Ray's processes rename
themselves, ``ray::DashboardAgent``, so their command lines cannot be relied on). When it reads end-of-file, the
driver is gone (the kernel closes the pipe of a dead process) or has shut Ray down itself, and the watchdog stops
every noted descendant still running and every process of this user whose command line names the session
directory (SIGTERM, then SIGKILL after a grace period). After a ``ray.shutdown()`` the driver says so first, and
the watchdog stops only what is left under the session's name. Other Ray instances on the machine are never touched.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from simulator.processes import parent_and_start, process_start

GRACE_SECONDS = 5.0
SCAN_SECONDS = 2.0  # how often the watchdog notes the driver's descendants
SHUT_DOWN = b"shut down\n"  # the driver's last line after ray.shutdown() (a session directory is an absolute path)


class RayWatchdog:
    """The driver's end of a watchdog process (:func:`start`)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    @classmethod
    def start(cls) -> RayWatchdog:
        process = subprocess.Popen([sys.executable, "-m", "simulator.ray_watchdog"], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return cls(process)

    def watch(self, session_dir: str) -> None:
        """The Ray session to stop when this process ends."""
        self.process.stdin.write(f"{session_dir}\n".encode())
        self.process.stdin.flush()

    def close(self) -> None:
        """Ray was shut down: the watchdog stops what is left of the session, if anything, and exits."""
        self.process.stdin.write(SHUT_DOWN)
        self.process.stdin.close()
        self.process.wait(timeout=GRACE_SECONDS + 10)


def session_processes(session_dir: str) -> list[int]:
    """Pids of this user's processes (this one aside) whose command line names ``session_dir``."""
    needle, uid, found = session_dir.encode(), os.getuid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid == uid and needle in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:  # ended meanwhile
            continue
    return found


def descendants(root: int) -> dict[int, int]:
    """``{pid: start time}`` of the running processes below ``root`` (this one aside)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            known = parent_and_start(int(entry.name))
            if known is not None:
                children.setdefault(known[0], []).append((int(entry.name), known[1]))
    found, frontier = {}, [root]
    while frontier:
        for pid, started in children.get(frontier.pop(), ()):
            if pid not in found:
                found[pid] = started
                frontier.append(pid)
    return found


def _still_running(noted: dict[int, int], session_dir: str) -> list[int]:
    """Noted processes that still run (the same start time: not a new process under a reused pid), and the
    session's by command line."""
    same = [pid for pid, started in noted.items() if process_start(pid) == started]
    return sorted({*same, *(session_processes(session_dir) if session_dir else ())})


def stop(noted: dict[int, int], session_dir: str) -> None:
    """SIGTERM the processes of the session, and SIGKILL those still there after :data:`GRACE_SECONDS`."""
    deadline = time.monotonic() + GRACE_SECONDS
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        for pid in _still_running(noted, session_dir):
            try:
                os.kill(pid, signal_number)
            except ProcessLookupError:
                pass
        while signal_number == signal.SIGTERM and _still_running(noted, session_dir) and time.monotonic() < deadline:
            time.sleep(0.2)


def main() -> None:
    driver, session_dir, noted, received = os.getppid(), "", {}, b""
    while True:
        readable, _, _ = select.select([sys.stdin.fileno()], [], [], SCAN_SECONDS)
        if readable:
            chunk = os.read(sys.stdin.fileno(), 4096)
            if not chunk:  # end-of-file: the driver closed the pipe, or died
                break
            received += chunk
            lines = [line + b"\n" for line in received.split(b"\n")[:-1]]
            session_dir = next((line.decode().strip() for line in lines if line != SHUT_DOWN), "")
        if os.getppid() != driver:  # the driver died between two reads
            break
        noted.update(descendants(driver))
    shut_down = received.endswith(SHUT_DOWN)
    stop({} if shut_down else noted, session_dir)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the driver is not for the watchdog
    main()
