"""Where a run's silos go: how many worker actors it asks Ray for, and which silos each worker hosts."""
from __future__ import annotations

import numpy as np

from privsilo.simulator.runtime.cluster import ActorDemand, Capacity, worker_count
from privsilo.simulator.scenario import Scenario


def resources_needed(scenario: Scenario, capacity: Capacity) -> ActorDemand:
    """What a run asks Ray for at once: a server actor and the silo workers (``resources.silos_per_actor``, with
    ``auto`` resolved against ``capacity``)."""
    res = scenario.resources
    shares = dict(server_cpus=res.server.num_cpus, server_gpus=res.server.num_gpus, silo_cpus=res.silo.num_cpus,
                  silo_gpus=res.silo.num_gpus)
    workers = worker_count(silos=scenario.data.silos, silos_per_actor=res.silos_per_actor, capacity=capacity, **shares)
    return ActorDemand(silos=scenario.data.silos, workers=workers, **shares)


def pack_silos(num_silos: int, workers: int) -> tuple[tuple[int, ...], ...]:
    """Silo ids hosted by each worker: consecutive blocks whose sizes differ by at most one."""
    return tuple(tuple(int(i) for i in block) for block in np.array_split(np.arange(num_silos), workers))

