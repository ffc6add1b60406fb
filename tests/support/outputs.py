"""A run's output files, compared without what differs between two runs of the same seed (wall times), and its
TensorBoard events against its metrics.csv."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest


def metrics_without_wall_times(path: str | Path) -> list[dict[str, str]]:
    """The rows of ``metrics.csv`` (``path`` is the file or the run directory holding it) without ``wall_seconds``."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.csv"
    with path.open() as handle:
        return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in csv.DictReader(handle)]


def assert_tensorboard_equals_metrics(out: Path, *, event_files: int = 1, tensorboard: Path | None = None) -> None:
    """The scalars in ``tensorboard`` (default ``out/tensorboard``, in ``event_files`` files) are metrics.csv's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tensorboard = tensorboard or out / "tensorboard"
    events = list(tensorboard.glob("events.out.tfevents.*"))
    assert len(events) == event_files
    accumulator = EventAccumulator(str(tensorboard))
    accumulator.Reload()
    with (out / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    expected = {
        tag: [(int(row["round"]), float(row[tag])) for row in rows if row[tag] not in ("", "nan")]
        for tag in ("loss", "accuracy", "train_loss", "epsilon", "wall_seconds", "num_participants")
    }
    expected = {tag: values for tag, values in expected.items() if values}
    assert set(accumulator.Tags()["scalars"]) == set(expected)
    assert "loss" in expected and "accuracy" in expected and len(expected["loss"]) == len(rows)
    for tag, values in expected.items():
        logged = [(event.step, event.value) for event in accumulator.Scalars(tag)]
        assert [step for step, _ in logged] == [step for step, _ in values], tag
        tolerance = 1e-4 if tag == "wall_seconds" else 0.0  # metrics.csv rounds wall_seconds to 4 decimals
        for (_, got), (_, want) in zip(logged, values):
            assert got == pytest.approx(want, rel=1e-6, abs=tolerance), tag


def logged_steps(directory: Path) -> list[int]:
    """The rounds of the ``loss`` scalars logged in the TensorBoard directory ``directory`` (none while it is absent)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not directory.is_dir():
        return []
    accumulator = EventAccumulator(str(directory))
    accumulator.Reload()
    return [event.step for event in accumulator.Scalars("loss")] if "loss" in accumulator.Tags()["scalars"] else []
