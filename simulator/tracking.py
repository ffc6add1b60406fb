"""Experiment tracking (``--log tensorboard``): each round's metrics as TensorBoard scalars in ``<out>/tensorboard/``.

The scalars are those of ``metrics.csv`` (``loss``, ``accuracy``, ``train_loss`` where the mechanism reveals it,
``epsilon`` where a guarantee covers the round, ``wall_seconds``, ``num_participants``), at step = the 1-based
round, written with the rest of the run's files once the run has finished. TensorBoard is an optional extra:
``pip install privsilo[tracking]``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from simulator.errors import ScenarioError

if TYPE_CHECKING:
    from simulator.results import RunResult

TENSORBOARD_DIR = "tensorboard"


def check_trackers(names: Sequence[str]) -> None:
    """Refuse an unknown tracker, or one whose package is not installed, before a run starts."""
    for name in names:
        if name not in WRITERS:
            raise ScenarioError("--log", name, f"allowed: {', '.join(WRITERS)}")
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise ScenarioError("--log", name, "the tensorboard package is not installed: pip install privsilo[tracking]") from None


def round_scalars(result: RunResult) -> list[dict[str, float]]:
    """Per round, the scalars that have a value (the same numbers as ``metrics.csv``)."""
    rows = []
    for record in result.rounds:
        report = record.report
        values = {"loss": report.loss, "accuracy": report.accuracy, "train_loss": report.train_loss,
                  "epsilon": record.epsilon, "wall_seconds": record.wall_seconds,
                  "num_participants": float(len(report.participants))}
        rows.append({key: float(value) for key, value in values.items() if value is not None and not math.isnan(value)})
    return rows


def write_tensorboard(result: RunResult, out_dir: Path) -> None:
    """One event file in ``out_dir/tensorboard/``: every round's scalars at step = round (1-based)."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(out_dir / TENSORBOARD_DIR)) as writer:
        for step, scalars in enumerate(round_scalars(result), start=1):
            for tag, value in scalars.items():
                writer.add_scalar(tag, value, global_step=step)


def write_tracking(result: RunResult, out_dir: Path, trackers: Sequence[str]) -> None:
    """Write the run's metrics for each tracker named (``--log``) into ``out_dir``."""
    for name in trackers:
        WRITERS[name](result, out_dir)


WRITERS = {"tensorboard": write_tensorboard}

__all__ = ["WRITERS", "check_trackers", "round_scalars", "write_tensorboard", "write_tracking"]
