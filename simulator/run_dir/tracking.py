"""Experiment tracking (``--log tensorboard``): each round's metrics as TensorBoard scalars in ``<out>/tensorboard/``.

The scalars are those of ``metrics.csv`` (``loss``, ``accuracy``, ``train_loss`` where the mechanism reveals it,
``epsilon`` where a guarantee covers the round, ``wall_seconds``, ``num_participants``), at step = the 1-based
round, written and flushed as each round ends, so TensorBoard shows a run while it runs. A resumed run writes a
new event file into the same directory whose first event purges what the interrupted run logged after its last
checkpoint (those rounds run again), so each step keeps one value. TensorBoard is an optional extra: from a
checkout, ``pip install -e ".[tracking]"``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.run_dir.write_faults import writing

if TYPE_CHECKING:
    from privsilo.simulator.engine.results import RoundRecord

TENSORBOARD_DIR = "tensorboard"


def check_trackers(names: Sequence[str]) -> None:
    """Refuse an unknown tracker, or one whose package is not installed, before a run starts."""
    for name in names:
        if name not in WRITERS:
            raise ScenarioError("--log", name, f"allowed: {', '.join(WRITERS)}")
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise ScenarioError("--log", name, 'the tensorboard package is not installed: pip install -e ".[tracking]" (from a checkout of privsilo)') from None


def record_scalars(record: RoundRecord) -> dict[str, float]:
    """A round's scalars that have a value (the same numbers as its row of ``metrics.csv``)."""
    report = record.report
    values = {"loss": report.loss, "accuracy": report.accuracy, "train_loss": report.train_loss,
              "epsilon": record.epsilon, "wall_seconds": record.wall_seconds,
              "num_participants": float(len(report.participants))}
    return {key: float(value) for key, value in values.items() if value is not None and not math.isnan(value)}


class TensorBoardLog:
    """A run's TensorBoard event file in ``log_dir``; ``first_step``: the first round it logs (1-based), from which
    on whatever earlier event files of the directory hold is purged (an interrupted run's rounds after its last
    checkpoint)."""

    def __init__(self, log_dir: Path, *, first_step: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        with writing(self.log_dir):
            self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=first_step)

    def write(self, step: int, record: RoundRecord) -> None:
        with writing(self.log_dir):  # TensorBoard's writer thread raises a failed write on the next call
            for tag, value in record_scalars(record).items():
                self.writer.add_scalar(tag, value, global_step=step)
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def open_trackers(names: Sequence[str], directory: Path, *, first_step: int) -> list[TensorBoardLog]:
    """A writer per tracker named (``--log``), each writing into ``directory`` (e.g. ``<out>/tensorboard``)."""
    return [WRITERS[name](directory, first_step=first_step) for name in names]


WRITERS = {"tensorboard": TensorBoardLog}

__all__ = ["TENSORBOARD_DIR", "TensorBoardLog", "WRITERS", "check_trackers", "open_trackers", "record_scalars"]
