"""A write that the file system refuses (a full disk, a read-only file system, no permission) as one line.

Every write of a run's files goes through :func:`writing`: an ``OSError`` there becomes a :class:`FileSystemFault`
naming the file and the error (``could not write DIR/checkpoint.pkl: No space left on device (ENOSPC)``), after
the partial file of the write is removed. Files are written beside their final name and renamed over it, so
the last good checkpoint stays whole; the command line adds the command that resumes the run from it and exits
with :data:`EXIT_FILE_SYSTEM_FAULT` (not 2: the input was fine, the disk was not).
"""
from __future__ import annotations

import errno
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

from privsilo.simulator.errors import EXIT_FILE_SYSTEM_FAULT, PrivsiloError

# The errors of a write that the file system refuses (the input is not at fault).
FILE_SYSTEM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG})


class FileSystemFault(PrivsiloError):
    """A write failed for a reason of the file system, not of the input."""

    exit_code = EXIT_FILE_SYSTEM_FAULT

    def __init__(self, path: Path | str, error: OSError, *, action: str = "write") -> None:
        self.path, self.error = Path(path), error
        name = errno.errorcode.get(error.errno or 0, "")
        reason = f"{error.strerror or error}" + (f" ({name})" if name else "")
        super().__init__(f"could not {action} {path}: {reason}")


@contextmanager
def writing(path: Path, *, partial: Path | None = None, remove: bool = True) -> Iterator[None]:
    """Write ``path`` (through ``partial``, where the write goes to a temporary name first) in the block; an
    ``OSError`` of the file system (:data:`FILE_SYSTEM_ERRNOS`; others pass unchanged) removes the file being
    written (``partial``, else ``path``, unless ``remove`` is False) and is raised as :class:`FileSystemFault`."""
    try:
        yield
    except OSError as error:
        if error.errno not in FILE_SYSTEM_ERRNOS:
            raise
        written = Path(partial or path)
        with suppress(OSError):
            if remove and not written.is_dir():  # a directory is named, not removed: its writer cleans up
                written.unlink(missing_ok=True)
        raise FileSystemFault(path, error) from None


__all__ = ["EXIT_FILE_SYSTEM_FAULT", "FILE_SYSTEM_ERRNOS", "FileSystemFault", "writing"]
