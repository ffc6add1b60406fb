"""Injected silo crashes (the scenario's ``faults`` block): which silo's worker process dies in which round, where.

The plan is fixed before the run starts: the listed crashes plus, with ``silo_failure_rate``, one draw per
(round, silo) from a generator of its own derived from the run's seed, so the same seed crashes the same way and a
resumed run crashes where the uninterrupted one did. A crash happens only if the silo takes part in that round.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from privsilo.simulator.scenario import FaultsConfig

CRASH_POINTS = ("setup", "before_upload", "after_upload")
# Entropy word that separates the fault draws from every other stream of the run's seed (privsilo.simulator.data.silos).
FAULT_STREAM = 0xFA17


@dataclass(frozen=True)
class CrashPlan:
    """Where each silo crashes: ``(silo id, 0-based round) -> point`` (one of ``CRASH_POINTS``)."""

    crashes: Mapping[tuple[int, int], str] = field(default_factory=dict)

    def restricted_to(self, silo_ids: Iterable[int]) -> "CrashPlan":
        """The crashes of the named silos only (what one worker needs to know)."""
        hosted = set(silo_ids)
        return CrashPlan({key: at for key, at in self.crashes.items() if key[0] in hosted})

    def due(self, silo_ids: Iterable[int], *, round_index: int, at: str) -> bool:
        """True when one of ``silo_ids`` crashes at ``at`` in round ``round_index``."""
        return any(self.crashes.get((silo, round_index)) == at for silo in silo_ids)


def crash_plan(faults: FaultsConfig, *, seed: int, num_silos: int, rounds: int) -> CrashPlan:
    """The run's crashes: random ones drawn from ``seed`` at ``silo_failure_rate``, then the listed ones (which
    replace a random crash of the same silo and round)."""
    crashes: dict[tuple[int, int], str] = {}
    if faults.silo_failure_rate > 0:
        rng = np.random.default_rng([seed, FAULT_STREAM])
        hits = rng.random((rounds, num_silos)) < faults.silo_failure_rate
        points = rng.integers(len(CRASH_POINTS), size=(rounds, num_silos))
        for round_index, silo in zip(*np.nonzero(hits)):
            crashes[(int(silo), int(round_index))] = CRASH_POINTS[points[round_index, silo]]
    for crash in faults.crashes:
        crashes[(crash.silo, crash.round - 1)] = crash.at
    return CrashPlan(crashes)
