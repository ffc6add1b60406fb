"""An audit's canaries: which are included, which silo hosts each, and how each is scored after training.

Canary ``i`` of ``M`` is included with probability 1/2, independently, from the audit's own seed (Steinke, Nasr,
Jagielski 2023, Alg. 1); canaries are dealt to silos round robin in a random order, and a silo hosts only its
included ones (see :mod:`mechanisms.canaries` for what a hosted canary does). The auditor's view is the **final
global model** only: canary ``i`` scores ``cos(theta_T - theta_0, u_i)`` (Andrew et al. 2024, Sec. 3), higher
meaning "more likely included", or ``cos(theta_0 - theta_T, u_i)`` for a canary record, whose direction is a
gradient that training descends.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.canaries import SiloCanaries, canary_directions
from simulator.scenario import Scenario

AUDIT_STREAM = 0xA0D17  # the audit's seed stream, apart from every stream of the run's own seed


def audit_seed(scenario: Scenario) -> int:
    """``audit.seed``, else a seed derived from the scenario's ``seed`` on a stream of its own."""
    if scenario.audit is not None and scenario.audit.seed is not None:
        return scenario.audit.seed
    return int(np.random.SeedSequence([scenario.seed, AUDIT_STREAM]).generate_state(1)[0])


@dataclass(frozen=True)
class CanaryPlan:
    """``M`` canaries: inclusion bits, host silos and (rPDP) budgets, drawn from ``seed``."""

    seed: int
    included: np.ndarray  # (M,) bool
    hosts: np.ndarray  # (M,) silo id
    budgets: np.ndarray | None = None  # (M,) each canary's budget, for mechanisms with personal budgets

    @classmethod
    def draw(cls, scenario: Scenario) -> "CanaryPlan":
        seed = audit_seed(scenario)
        count, silos = scenario.audit.canaries, scenario.data.silos
        rng = np.random.default_rng([seed, 1])
        included = rng.random(count) < 0.5
        hosts = rng.permutation(np.arange(count) % silos)
        budgets = None
        if scenario.mechanism.name == "rpdp":  # budgets drawn as the silos draw their records' budgets
            budgets = scenario.mechanism.params.record_budgets(np.arange(count), rng)
        return cls(seed=seed, included=included, hosts=hosts, budgets=budgets)

    @property
    def count(self) -> int:
        return int(self.included.size)

    def by_silo(self) -> dict[int, SiloCanaries]:
        """The included canaries of each silo that hosts any."""
        hosted = {}
        for silo in np.unique(self.hosts[self.included]):
            ids = np.flatnonzero(self.included & (self.hosts == silo))
            hosted[int(silo)] = SiloCanaries(ids=ids, seed=self.seed, budgets=None if self.budgets is None else self.budgets[ids])
        return hosted

    def scores(self, change: np.ndarray) -> np.ndarray:
        """``cos(change, u_i)`` of every canary (included or not), computed a block of canaries at a time."""
        norm = np.linalg.norm(change)
        if norm == 0.0:
            return np.zeros(self.count)
        ids = np.arange(self.count)
        return np.concatenate([canary_directions(self.seed, block, change.size) @ change / norm
                               for block in np.array_split(ids, max(1, self.count // 64))])
