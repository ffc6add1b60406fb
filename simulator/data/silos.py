"""Which training records each silo holds: the scenario's partition (its own seed stream) and, with
``data.users``, the records' owners, which then decide the silos. Numpy only, so ``privsilo validate`` computes
it before torch or Ray load (e.g. to check ``attack.batch_size`` against the target silos' records)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from privsilo.simulator.data.partition import partition_indices
from privsilo.simulator.data.types import Dataset
from privsilo.simulator.data.users import UserAllocation, allocate_users, users_generator
from privsilo.simulator.errors import ScenarioError

if TYPE_CHECKING:
    from privsilo.simulator.scenario import Scenario


def run_seeds(seed: int, num_silos: int) -> dict[str, Any]:
    """The run's seed streams: the partition's (a SeedSequence), the server's, the model initialisation's and
    every silo's."""
    partition, server, init, *silos = np.random.SeedSequence(seed).spawn(3 + num_silos)

    def as_int(seq: np.random.SeedSequence) -> int:
        return int(seq.generate_state(1, dtype=np.uint64)[0] % (2**63))

    return {"partition": partition, "server": as_int(server), "init": as_int(init), "silos": [as_int(s) for s in silos]}


def silo_records(scenario: Scenario, dataset: Dataset) -> tuple[list[np.ndarray], UserAllocation | None]:
    """Every silo's training-record indices and the user allocation (None without ``data.users``)."""
    parts = partition_silos(scenario, dataset, np.random.default_rng(run_seeds(scenario.seed, scenario.data.silos)["partition"]))
    users = _user_allocation(scenario, dataset, parts)
    return (parts if users is None else list(users.silo_indices)), users


def partition_silos(scenario: Scenario, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
    data = scenario.data
    try:
        parts = partition_indices(
            dataset.y_train,
            scheme=data.partition,
            num_silos=data.silos,
            rng=rng,
            alpha=data.alpha,
            shards_per_silo=data.shards_per_silo,
            natural=dataset.natural_partition,
        )
    except ValueError as exc:
        raise ScenarioError("data.silos", data.silos, f"does not fit '{data.dataset}' with partition '{data.partition}' ({exc})") from None
    empty = [i for i, part in enumerate(parts) if len(part) == 0]
    if empty:
        raise ScenarioError("data.silos", data.silos, f"too many silos for {len(dataset.y_train)} records: silo(s) {empty} got none")
    if data.max_records_per_silo is not None:  # the first records in the partition's (seeded) order
        parts = [part[: data.max_records_per_silo] for part in parts]
    return parts


def _user_allocation(scenario: Scenario, dataset: Dataset, parts: list[np.ndarray]) -> UserAllocation | None:
    """Owners of the records (data.users), drawn from their own seed stream; None without users. With
    ``partition: natural`` the silos stay the dataset's; otherwise the allocation decides them."""
    users = scenario.data.users
    if users is None:
        return None
    try:
        return allocate_users(
            len(dataset.y_train),
            count=users.count,
            records=users.records,
            silos=users.silos,
            num_silos=scenario.data.silos,
            rng=users_generator(scenario.seed),
            natural=tuple(parts) if scenario.data.partition == "natural" else None,
        )
    except ValueError as exc:
        raise ScenarioError("data.users.count", users.count, f"does not fit {len(dataset.y_train)} records of '{scenario.data.dataset}' in {scenario.data.silos} silos ({exc})") from None
