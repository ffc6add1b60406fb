"""What a run produced ([`RunResult`][privsilo.simulator.engine.results.RunResult], one [`RoundRecord`][privsilo.simulator.engine.results.RoundRecord] per round): built by the engine, written by
``privsilo.simulator.run_dir.writers`` and ``privsilo.simulator.personalisation.outputs``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

from privsilo.simulator.engine.messages import RoundReport, SiloInfo
from privsilo.simulator.scenario import Scenario


@dataclass(frozen=True)
class RoundRecord:
    """One row of ``metrics.csv``: the server's round report, the privacy spent so far and the driver's timings.

    ``training_seconds``: the driver waiting for the round on the actors (sampling, broadcast, local training,
    aggregation, test evaluation, Ray's overhead); ``accounting_seconds``: recording the round's privacy events
    and computing epsilon.
    """

    report: RoundReport
    epsilon: float | None
    training_seconds: float
    accounting_seconds: float

    @property
    def wall_seconds(self) -> float:
        """The round as the progress bar sees it: training plus accounting."""
        return self.training_seconds + self.accounting_seconds


@dataclass(frozen=True)
class RunResult:
    """Everything a run produced; ``privsilo run`` writes it to disk."""

    scenario: Scenario
    rounds: tuple[RoundRecord, ...]
    privacy: Mapping[str, Any]
    timing: Mapping[str, float]
    placement: tuple[SiloInfo, ...]
    model_state: Mapping[str, torch.Tensor]
    users: Mapping[str, Any] | None = None  # the user allocation's summary (data.users), else None
    packing: tuple[tuple[int, ...], ...] = ()  # silo ids hosted by each worker actor
    personalisation: Mapping[str, Any] | None = None  # per-client evaluation of personalised mechanisms, else None
    failures: Mapping[str, Any] | None = None  # crashes, restarts, dropouts (runs with injected crashes), else None
    resumed_from_round: int | None = None  # rounds taken from a checkpoint when the run was resumed, else None

    @property
    def final(self) -> dict[str, Any]:
        last = self.rounds[-1].report
        return {"rounds": len(self.rounds), "accuracy": last.accuracy, "loss": last.loss}
