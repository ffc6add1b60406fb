"""What a command knows of other processes on this machine, from ``/proc`` and signal 0 (Linux): whether one
exists, its parent and its start time. A pid with the start time noted beside it names one process for good,
so a pid the kernel reused is never mistaken for it (the local pool and the Ray watchdog signal only such)."""
from __future__ import annotations

import os
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def parent_and_start(pid: int) -> tuple[int, int] | None:
    """A running process's parent pid and start time (clock ticks since boot, ``/proc/PID/stat`` fields 4 and
    22); None if it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()  # after "PID (COMMAND)"
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else (int(fields[1]), int(fields[19]))


def process_start(pid: int) -> int | None:
    """The start time of a running process ``pid`` (see :func:`parent_and_start`), None if there is none."""
    known = parent_and_start(pid)
    return None if known is None else known[1]


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
