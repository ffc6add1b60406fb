"""A watchdog that ends the local Ray a privsilo command started, however that command ends.

``ray.init`` starts the GCS, the raylet and their agents as processes of their own. When the driver is killed
outright (SIGKILL, as the OOM killer does) nothing runs ``ray.shutdown()``, and some of them (the dashboard and
runtime-env agents) would live on. So before starting Ray the driver starts this watchdog, in a session of its
own, with a pipe on its standard input, and tells it the Ray session's directory once Ray is up. The watchdog
only reads the pipe: when it reads end-of-file, the driver is gone (the kernel closes the pipe of a dead
process) or has shut Ray down itself, and the watchdog stops every process of this user whose command line names
that session directory (SIGTERM, then SIGKILL after a grace period). Other Ray instances on the machine have
other session directories and are never touched.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GRACE_SECONDS = 5.0


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


def stop_session(session_dir: str) -> None:
    """SIGTERM every process of the session, and SIGKILL those still there after :data:`GRACE_SECONDS`."""
    deadline = time.monotonic() + GRACE_SECONDS
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        for pid in session_processes(session_dir):
            try:
                os.kill(pid, signal_number)
            except ProcessLookupError:
                pass
        while signal_number == signal.SIGTERM and session_processes(session_dir) and time.monotonic() < deadline:
            time.sleep(0.2)


def main() -> None:
    session_dir = ""
    for line in sys.stdin:  # returns at end-of-file: the driver closed the pipe, or died
        session_dir = line.strip() or session_dir
    if session_dir:
        stop_session(session_dir)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the driver is not for the watchdog
    main()
