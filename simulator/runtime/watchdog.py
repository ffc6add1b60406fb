"""A watchdog that ends the local Ray a privsilo command started, however that command ends.

``ray.init`` starts the GCS, the raylet and their agents as processes of their own. When the driver is killed
outright (SIGKILL, as the OOM killer does) nothing runs ``ray.shutdown()``: the GCS and the raylet die with it,
but the agents they started (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) and the workers would live on. So
before starting Ray the driver starts this watchdog, in a session of its own, with a pipe on its standard input.
Every :data:`SCAN_SECONDS` the watchdog notes the driver's descendants (pid and start time). When it reads
end-of-file, the driver is gone (the kernel closes the pipe of a dead process) or has shut Ray down itself, and
the watchdog stops every noted descendant still running and every process of the driver's Ray sessions
(SIGTERM, then SIGKILL after a grace period), until none is left.

A process belongs to the driver's Ray session when it started after the watchdog and its command line or one of
its open files names a directory ``.../session_<date>_<driver pid>`` (Ray names a local session after the pid of
the process that starts it, and every Ray process writes its logs there). Open files matter: Ray's agents rename
themselves, so their command lines no longer name the session, and one started in the last instant before a kill
is neither a noted descendant (the scan had not seen it) nor, once its parent died, a descendant at all. After a
``ray.shutdown()`` the driver says so first, and the watchdog stops only what is left of its sessions. Other Ray
instances on the machine are never touched: they were started by another process, or before the watchdog.
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from privsilo.simulator.runtime.processes import descendants, process_start

GRACE_SECONDS = 5.0
SCAN_SECONDS = 2.0  # how often the watchdog notes the driver's descendants
SHUT_DOWN = b"shut down\n"  # the driver's last line after ray.shutdown()
STOP_POLL_SECONDS = 0.5  # how often, while stopping, the watchdog looks again for what is left
STOP_LIMIT_SECONDS = 60.0  # a process that outlives this many seconds of SIGKILLs (stuck in the kernel) is left


class RayWatchdog:
    """The driver's end of a watchdog process (:func:`start`)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    @classmethod
    def start(cls) -> RayWatchdog:
        process = subprocess.Popen([sys.executable, "-m", "privsilo.simulator.runtime.watchdog"], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return cls(process)

    def close(self) -> None:
        """Ray was shut down: the watchdog stops what is left of the session, if anything, and exits."""
        self.process.stdin.write(SHUT_DOWN)
        self.process.stdin.close()
        self.process.wait(timeout=GRACE_SECONDS + 10)


def session_pattern(driver: int) -> re.Pattern[bytes]:
    """What names a directory of a local Ray session that process ``driver`` started (in a command line or a path)."""
    return re.compile(rb"/session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_%d(?![0-9])" % driver)


def session_processes(pattern: re.Pattern[bytes], *, since: int) -> list[int]:
    """Pids of this user's processes (this one aside) started at or after ``since`` (clock ticks since boot) whose
    command line or one of whose open files matches ``pattern``."""
    uid, found = os.getuid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != uid or (process_start(int(entry.name)) or -1) < since:
                continue
            if pattern.search((entry / "cmdline").read_bytes()) or any(
                    pattern.search(os.readlink(fd).encode()) for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
        except OSError:  # ended meanwhile
            continue
    return found


def _still_running(noted: dict[int, int], pattern: re.Pattern[bytes], since: int) -> list[int]:
    """Noted processes that still run (the same start time: not a new process under a reused pid), and those of
    the driver's Ray sessions."""
    same = [pid for pid, started in noted.items() if process_start(pid) == started]
    return sorted({*same, *session_processes(pattern, since=since)})


def stop(noted: dict[int, int], pattern: re.Pattern[bytes], since: int) -> None:
    """SIGTERM the processes of the session, and SIGKILL those still there after :data:`GRACE_SECONDS` (and any
    that appear meanwhile), until none is left (or :data:`STOP_LIMIT_SECONDS` passed)."""
    started = time.monotonic()
    while (running := _still_running(noted, pattern, since)) and time.monotonic() - started < STOP_LIMIT_SECONDS:
        late = time.monotonic() - started > GRACE_SECONDS
        for pid in running:
            try:
                os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(STOP_POLL_SECONDS)


def main() -> None:
    driver, noted, received = os.getppid(), {}, b""
    since = process_start(os.getpid())
    while True:
        readable, _, _ = select.select([sys.stdin.fileno()], [], [], SCAN_SECONDS)
        if readable:
            chunk = os.read(sys.stdin.fileno(), 4096)
            if not chunk:  # end-of-file: the driver closed the pipe, or died
                break
            received += chunk
        if os.getppid() != driver:  # the driver died between two reads
            break
        noted.update(descendants(driver))
    stop({} if received.endswith(SHUT_DOWN) else noted, session_pattern(driver), since)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the driver is not for the watchdog
    main()
