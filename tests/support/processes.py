"""Free ports on the loopback interface, processes' command lines and signal masks, and killing a process session at
once."""
from __future__ import annotations

import os
import signal
import socket
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free now (all bound at once, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def command_line(pid: int) -> bytes:
    """A process's command line as /proc gives it (NUL-separated), empty if it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def foreground_job() -> None:
    """``preexec_fn`` for a command a test interrupts as a terminal's Ctrl-C would: SIGINT at its default, as in a
    shell's foreground job, also where this test process inherited it ignored (a suite started as a background job
    or under nohup ignores SIGINT, and so would the command)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signal_masks(pid: int) -> dict[str, str]:
    """A process's pending, blocked, ignored and caught signal masks as /proc gives them (empty if it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {line.split(":")[0]: line.split()[1] for line in lines if line.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt"))}


def kill_session(leader: int) -> None:
    """SIGKILL the driver and every process of its session (the Ray processes it started) at once."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == leader:
                    members.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    for pid in members:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
