"""The cluster's warm pool: server and silo worker actors that outlive the driver, for the next ``privsilo run``.

Against a running cluster (``ray start --head`` once, then ``privsilo run ... --address HOST:PORT``) a run's
actors are detached, named actors in the Ray namespace ``privsilo``. When the run ends they drop its silos and
state (the actors' ``release``) and wait, idle, for the next run; the next driver leases them instead of starting
processes that import torch again.

Leases go through one detached registry actor (:class:`PoolRegistry`, named ``pool-registry-v3``), which serves
one call at a time, so that two drivers never lease the same actor. Runs take turns at starting actors: a lease
that starts new actors holds the turn until they are all scheduled (or its run gave up), and the next lease waits
for it, holding nothing, in the order they asked. So at most one run holds part of its actors while waiting for
the rest, and two runs never each hold what the other needs. An actor is interchangeable with another
only under the same :class:`PoolKey`: its class, its CPU and GPU shares and the code version (privsilo's package
version and a digest of its source files, so an edited checkout never reuses actors running the old code, and the
users' code the run's job ships, :mod:`privsilo.simulator.runtime.shipping`, so a leased actor imports the leasing run's code). A
lease takes idle actors of its keys, names the new actors the driver starts, and stops every other idle actor
(of any key, so stale actors never hold resources a run waits for). Each lease is held by the driver's Ray job;
the registry stops the actors of a lease whose job ended without giving them back (a killed driver). An idle
actor stops after the ``ray.pool_idle_timeout`` of the run that gave it back. ``privsilo pool status`` lists the
pool, ``privsilo pool stop`` stops every actor of the namespace, the registry included.
"""
from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from privsilo.simulator.errors import PrivsiloError
from privsilo.simulator.run_dir.invocation import privsilo_version
from privsilo.simulator.runtime.pool.lease import POOL, ActorShape, WorkerPool, say_waiting, start_actor
from privsilo.simulator.runtime.shipping import privsilo_sources

if TYPE_CHECKING:
    from privsilo.simulator.scenario import RayConfig

NAMESPACE = "privsilo"
REGISTRY_NAME = "pool-registry-v3"  # the suffix changes with the registry's methods
CHECK_EVERY_S = 2.0  # how often the registry looks for expired idle actors and ended jobs
STOP_WAIT_S = 30.0
TURN_POLL_S = 0.5  # how often a lease waiting for its turn asks again


def job_code_version() -> str:
    """:func:`code_version`, and the users' code this Ray job ships, by the content-addressed URIs Ray gave it."""
    import ray

    shipped = ray.get_runtime_context().runtime_env.get("py_modules") or []
    digest = hashlib.sha256("\0".join(sorted(shipped)).encode()).hexdigest()[:12]
    return code_version() + (f"+user.{digest}" if shipped else "")


def code_version() -> str:
    """privsilo's version and a digest of the source files of its packages, as the actors would import them."""
    digest = hashlib.sha256()
    for name, path in privsilo_sources():
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{privsilo_version()}+{digest.hexdigest()[:12]}"


@dataclass(frozen=True)
class PoolKey:
    """What a pooled actor is leased by: its class, resource shares and privsilo's code version."""

    actor: str
    num_cpus: float
    num_gpus: float
    version: str


@dataclass
class PoolEntry:
    """One pooled actor: ``job`` holds its lease since ``since`` (``holder``: who runs that job), or None: idle
    since ``idle_since``, until ``idle_timeout`` s."""

    name: str
    key: PoolKey
    job: str | None
    idle_since: float = 0.0
    idle_timeout: float = 0.0
    since: float = 0.0
    holder: str = ""


class PoolRegistry:
    """The detached actor that hands out and takes back leases; one call at a time (Ray's default for an actor)."""

    def __init__(self) -> None:
        self._entries: dict[str, PoolEntry] = {}
        self._waiting: dict[str, float] = {}  # job -> since when its run waits for its actors to be scheduled
        self._turn: str | None = None  # the job whose new actors are being scheduled
        self._queue: dict[str, float] = {}  # jobs waiting for the turn -> since when, in the order they asked
        self._lock = threading.Lock()  # between the calls and the expiry thread
        threading.Thread(target=self._expire_forever, daemon=True).start()

    def lease(self, job: str, wants: list[tuple[PoolKey, int]],
              holder: str = "") -> tuple[list[tuple[list[str], list[str]]] | None, list[dict[str, Any]]]:
        """For each ``(key, count)``: the names of the idle actors ``job`` (run by ``holder``) now holds, and the
        names under which it starts the rest; every idle actor not taken is stopped. A lease that starts actors
        takes the turn (``done`` gives it back). None while another job has the turn or asked for it first: then
        ``job`` holds nothing and waits in line; ask again. Also returns the other jobs holding leases (``wait``)."""
        with self._lock:
            self._reclaim_ended_jobs(alive=job)
            if self._turn not in (None, job) or next(iter(self._queue), job) != job:
                self._queue.setdefault(job, time.time())
                return None, self._holders(job)
            self._queue.pop(job, None)
            answer, now = [], time.time()
            for key, count in wants:
                idle = sorted(e.name for e in self._entries.values() if e.job is None and e.key == key)[:count]
                new = [f"{key.actor}-{uuid.uuid4().hex[:12]}" for _ in range(count - len(idle))]
                for name in idle:
                    self._entries[name].job, self._entries[name].since, self._entries[name].holder = job, now, holder
                self._entries.update((name, PoolEntry(name=name, key=key, job=job, since=now, holder=holder))
                                     for name in new)
                answer.append((idle, new))
            self._stop([e for e in self._entries.values() if e.job is None])
            if any(new for _, new in answer):
                self._turn = job
            return answer, []

    def done(self, job: str) -> None:
        """``job``'s new actors are scheduled, or its run gave up on them: it leaves the line and gives up the turn."""
        with self._lock:
            self._queue.pop(job, None)
            self._waiting.pop(job, None)
            if self._turn == job:
                self._turn = None

    def give_back(self, names: list[str], idle_timeout: float) -> None:
        """The named actors dropped their run: idle until the next lease, or ``idle_timeout`` s. An actor the
        registry does not know (it was restarted meanwhile) is stopped."""
        with self._lock:
            for name in names:
                entry = self._entries.get(name)
                if entry is None:
                    _kill(name)
                else:
                    entry.job, entry.idle_since, entry.idle_timeout = None, time.time(), idle_timeout
            self._stop_expired()

    def wait(self, job: str) -> list[dict[str, Any]]:
        """``job`` waits for its actors to be scheduled (until ``done``): every idle actor is stopped (it may hold
        what the job needs). Returns the other jobs holding leases (``_holders``)."""
        with self._lock:
            self._reclaim_ended_jobs(alive=job)
            self._waiting.setdefault(job, time.time())
            self._stop([e for e in self._entries.values() if e.job is None])
            return self._holders(job)

    def _holders(self, job: str) -> list[dict[str, Any]]:
        """The jobs other than ``job`` that hold leases, oldest first: ``job``, ``holder``, ``since``, ``cpus``,
        ``gpus`` (their leased shares) and ``waiting`` (since when it waits for its actors, or None)."""
        others: dict[str, dict[str, Any]] = {}
        for e in self._entries.values():
            if e.job is not None and e.job != job:
                held = others.setdefault(e.job, {"job": e.job, "holder": e.holder, "since": e.since, "cpus": 0.0,
                                                 "gpus": 0.0, "waiting": self._waiting.get(e.job)})
                held["since"] = min(held["since"], e.since)
                held["cpus"] += e.key.num_cpus
                held["gpus"] += e.key.num_gpus
        return sorted(others.values(), key=lambda held: held["since"])

    def forget(self, names: list[str]) -> None:
        """The named actors were stopped by the driver holding them (they failed to drop their run)."""
        with self._lock:
            for name in names:
                self._entries.pop(name, None)

    def stop_idle(self) -> None:
        """Stop every idle actor."""
        with self._lock:
            self._stop([e for e in self._entries.values() if e.job is None])

    def status(self) -> list[PoolEntry]:
        """Every pooled actor (after reclaiming the leases of ended jobs), by key and name."""
        with self._lock:
            self._reclaim_ended_jobs(alive=None)
            return sorted(self._entries.values(), key=lambda e: (e.key.actor, e.key.version, e.key.num_cpus, e.name))

    def _expire_forever(self) -> None:
        while True:
            time.sleep(CHECK_EVERY_S)
            with self._lock:
                self._stop_expired()
                self._reclaim_ended_jobs(alive=None)

    def _stop_expired(self) -> None:
        now = time.time()
        self._stop([e for e in self._entries.values() if e.job is None and now - e.idle_since >= e.idle_timeout])

    def _reclaim_ended_jobs(self, *, alive: str | None) -> None:
        """Stop the actors leased by jobs that ended (``alive``: a job known to be running, the caller's)."""
        holders = {e.job for e in self._entries.values()} | set(self._waiting) | set(self._queue) | {self._turn}
        holders -= {None, alive}
        if holders:
            ended = holders - running_jobs()
            self._stop([e for e in self._entries.values() if e.job in ended])
            for job in ended:
                self._waiting.pop(job, None)
                self._queue.pop(job, None)
            if self._turn in ended:
                self._turn = None

    def _stop(self, entries: list[PoolEntry]) -> None:
        for entry in entries:
            del self._entries[entry.name]
            _kill(entry.name)


def _kill(name: str) -> None:
    """Stop the pool's actor ``name``, if it is alive (it may never have started: its driver ended first)."""
    import ray

    try:
        ray.kill(ray.get_actor(name, namespace=NAMESPACE))
    except ValueError:
        pass


def running_jobs() -> set[str]:
    """The ids of the cluster's jobs that have not ended (Ray's GCS job table)."""
    from ray._private.state import jobs

    return {job["JobID"] for job in jobs() if not job["IsDead"]}


def registry(*, create: bool) -> Any:
    """The cluster's registry actor (started with ``create``); None if there is none."""
    import ray

    if create:
        return ray.remote(PoolRegistry).options(name=REGISTRY_NAME, namespace=NAMESPACE, lifetime="detached",
                                                get_if_exists=True, num_cpus=0).remote()
    try:
        return ray.get_actor(REGISTRY_NAME, namespace=NAMESPACE)
    except ValueError:
        return None


class DetachedPool(WorkerPool):
    """The cluster's pool, as one driver sees it: leases through the registry (see the module docstring)."""

    def __init__(self, *, idle_timeout: float) -> None:
        self.idle_timeout = idle_timeout
        self._names: dict[int, str] = {}  # id(handle) -> actor name, for the handles this driver holds
        self._starting: list[Any] = []  # readiness calls of the actors the last lease started

    def lease(self, counts: Mapping[ActorShape, int]) -> dict[ActorShape, list[Any]]:
        """The registry's lease (waiting for this run's turn, and saying whom for, where other runs start actors
        first); then the actors it names, idle ones by name and new ones started under theirs."""
        import ray

        version = job_code_version()
        shapes = list(counts)
        wants = [(PoolKey(shape.actor_class.__qualname__, shape.num_cpus, shape.num_gpus, version), counts[shape])
                 for shape in shapes]
        pool, job, said = registry(create=True), ray.get_runtime_context().get_job_id(), ""
        holder = f"pid {os.getpid()} on {socket.gethostname()}"
        try:
            while (answer := ray.get(pool.lease.remote(job, wants, holder)))[0] is None:
                said = say_waiting(answer[1], said)  # in line: holding nothing, it waits for the runs that hold actors
                time.sleep(TURN_POLL_S)
            taken: dict[ActorShape, list[Any]] = {}
            for shape, (idle, new) in zip(shapes, answer[0]):
                try:
                    handles = [ray.get_actor(name, namespace=NAMESPACE) for name in idle]
                except ValueError:
                    raise PrivsiloError("the cluster's warm pool was stopped while this run leased from it; run again") from None
                started = [start_actor(shape, name=name, namespace=NAMESPACE, lifetime="detached") for name in new]
                self._starting += [handle.__ray_ready__.remote() for handle in started]
                self._names.update((id(handle), name) for handle, name in zip(handles + started, idle + new))
                taken[shape] = handles + started
        except BaseException:
            self._done(pool, job)
            raise
        return taken

    def starting(self) -> list[Any]:
        starting, self._starting = self._starting, []
        return starting

    def _keep(self, shape: ActorShape, healthy: list[Any], broken: list[Any]) -> None:
        import ray

        names = {kind: [self._names.pop(id(handle)) for handle in handles]
                 for kind, handles in (("healthy", healthy), ("broken", broken))}
        pool = registry(create=False)
        if pool is None:  # `privsilo pool stop` ran meanwhile: it stopped these actors too
            return
        # done: a run that ends before its actors were scheduled (it failed meanwhile) gives up its turn too
        ray.get([pool.give_back.remote(names["healthy"], self.idle_timeout), pool.forget.remote(names["broken"]),
                 pool.done.remote(ray.get_runtime_context().get_job_id())])

    def stop_idle(self) -> None:
        import ray

        ray.get(registry(create=True).stop_idle.remote())

    def others(self, *, waiting: bool) -> list[dict[str, Any]]:
        import ray

        pool, job = registry(create=True), ray.get_runtime_context().get_job_id()
        if waiting:
            return ray.get(pool.wait.remote(job))
        self._done(pool, job)
        return []

    @staticmethod
    def _done(pool: Any, job: str) -> None:
        """Tell the registry that ``job`` no longer waits for actors (nothing to tell where the pool was stopped)."""
        import ray

        try:
            ray.get(pool.done.remote(job))
        except ray.exceptions.RayActorError:
            pass


def pool_for(config: RayConfig) -> WorkerPool:
    """The cluster's detached pool for a run that joins a cluster (``ray.address``), else the session's pool."""
    if config.address:
        return DetachedPool(idle_timeout=config.pool_idle_timeout)
    return POOL


def pool_actor_names() -> list[str]:
    """The names of every actor alive in the pool's namespace (pooled actors, the registry)."""
    import ray

    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == NAMESPACE)


def stop_pool() -> int:
    """Stop the registry and every actor of the pool's namespace (idle or leased); return how many there were.

    Returns once none is left, or raises PrivsiloError after ``STOP_WAIT_S`` seconds."""
    names = pool_actor_names()
    for name in sorted(names, key=lambda n: n != REGISTRY_NAME):  # the registry first: it starts nothing more
        _kill(name)
    deadline = time.monotonic() + STOP_WAIT_S
    while (left := pool_actor_names()) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        raise PrivsiloError(f"pool stop: {len(left)} actors still alive after {STOP_WAIT_S:g} s: {', '.join(left)}")
    return len(names)


def status_table(*, local: bool = False) -> str:
    """``privsilo pool status``: one line per pooled actor (name, shares, version, idle or leased, idle seconds);
    ``local``: of the local pool (whose runs need no --address)."""
    import ray

    pool = registry(create=False)
    if pool is None:
        return ("no actor in the local pool yet (the next run, sweep, audit or attack starts them)" if local
                else "no warm pool on this cluster (a run with --address starts one)")
    entries = ray.get(pool.status.remote())
    if not entries:
        return "the warm pool is empty"
    now = time.time()
    rows = [("actor", "cpus", "gpus", "version", "state", "idle s", "stops in s")]  # an actor's name starts with its class
    for e in entries:
        idle = e.job is None
        rows.append((e.name, f"{e.key.num_cpus:g}", f"{e.key.num_gpus:g}", e.key.version,
                     "idle" if idle else f"leased (job {e.job})", f"{now - e.idle_since:.0f}" if idle else "-",
                     f"{max(e.idle_timeout - (now - e.idle_since), 0):.0f}" if idle else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)
