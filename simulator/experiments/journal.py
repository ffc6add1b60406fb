"""The journal that makes a long sweep resumable.

While a sweep runs, every finished run is appended to ``<out>.unfinished/runs.jsonl`` (one JSON line, flushed
and fsynced), keyed by a hash of its complete validated scenario; the per-record arrays the sweep keeps of
one run (``Mechanism.sweep_records``, e.g. rPDP's) go to ``records.npz`` beside it, and a personalised run's output directory to
``runs/<name>``. Running the same sweep again skips the runs whose
scenario is already in the journal (the same scenario and seed give the same result). The journal is deleted
once the output directory has been written.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from privsilo.simulator.run_dir.write_faults import writing
from privsilo.simulator.scenario import Scenario

RUNS_FILE = "runs.jsonl"
RECORDS_FILE = "records.npz"
EARLIER_RECORDS_FILE = "rpdp_records.npz"  # the name before mechanisms kept their own records: still read
UNFINISHED_SUFFIX = ".unfinished"


def scenario_key(scenario: Scenario) -> str:
    """A stable hash of everything that determines a run's result."""
    text = json.dumps(scenario.to_dict(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class SweepJournal:
    """Finished runs of one sweep output directory, on disk next to it."""

    def __init__(self, out_dir: Path) -> None:
        out_dir = Path(out_dir).expanduser().resolve()
        self.path = out_dir.with_name(f"{out_dir.name}{UNFINISHED_SUFFIX}")

    def load_runs(self) -> dict[str, dict[str, Any]]:
        """``{scenario key: run fields}``; a line cut short by a crash is ignored."""
        runs: dict[str, dict[str, Any]] = {}
        file = self.path / RUNS_FILE
        if not file.is_file():
            return runs
        for line in file.read_text().splitlines():
            try:
                entry = json.loads(line)
                runs[entry["key"]] = entry["run"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
        return runs

    def add_run(self, key: str, run: Any) -> None:
        line = json.dumps({"key": key, "run": dataclasses.asdict(run)})
        with writing(self.path / RUNS_FILE, remove=False):  # a line cut short is ignored when read
            self.path.mkdir(parents=True, exist_ok=True)
            with (self.path / RUNS_FILE).open("a") as handle:
                handle.write(line + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        shutil.rmtree(self.checkpoint_directory(key), ignore_errors=True)

    def run_directory(self, name: str) -> Path:
        """Where the kept output directory of run ``name`` goes while the sweep runs (``""``: their parent)."""
        return self.path / "runs" / name

    def tracking_directory(self, name: str) -> Path:
        """Where run ``name`` logs its rounds for the trackers (``--log``) while the sweep runs (``""``: their
        parent, one TensorBoard run per grid run)."""
        return self.path / "tensorboard" / name

    def checkpoint_directory(self, key: str) -> Path:
        """Where the run of scenario ``key`` keeps its checkpoints while it runs (an interrupted run resumes from
        there; removed once the run is journaled)."""
        return self.path / "checkpoints" / key

    def save_records(self, key: str, records: Mapping[str, np.ndarray]) -> None:
        """The per-record arrays kept of the run ``key`` (written to a temporary name, then renamed)."""
        staging = self.path / f".{RECORDS_FILE}"
        with writing(self.path / RECORDS_FILE, partial=staging):
            self.path.mkdir(parents=True, exist_ok=True)
            with staging.open("wb") as handle:
                np.savez(handle, key=np.array(key), **records)
            staging.replace(self.path / RECORDS_FILE)

    def load_records(self, key: str) -> dict[str, np.ndarray] | None:
        file = next((f for f in (self.path / RECORDS_FILE, self.path / EARLIER_RECORDS_FILE) if f.is_file()), None)
        if file is None:
            return None
        with np.load(file) as data:
            if str(data["key"]) != key:
                return None
            return {name: data[name] for name in data.files if name != "key"}

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def latest_unfinished(parent: Path) -> Path | None:
    """The output directory of the most recently journaled unfinished sweep in ``parent``, or None."""
    journals = [path for path in parent.glob(f"*{UNFINISHED_SUFFIX}") if path.is_dir()]
    if not journals:
        return None
    latest = max(journals, key=lambda path: path.stat().st_mtime)
    return latest.with_name(latest.name.removesuffix(UNFINISHED_SUFFIX))


__all__ = ["SweepJournal", "latest_unfinished", "scenario_key"]
