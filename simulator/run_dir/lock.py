"""One writer per run directory: an advisory lock held while a command writes into a directory.

The lock is ``flock(2)`` on ``DIR/.privsilo.lock``, taken without waiting: a second ``privsilo run`` or resume
on a directory that another process is writing stops at once with one line naming that process, before it
does any work. The holder writes its pid into the file; the lock itself is the kernel's, so a killed holder
leaves no stale lock (the file may remain; it is reused). The file is removed when its holder lets go, and a
process that opened it just before is told so by the file's inode and opens it afresh. Locks are re-entrant
within a process (``privsilo run`` takes it before choosing what to do, and :func:`privsilo.simulator.engine.run` again).
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.run_dir.write_faults import writing

LOCK_FILE = ".privsilo.lock"
_held: dict[Path, int] = {}  # directories this process holds the lock of, and how many holds are open


class DirectoryInUse(ScenarioError):
    """Another live process holds the lock of the directory."""


@contextmanager
def locked(directory: Path, *, field: str = "--out") -> Iterator[Path]:
    """Hold the lock of ``directory`` (created if missing, and removed again if it is left empty) for the block;
    raise :class:`DirectoryInUse` (naming ``field``) when another process holds it."""
    directory = Path(directory).expanduser().absolute()
    if directory in _held:
        _held[directory] += 1
        try:
            yield directory
        finally:
            _held[directory] -= 1
        return
    created = not directory.exists()
    with writing(directory, remove=False):
        directory.mkdir(parents=True, exist_ok=True)
    descriptor = _acquire(directory, field=field)
    _held[directory] = 1
    try:
        yield directory
    finally:
        del _held[directory]
        (directory / LOCK_FILE).unlink(missing_ok=True)  # still held: nobody else can be between open and lock
        os.close(descriptor)
        if created:
            with suppress(OSError):  # not empty: the run wrote into it
                directory.rmdir()


def _acquire(directory: Path, *, field: str) -> int:
    """The descriptor of the locked lock file, with this process's pid written into it."""
    path = directory / LOCK_FILE
    while True:
        with writing(path, remove=False):  # never remove it: another process may hold it
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise DirectoryInUse(field, str(directory), f"another process is writing this directory ({holder(path)}); "
                                 "one writer per run directory: wait for it to end, or stop it") from None
        try:
            same_file = os.stat(path).st_ino == os.fstat(descriptor).st_ino
        except FileNotFoundError:
            same_file = False
        if same_file:
            os.ftruncate(descriptor, 0)
            os.write(descriptor, f"{os.getpid()}\n".encode())
            return descriptor
        os.close(descriptor)  # its holder removed the file as it let go: open the new one


def holder(path: Path) -> str:
    """``pid N: its command line``, as the lock file at ``path`` names it (its holder writes the pid just after
    taking the lock, so an empty file is read again for a moment)."""
    for _ in range(20):
        with suppress(OSError):
            text = path.read_text().strip()
            if text.isdigit():
                return f"pid {text}{_command_line(int(text))}"
        time.sleep(0.05)
    return "its pid is not written down yet"


def _command_line(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    return ": " + " ".join(word.decode(errors="replace") for word in words if word)


__all__ = ["LOCK_FILE", "DirectoryInUse", "holder", "locked"]
