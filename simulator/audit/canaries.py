"""An audit's canaries: which are included, which silo hosts each, and how each is scored after training.

Canary ``i`` of ``M`` is included with probability 1/2, independently, from the audit's own seed (Steinke, Nasr,
Jagielski 2023, Alg. 1); canaries are dealt to silos round robin in a random order, and a silo hosts only its
included ones (see :mod:`privsilo.mechanisms.canaries` for what a hosted canary does). A canary *user* (ULDP) instead has
records in 2 or more silos (every silo under ULDP-AVG, whose weight 1/|S| per silo would otherwise keep the user
below the sensitivity C the claim allows; 1 to 3 records in each), and every silo holding its records hosts it
with the weight the mechanism gives such a user there. A canary's direction ``u_i`` is Gaussian or, with
``audit.canary_direction`` ``dirac`` or ``quiet``, a coordinate of its own (:mod:`privsilo.simulator.audit.directions`). In
the final model's view canary ``i`` scores ``cos(theta_T - theta_0, u_i)`` (Andrew et al. 2024, Sec. 3), higher
meaning "more likely included", or ``cos(theta_0 - theta_T, u_i)`` for a canary record, whose direction is a
gradient that training descends. An input canary (an out-of-distribution record: standard Gaussian features,
which match the scale of privsilo's standardised data, and a random label; Steinke et al. Sec. 6, black-box)
scores minus the final model's loss on it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privsilo.mechanisms.canaries import SiloCanaries, canary_directions
from privsilo.simulator.scenario import Scenario, audit_unit

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
    user_weights: np.ndarray | None = None  # (silos, M) each canary user's weight w_{s,u} in each silo (ULDP)

    features: np.ndarray | None = None  # (M, *feature shape) input canaries: random inputs
    labels: np.ndarray | None = None  # (M,) input canaries: their random labels
    coordinates: np.ndarray | None = None  # (M,) Dirac canaries: the coordinate j of each direction e_j, all distinct

    @classmethod
    def draw(cls, scenario: Scenario, *, feature_shape: tuple[int, ...], num_classes: int) -> "CanaryPlan":
        """The plan of ``scenario``'s audit for a dataset of ``feature_shape`` and ``num_classes`` labels."""
        seed = audit_seed(scenario)
        count, silos = scenario.audit.canaries, scenario.data.silos
        rng = np.random.default_rng([seed, 1])
        included = rng.random(count) < 0.5
        hosts = rng.permutation(np.arange(count) % silos)
        extra: dict[str, np.ndarray] = {}
        if scenario.mechanism.plugin.personal_budgets:  # budgets drawn as the silos draw their records' budgets
            extra["budgets"] = scenario.mechanism.params.record_budgets(np.arange(count), rng)
        if audit_unit(scenario) == "user":
            every_silo = scenario.mechanism.params.variant == "avg"  # AVG weighs 1/|S| per silo: span them all for C
            extra["user_weights"] = _canary_user_weights(scenario, _canary_user_records(count, silos, rng, every_silo=every_silo))
        if scenario.audit.kind == "input":
            extra["features"] = rng.standard_normal((count, *feature_shape)).astype(np.float32)
            extra["labels"] = rng.integers(0, num_classes, size=count)
        return cls(seed=seed, included=included, hosts=hosts, **extra)

    @property
    def count(self) -> int:
        return int(self.included.size)

    def by_silo(self) -> dict[int, SiloCanaries]:
        """The included canaries of each silo that hosts any."""
        if self.user_weights is not None:
            return {silo: SiloCanaries(ids=ids, seed=self.seed, weights=row[ids], **self._coordinates_of(ids))
                    for silo, row in enumerate(self.user_weights)
                    if (ids := np.flatnonzero(self.included & (row > 0))).size}
        hosted = {}
        for silo in np.unique(self.hosts[self.included]):
            ids = np.flatnonzero(self.included & (self.hosts == silo))
            hosted[int(silo)] = SiloCanaries(ids=ids, seed=self.seed, **{
                name: values[ids] for name in ("budgets", "features", "labels", "coordinates") if (values := getattr(self, name)) is not None})
        return hosted

    def _coordinates_of(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {} if self.coordinates is None else {"coordinates": self.coordinates[ids]}

    def scores(self, change: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
        """``cos(change, u_i)`` of the canaries ``ids`` (default: every canary, included or not)."""
        ids = np.arange(self.count) if ids is None else np.asarray(ids, dtype=np.int64)
        norm = np.linalg.norm(change)
        if norm == 0.0 or ids.size == 0:
            return np.zeros(ids.size)
        return self.projections(change, ids) / norm

    def projections(self, change: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """``<change, u_i>`` of the canaries ``ids``, computed a block of canaries at a time (Dirac canaries: the
        change's coordinates ``j``)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            return np.zeros(0)
        if self.coordinates is not None:  # <change, e_j> = change_j
            return change[self.coordinates[ids]]
        return np.concatenate([canary_directions(self.seed, block, change.size) @ change
                               for block in np.array_split(ids, max(1, ids.size // 64))])

    def scores_by_host(self, changes: dict[int, np.ndarray]) -> np.ndarray:
        """Each canary's ``cos(changes[host], u_i)`` against its host silo's change (0 where the host sent none)."""
        scores = np.zeros(self.count)
        for silo, change in changes.items():
            hosted = np.flatnonzero(self.hosts == silo)
            scores[hosted] = self.scores(change, hosted)
        return scores


def _canary_user_records(count: int, silos: int, rng: np.random.Generator, *, every_silo: bool) -> np.ndarray:
    """``(silos, count)`` records of each canary user per silo, 1-3 in each silo it spans: every silo, or 2 to all
    (one if there is one)."""
    records = np.zeros((silos, count), dtype=np.int64)
    for user in range(count):
        spans = silos if every_silo else int(rng.integers(min(2, silos), silos + 1))
        spanned = rng.choice(silos, size=spans, replace=False)
        records[spanned, user] = rng.integers(1, 4, size=spanned.size)
    return records


def _canary_user_weights(scenario: Scenario, records: np.ndarray) -> np.ndarray:
    """``w_{s,u}`` of each canary user in each silo, as ULDP weighs its own users (:func:`user_weights`)."""
    from privsilo.mechanisms.uldp.weights import user_weights

    proportional = scenario.mechanism.params.variant == "avg_w"
    return np.stack([user_weights(records, silo=silo, proportional=proportional) for silo in range(records.shape[0])])
