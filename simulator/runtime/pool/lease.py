"""Warm actors: a run leases its server and silo worker actors from a pool and gives them back when it ends.

Starting an actor means starting a Python process that imports torch, which costs seconds; training a round
often costs less. So the next run with the same resource shares reuses the processes. An actor hosts one run at
a time (a lease is exclusive), and a run's objects are dropped (the actor's ``release``) when it gives the actor
back; an actor that fails to drop them is stopped instead.

Two pools share this interface (:class:`WorkerPool`); :func:`privsilo.simulator.runtime.pool.registry.pool_for` picks one for a run:

- a run that joins a cluster (``ray.address``, ``--address``) uses the cluster's detached pool
  (:mod:`privsilo.simulator.runtime.pool.registry`), which outlives the driver: the next ``privsilo run`` against the same cluster
  reuses the actors;
- a local run uses :data:`POOL`, the actors of the current Ray session (runs one after another in a sweep, the
  tests, a script inside its own ``ray.init``). Actors given back after their session ended (a ``privsilo run``
  closes the session it opened) are forgotten, not reused.

So that a pool never holds resources a run needs, the idle actors a lease does not take are stopped before new
ones start, unless the new ones certainly fit beside them (a session's pool on one node, CPUs only, keeps up to
`SPARE_ACTORS` such actors for a later run of their shape); a run that still waits for its actors (in a session's pool: for `SLOW_START_S`, since
starting torch processes takes seconds) has every idle actor stopped.
"""
from __future__ import annotations

import sys
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

RELEASE_TIMEOUT_S = 60
SPARE_ACTORS = 6  # idle actors of other shapes a session's pool keeps beside a lease's (each holds torch: memory)
SLOW_START_S = 30.0  # a session's run whose new actors are not ready by then has the idle actors stopped
WAIT_STEP_S = 2.0  # how often a run waiting for its actors asks who holds the pool's actors


@dataclass(frozen=True)
class ActorShape:
    """What makes two actors interchangeable: the actor class and its Ray resource shares."""

    actor_class: type
    num_cpus: float
    num_gpus: float


def start_actor(shape: ActorShape, **options: Any) -> Any:
    """A new actor of ``shape`` (extra Ray ``options``: e.g. a name and a detached lifetime).

    A process that dies (a crash) is restarted by Ray, unless its class says ``max_restarts = 0`` (the server); the
    call it was serving fails rather than re-running.
    """
    import ray

    restarts = getattr(shape.actor_class, "max_restarts", -1)
    remote = ray.remote(shape.actor_class).options(num_cpus=shape.num_cpus, num_gpus=shape.num_gpus,
                                                   max_restarts=restarts, max_task_retries=0, **options)
    return remote.remote(num_cpus=shape.num_cpus)


class WorkerPool(ABC):
    """Where runs lease their actors from and give them back to."""

    @abstractmethod
    def lease(self, counts: Mapping[ActorShape, int]) -> dict[ActorShape, list[Any]]:
        """``counts[shape]`` actors of each shape for this run alone: idle ones first, then new ones, after
        stopping the idle actors the lease does not take (all of them, or only those the new ones need room from)."""

    def give_back(self, shape: ActorShape, handles: Sequence[Any], *, timeout: float = RELEASE_TIMEOUT_S) -> None:
        """Have each of ``handles`` (leased with ``shape``) drop its run, then keep it for the next lease; an
        actor that does not answer within ``timeout`` seconds (all are asked at once: its process died, hangs, or
        was never scheduled) is stopped instead."""
        import ray

        asked = {handle.release.remote(): handle for handle in handles}
        answered, _ = ray.wait(list(asked), num_returns=len(asked), timeout=timeout) if asked else ([], [])
        healthy, broken = [], []
        for ref, handle in asked.items():
            try:
                if ref in answered:
                    ray.get(ref)
                    healthy.append(handle)
                    continue
            except ray.exceptions.RayError:
                pass
            ray.kill(handle)
            broken.append(handle)
        self._keep(shape, healthy, broken)

    @abstractmethod
    def _keep(self, shape: ActorShape, healthy: list[Any], broken: list[Any]) -> None:
        """Make ``healthy`` (released) actors available to the next lease and forget ``broken`` (stopped) ones."""

    @abstractmethod
    def stop_idle(self) -> None:
        """Stop every idle actor, freeing its resources for work that is not an actor run (e.g. attack tasks)."""

    def others(self, *, waiting: bool) -> list[dict[str, Any]]:
        """Say that this run waits (``waiting``) for its actors to be scheduled, or no longer waits (they are, or it
        gave up on them); while it waits, stop the idle actors. Returns the other runs that hold actors of this pool
        (``holder``, ``since``, ``cpus``, ``gpus`` and ``waiting``: since when that run waits itself, or None); none
        for a session's pool."""
        if waiting:
            self.stop_idle()
        return []

    def starting(self) -> list[Any]:
        """Calls that answer once each actor the last lease started is scheduled and constructed (taken: the next
        call returns none); none for a session's pool, whose runs never wait for each other."""
        return []


def wait_until_scheduled(refs: list[Any], *, pool: WorkerPool, timeout: float) -> tuple[list[Any], list[Any], str]:
    """Wait for ``refs`` (calls to new actors) and the actors the pool's lease started: as long as another run
    holds actors of the pool and is not waiting itself (saying so in one line on stderr each time who holds what
    changes), then up to ``timeout`` s more. Returns the ready and pending refs (pending: the lease's actors that
    never got scheduled, where all of ``refs`` are ready), and who holds what at the end ("" when nothing is
    pending)."""
    import ray

    said, quiet_since, holders = "", time.monotonic(), []
    waited = refs + pool.starting()
    try:
        while waited:
            ready, pending = ray.wait(waited, num_returns=len(waited), timeout=WAIT_STEP_S)
            if not pending:
                return refs, [], ""
            holders = pool.others(waiting=True)
            if any(held["waiting"] is None for held in holders):  # one of them runs: it ends, and gives back
                quiet_since = time.monotonic()
                said = say_waiting(holders, said)
            elif time.monotonic() - quiet_since >= timeout:
                answered = set(ready)
                return ([ref for ref in refs if ref in answered], [ref for ref in refs if ref not in answered] or pending,
                        held_by(holders))
        return refs, [], ""
    finally:
        pool.others(waiting=False)


def say_waiting(holders: list[dict[str, Any]], said: str) -> str:
    """Print ``privsilo: waiting for CPUs/GPUs held by ...`` on stderr unless no run holds any or the line was
    ``said`` last; returns the line said last."""
    line = f"privsilo: waiting for CPUs/GPUs held by {held_by(holders)}"
    if not holders or line == said:
        return said
    print(line, file=sys.stderr, flush=True)
    return line


def held_by(holders: list[dict[str, Any]]) -> str:
    """Who holds what: ``run of pid N on HOST (since 12:00:05, 1.5 CPUs, waiting itself since ...)``."""
    if not holders:
        return "no other run"
    clock = lambda seconds: time.strftime("%H:%M:%S", time.localtime(seconds))  # noqa: E731
    return "; ".join(f"the run of {held['holder'] or 'job ' + held['job']} (since {clock(held['since'])}, "
                     f"{held['cpus']:g} CPUs, {held['gpus']:g} GPUs"
                     + (f", waiting itself since {clock(held['waiting'])})" if held["waiting"] else ")")
                     for held in holders)


class SessionPool(WorkerPool):
    """Idle actors of the current Ray session, by shape, in this process. Use the module's ``POOL``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: tuple[str, str] | None = None
        self._idle: list[tuple[ActorShape, Any]] = []
        self._waiting_since: float | None = None

    def lease(self, counts: Mapping[ActorShape, int]) -> dict[ActorShape, list[Any]]:
        import ray

        with self._lock:
            self._forget_other_sessions()
            taken: dict[ActorShape, list[Any]] = {shape: [] for shape in counts}
            spare = []
            for shape, handle in self._idle:
                if len(taken.get(shape, ())) < counts.get(shape, 0):
                    taken[shape].append(handle)
                else:
                    spare.append((shape, handle))
            new = {shape: count - len(taken[shape]) for shape, count in counts.items()}
            # asks Ray for the free resources and nodes only where there are spares to keep
            kept = spare[-SPARE_ACTORS:] if spare and _room_beside(
                new, [shape for shape, _ in spare], free=ray.available_resources(),
                nodes=sum(node["Alive"] for node in ray.nodes())) else []
            self._idle = kept
        for _, handle in spare[:len(spare) - len(kept)]:
            ray.kill(handle)
        for shape, count in counts.items():
            taken[shape] += [start_actor(shape) for _ in range(count - len(taken[shape]))]
        return taken

    def others(self, *, waiting: bool) -> list[dict[str, Any]]:
        """As the base class, but the idle actors are stopped only once a run waited `SLOW_START_S`: a lease keeps
        them only where its new actors fit beside them, so a shorter wait is the new actors' start-up."""
        now = time.monotonic()
        if not waiting:
            self._waiting_since = None
        elif self._waiting_since is None:
            self._waiting_since = now
        elif now - self._waiting_since >= SLOW_START_S:
            self.stop_idle()
        return []

    def _keep(self, shape: ActorShape, healthy: list[Any], broken: list[Any]) -> None:
        with self._lock:
            self._forget_other_sessions()
            self._idle.extend((shape, handle) for handle in healthy)

    def stop_idle(self) -> None:
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


def _room_beside(new: Mapping[ActorShape, int], spare: Sequence[ActorShape], *, free: Mapping[str, float], nodes: int) -> bool:
    """Whether ``new`` actors (count by shape) certainly fit beside idle ``spare`` ones in the ``free`` resources:
    only on one node (several split the free CPUs between them) and with no GPU share on either side (a share must
    fit on one GPU, which the free total does not tell, and an idle actor keeps its CUDA memory)."""
    if nodes != 1 or any(shape.num_gpus for shape in [*new, *spare]):
        return False
    return sum(shape.num_cpus * count for shape, count in new.items()) <= free.get("CPU", 0.0) + 1e-9


POOL = SessionPool()
