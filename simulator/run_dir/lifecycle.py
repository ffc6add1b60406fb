"""A run's output directory over its life, and the one step that finishes it.

A run writes into its output directory ``DIR`` in place: its checkpoints (``checkpoint.pkl``), its live
TensorBoard events and, once the last round is done, its result files. What ``DIR`` holds says where the run is:

============================================  ==================================================================
``checkpoint.pkl`` without ``summary.json``   in progress, or interrupted: resumable (``privsilo resume DIR``)
``checkpoint.pkl`` and ``summary.json``       interrupted after writing every result file, before removing the
                                              checkpoint: the next privsilo command on ``DIR`` removes it
``summary.json`` without ``checkpoint.pkl``   finished
neither                                       fresh (or a run without checkpoints that did not finish)
============================================  ==================================================================

Finishing writes the result files, ``summary.json`` last (to a temporary name, flushed, renamed), and then removes
``checkpoint.pkl``: that removal is the commit. A kill before it leaves a resumable run, a kill after it a finished
one with no checkpoint (which holds every silo's generator state) left anywhere. A run without a checkpoint
commits with the rename of ``summary.json``. Only one process writes ``DIR`` at a time (:mod:`privsilo.simulator.run_dir.lock`).
"""
from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Callable

from privsilo.simulator.run_dir.checkpoint import CHECKPOINT_FILE, checkpoint_path, remove_stale_partials
from privsilo.simulator.run_dir.write_faults import writing
from privsilo.simulator.run_dir.ownership import MARKER_FILE, check_replaceable, kind_of, write_marker
from privsilo.simulator.run_dir.lock import LOCK_FILE

FINISHED_FILE = "summary.json"
KILL_POINT_VARIABLE = "PRIVSILO_TEST_KILL_AT"  # tests: the step of finishing at which the process kills itself


def kill_point(step: str) -> None:
    """SIGKILL this process here if ``$PRIVSILO_TEST_KILL_AT`` names ``step``: how the tests kill a run for real
    at each step of finishing (an unset variable costs one lookup)."""
    if os.environ.get(KILL_POINT_VARIABLE) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def is_finished(directory: Path) -> bool:
    """``summary.json`` and no checkpoint (see :func:`settle` for a directory holding both)."""
    return (Path(directory) / FINISHED_FILE).is_file() and not checkpoint_path(directory).exists()


def settle(directory: Path) -> None:
    """Complete a finishing interrupted after ``summary.json`` was written (remove the checkpoint), and remove
    the temporary files of writers that were killed. Call it holding the directory's lock. A directory that
    privsilo did not write is left alone."""
    directory = Path(directory)
    if not directory.is_dir() or kind_of(directory) is None:
        return
    if (directory / FINISHED_FILE).is_file():
        _remove_checkpoint(directory)
    for name in (CHECKPOINT_FILE, FINISHED_FILE):
        remove_stale_partials(directory, name)


def clear(directory: Path) -> None:
    """Remove everything in ``directory`` but its lock file and mark it as a run's: a fresh run starts there (an
    earlier result or interrupted run in it is discarded: ``--overwrite``). Refused (``ScenarioError``) where
    ``directory`` holds entries privsilo did not write (:func:`privsilo.simulator.run_dir.ownership.check_replaceable`)."""
    directory = Path(directory)
    check_replaceable(directory)
    for entry in directory.iterdir():
        if entry.name in (LOCK_FILE, MARKER_FILE):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    write_marker(directory, "run")


def finish(directory: Path, write_files: Callable[[Path], None]) -> None:
    """Write a run's result files into ``directory`` (``write_files``, which writes ``summary.json`` last with
    :func:`write_atomically`), flush them to disk, then remove the checkpoint: the commit."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / FINISHED_FILE).unlink(missing_ok=True)  # never a finished look before every file is written
    kill_point("finish:start")
    write_files(directory)
    kill_point("finish:summary")
    _remove_checkpoint(directory)
    kill_point("finish:committed")


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary name beside it, flushed to disk with every other file of
    the directory, then renamed over ``path`` and the directory flushed: ``path`` appears whole and last."""
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    with writing(path, partial=partial):
        with partial.open("w") as handle:
            handle.write(text)
        for entry in path.parent.rglob("*"):
            if entry.is_file() and not entry.is_symlink() and entry.name != LOCK_FILE:
                _fsync(entry)
        kill_point("finish:summary-partial")
        os.replace(partial, path)
        _fsync(path.parent)


def _remove_checkpoint(directory: Path) -> None:
    path = checkpoint_path(directory)
    if path.exists():
        path.unlink()
        _fsync(directory)


def _fsync(path: Path) -> None:
    """Flush a file's or a directory's (its entries') changes to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


__all__ = ["FINISHED_FILE", "KILL_POINT_VARIABLE", "clear", "finish", "is_finished", "kill_point", "settle", "write_atomically"]
