"""The runs experiments are made of: a sweep's :class:`SweepRun` (headline figures) and a personalised sweep's
:class:`GridRun` (a finished run's kept output directory), shared by the runners and their tables and plots."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SweepRun:
    """One run of the sweep: its axis labels, seed and headline results."""

    labels: dict[str, str]
    seed: int
    accuracy: float
    loss: float
    epsilon: float | None
    max_spent_over_budget: float | None
    seconds: float
    accuracy_per_round: tuple[float, ...] = ()  # for the mechanism's own plots (journaled, not in runs.csv)
    epsilon_per_round: tuple[float | None, ...] = ()
    loss_per_round: tuple[float, ...] = ()  # the test MSE per round of a regression task, which has no accuracy
    attack_psnr: float | None = None  # with an attack block: mean over its (silo, seed) attacks
    attack_ssim: float | None = None
    attack_success_rate: float | None = None


@dataclass(frozen=True)
class GridRun:
    """One finished run of the grid: its axis labels, seed and output directory."""

    labels: dict[str, str]
    seed: int
    directory: Path

    def summary(self) -> dict[str, Any]:
        return json.loads((self.directory / "summary.json").read_text())
