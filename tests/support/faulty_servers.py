"""Server actors that lose a silo worker at a chosen moment of the run's set-up (crash tests, the ``server_actor``
of :class:`privsilo.simulator.engine.federation.Federation`)."""
from __future__ import annotations

import time

import ray

from privsilo.simulator.engine.actors import ServerActor


class ServerLosingAWorkerInSetUp(ServerActor):
    """Kills the process of the first silo worker as the protocol's set-up starts (Ray restarts it, empty), then
    runs the set-up at once: the worker's calls fail while it restarts."""

    wait_for_restart = False

    def setup(self) -> dict[str, float]:
        worker = self.workers[0]
        ray.kill(worker, no_restart=False)
        while self.wait_for_restart:
            try:
                ray.get(worker.__ray_ready__.remote())
                break
            except ray.exceptions.RayActorError:  # still restarting
                time.sleep(0.05)
        return super().setup()


class ServerLosingAWorkerThatComesBackInSetUp(ServerLosingAWorkerInSetUp):
    """As its parent, but runs the set-up only once Ray restarted the worker: it answers, hosting nothing."""

    wait_for_restart = True
