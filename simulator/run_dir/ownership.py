"""Where the commands write: a new directory per run by default, never over a finished one unless asked, and
never over files privsilo did not write.

Without ``--out`` a command writes to ``runs/<name>/<UTC start time YYYYmmdd-HHMMSS>``; when that directory is
taken (two runs started in the same second) the next free of ``-2``, ``-3``, ... is appended. The directory is
created when it is chosen (``mkdir`` either creates it or fails, so two runs never pick the same one) and removed
again if the run fails before writing into it. ``--out`` always names a directory: a file there is refused.

Every output directory privsilo writes carries the marker ``.privsilo-output`` (JSON: the kind of output, the
privsilo version and the names of the entries privsilo wrote beside it). An explicit ``--out`` is accepted when
it is missing or empty, or when privsilo wrote it (:func:`claim`): a non-empty directory without the marker is
refused before any work, ``--overwrite`` or not, and so is one of privsilo's that also holds entries privsilo did
not write (files put into it later). A finished result, or another command's output, is replaced only with
``--overwrite``. A run directory written before the marker existed is recognised by its checkpoint (privsilo's
header) or its ``summary.json`` (privsilo's keys); every entry in it counts as privsilo's.
"""
from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from privsilo.simulator.run_dir.checkpoint import CHECKPOINT_FILE, MAGIC
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.run_dir.write_faults import writing
from privsilo.simulator.run_dir.invocation import privsilo_version
from privsilo.simulator.run_dir.lock import LOCK_FILE

RUNS_ROOT = Path("runs")
STAMP_FORMAT = "%Y%m%d-%H%M%S"
MARKER_FILE = ".privsilo-output"
# The file that says each kind of output is finished.
FINISHED_FILES = {"run": "summary.json", "attack": "attack.json", "audit": "audit.json", "sweep": "runs.csv", "merge": "runs.csv"}
# Entries of a privsilo directory that are privsilo's whether or not the marker lists them: what a run writes
# before it finishes (its lock, checkpoint and live TensorBoard events) and the temporary files of its writers.
ALWAYS_OWNED = frozenset({MARKER_FILE, LOCK_FILE, CHECKPOINT_FILE, "summary.json", "tensorboard"})
PARTIAL = re.compile(r"\..+\.partial-\d+")
SHOWN = 3  # entries a refusal names


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
        remove_if_unused(directory)  # not empty (or already gone): left
        raise


def check_out_directory(out: Path | None, field: str = "--out", *, names: str = "a directory (created if missing)") -> None:
    """Refuse an output path that is, or lies under, something other than a directory (before any work);
    ``names`` says what ``field`` names."""
    if out is None:
        return
    for path in (out, *out.parents):
        if path.exists() or path.is_symlink():
            if not path.is_dir():
                where = "is" if path == out else f"lies under {str(path)!r}, which is"
                what = "a symbolic link that leads nowhere (a loop, or a missing target)" if not path.exists() else "a file"
                raise ScenarioError(field, str(out), f"{where} {what}; {field} names {names}")
            return


def entries(directory: Path) -> list[str]:
    """The names in ``directory`` but its lock file, sorted (none if it is missing)."""
    if not directory.is_dir():
        return []
    return sorted(entry.name for entry in directory.iterdir() if entry.name != LOCK_FILE)


def read_marker(directory: Path) -> dict[str, Any] | None:
    """The marker privsilo wrote into ``directory``, or None where there is none (or it is not one of privsilo's)."""
    try:
        marker = json.loads((Path(directory) / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("written_by") == "privsilo" else None


def write_marker(directory: Path, kind: str) -> None:
    """Write (or rewrite) the marker of ``directory``: privsilo's ``kind`` of output, listing every entry now in it."""
    listed = [name for name in entries(directory) if name != MARKER_FILE and not PARTIAL.fullmatch(name)]
    marker = {"written_by": "privsilo", "kind": kind, "version": privsilo_version(), "files": listed}
    final = Path(directory) / MARKER_FILE
    partial = final.with_name(f".{MARKER_FILE}.partial-{os.getpid()}")
    with writing(final, partial=partial):
        partial.write_text(json.dumps(marker, indent=1) + "\n")
        os.replace(partial, final)


def kind_of(directory: Path) -> str | None:
    """``run``, ``attack``, ... where privsilo wrote ``directory`` (the marker, or a run directory of a privsilo
    without markers: its checkpoint's header or its summary.json), else None."""
    directory = Path(directory)
    marker = read_marker(directory)
    if marker is not None:
        return str(marker.get("kind"))
    with suppress(OSError), (directory / CHECKPOINT_FILE).open("rb") as handle:
        if handle.read(len(MAGIC)) == MAGIC:
            return "run"
    with suppress(OSError, ValueError):
        summary = json.loads((directory / FINISHED_FILES["run"]).read_text())
        if isinstance(summary, dict) and {"config", "final", "privacy"} <= set(summary):
            return "run"
    return None


def not_written_by_privsilo(directory: Path) -> list[str]:
    """The entries of ``directory`` that privsilo did not write there: all of them in a non-empty directory
    without the marker (nor a marker-less run directory's signs), else those the marker does not list."""
    names = entries(directory)
    marker = read_marker(directory)
    if marker is None:
        return [] if kind_of(directory) is not None else names
    owned = ALWAYS_OWNED | set(marker.get("files") or ())
    return [name for name in names if name not in owned and not PARTIAL.fullmatch(name)]


def check_replaceable(directory: Path, field: str = "--out") -> None:
    """Refuse to write over ``directory`` when it holds entries privsilo did not write (naming a few of them):
    privsilo deletes only what it wrote."""
    foreign = not_written_by_privsilo(Path(directory))
    if not foreign:
        return
    shown = ", ".join(foreign[:SHOWN]) + (f" and {len(foreign) - SHOWN} more" if len(foreign) > SHOWN else "")
    whose = "privsilo's output directory also holds" if read_marker(Path(directory)) else "holds"
    raise ScenarioError(field, str(directory), f"{whose} files privsilo did not write ({shown}); privsilo writes only "
                        "into a new or empty directory or one it wrote, and never deletes what it did not write: "
                        "choose another directory (or move those files out), or leave --out out to write to a new "
                        "runs/<name>/<UTC time>")


def claim(out: Path, *, kind: str, overwrite: bool, field: str = "--out") -> None:
    """Check, before any work, that ``kind`` of output may be written to ``out``: a directory (or nothing yet),
    empty or written by privsilo alone; holding no finished result nor another kind of output unless ``overwrite``."""
    check_out_directory(out, field)
    if not entries(out):
        return
    check_replaceable(out, field)
    found = kind_of(out)
    if found != kind and not overwrite:
        raise ScenarioError(field, str(out), f"holds privsilo's {found} output; pass --overwrite to replace it, choose "
                            "another directory, or leave --out out to write to a new runs/<name>/<UTC time>")
    refuse_finished(out, FINISHED_FILES[kind], overwrite=overwrite, field=field)


def remove_if_unused(directory: Path) -> None:
    """Remove ``directory`` if nothing but its marker is in it (a run that failed before writing)."""
    with suppress(OSError):
        if entries(directory) == [MARKER_FILE]:
            (directory / MARKER_FILE).unlink()
        directory.rmdir()


def refuse_finished(out: Path, finished_file: str, *, overwrite: bool, field: str = "--out") -> None:
    """Refuse ``--out`` when it holds ``finished_file`` (a finished result), unless ``overwrite``."""
    if not overwrite and (out / finished_file).exists():
        raise ScenarioError(
            field, str(out),
            f"already holds a finished result ({finished_file}); pass --overwrite to replace it, choose another "
            "directory, or leave --out out to write to a new runs/<name>/<UTC time>",
        )


__all__ = ["FINISHED_FILES", "MARKER_FILE", "RUNS_ROOT", "check_out_directory", "check_replaceable", "claim", "entries", "kind_of",
           "new_directory", "not_written_by_privsilo", "read_marker", "refuse_finished", "remove_if_unused",
           "removed_if_unused", "write_marker"]
