"""Warm actors for runs one after another in the same Ray session (sweeps, tests, scripts).

Starting an actor means starting a Python process that imports torch, which costs seconds; training a round
often costs less. A run therefore leases its server and silo worker actors from this pool and gives them back
when it ends: the next run of the session with the same resource shares reuses the processes. An actor hosts
one run at a time (a lease is exclusive), and a run's objects are dropped when it gives the actor back.

So that the pool never holds resources a run needs, every idle actor a lease does not take is stopped before
new ones start: at any time the pool holds no more actors than the runs in progress use. Actors given back
after their session ended (a ``privsilo run`` closes the session it opened) are forgotten, not reused.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class ActorShape:
    """What makes two actors interchangeable: the actor class and its Ray resource shares."""

    actor_class: type
    num_cpus: float
    num_gpus: float


class ActorPool:
    """Idle actors of the current Ray session, by shape. Use the module's ``POOL``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: tuple[str, str] | None = None
        self._idle: list[tuple[ActorShape, Any]] = []

    def lease(self, counts: Mapping[ActorShape, int]) -> dict[ActorShape, list[Any]]:
        """``counts[shape]`` actors of each shape: idle ones first, then new ones, after stopping every idle
        actor the lease does not take."""
        import ray

        with self._lock:
            self._forget_other_sessions()
            taken: dict[ActorShape, list[Any]] = {shape: [] for shape in counts}
            spare = []
            for shape, handle in self._idle:
                if len(taken.get(shape, ())) < counts.get(shape, 0):
                    taken[shape].append(handle)
                else:
                    spare.append(handle)
            self._idle = []
        for handle in spare:
            ray.kill(handle)
        for shape, count in counts.items():
            # A process that dies (a crash) is restarted by Ray; the call it was serving fails rather than re-running.
            remote = ray.remote(shape.actor_class).options(num_cpus=shape.num_cpus, num_gpus=shape.num_gpus,
                                                           max_restarts=-1, max_task_retries=0)
            taken[shape] += [remote.remote(num_cpus=shape.num_cpus) for _ in range(count - len(taken[shape]))]
        return taken

    def give_back(self, shape: ActorShape, handles: list[Any]) -> None:
        """Make ``handles`` (actors that answered their last call) available to the next lease."""
        with self._lock:
            self._forget_other_sessions()
            self._idle.extend((shape, handle) for handle in handles)

    def stop_idle(self) -> None:
        """Stop every idle actor, freeing its resources for work that is not an actor run (e.g. attack tasks)."""
        import ray

        with self._lock:
            self._forget_other_sessions()
            idle, self._idle = self._idle, []
        for _, handle in idle:
            ray.kill(handle)

    def _forget_other_sessions(self) -> None:
        import ray

        context = ray.get_runtime_context()
        session = (context.get_session_name(), context.get_job_id())
        if session != self._session:
            self._session, self._idle = session, []


POOL = ActorPool()
