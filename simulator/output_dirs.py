"""Where the commands write: a new directory per run by default, and never over a finished one unless asked.

Without ``--out`` a command writes to ``runs/<name>/<UTC start time YYYYmmdd-HHMMSS>``; when that directory is
taken (two runs started in the same second) the next free of ``-2``, ``-3``, ... is appended. The directory is
created when it is chosen (``mkdir`` either creates it or fails, so two runs never pick the same one) and removed
again if the run fails before writing into it. An explicit ``--out`` that already holds a finished result is
refused unless ``--overwrite`` is given. ``--out`` always names a directory: a file there is refused.
"""
from __future__ import annotations

from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from simulator.errors import ScenarioError

RUNS_ROOT = Path("runs")
STAMP_FORMAT = "%Y%m%d-%H%M%S"


def new_directory(parent: Path, *, now: datetime | None = None) -> Path:
    """Create and return ``parent/<UTC time>`` (``now``, default the current time), or ``-2``, ``-3``, ... if taken."""
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime(STAMP_FORMAT)
    parent.mkdir(parents=True, exist_ok=True)
    candidate, number = parent / stamp, 1
    while True:
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            number += 1
            candidate = parent / f"{stamp}-{number}"


@contextmanager
def removed_if_unused(directory: Path) -> Iterator[Path]:
    """Yield ``directory``; if the block fails while the directory is still empty, remove it."""
    try:
        yield directory
    except BaseException:
        with suppress(OSError):  # not empty (or already gone): leave it
            directory.rmdir()
        raise


def check_out_directory(out: Path | None, field: str = "--out") -> None:
    """Refuse an output path that is, or lies under, something other than a directory (before any work)."""
    if out is None:
        return
    for path in (out, *out.parents):
        if path.exists() or path.is_symlink():
            if not path.is_dir():
                where = "is" if path == out else f"lies under {str(path)!r}, which is"
                raise ScenarioError(field, str(out), f"{where} a file; {field} names a directory (created if missing)")
            return


def refuse_finished(out: Path, finished_file: str, *, overwrite: bool) -> None:
    """Refuse ``--out`` when it holds ``finished_file`` (a finished result), unless ``overwrite``."""
    if not overwrite and (out / finished_file).exists():
        raise ScenarioError(
            "--out", str(out),
            f"already holds a finished result ({finished_file}); pass --overwrite to replace it, choose another "
            "directory, or leave --out out to write to a new runs/<name>/<UTC time>",
        )


__all__ = ["RUNS_ROOT", "check_out_directory", "new_directory", "refuse_finished", "removed_if_unused"]
