"""Connecting to Ray: a local instance by default, or an existing cluster by address.

Before joining a cluster privsilo checks, within ``ray.connect_timeout`` seconds, that a TCP connection to the
address opens and that the other end answers the HTTP/2 greeting every gRPC server (a Ray head's GCS is one)
sends: Ray itself retries an address where nothing answers for many minutes. Ray is imported only here, when a
session opens, so that commands which never start one (``list``, ``validate``) do not pay for it.
"""
from __future__ import annotations

import math
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Callable, Iterable, Iterator, Literal

from privsilo.simulator.errors import PrivsiloError, ScenarioError
from privsilo.simulator.runtime.watchdog import RayWatchdog

# RFC 9113, Sec. 3.4: the client's connection preface, then an empty SETTINGS frame (9-byte frame header:
# length 0, type 0x4, no flags, stream 0). A server's first frame must be SETTINGS.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HTTP2_EMPTY_SETTINGS = bytes([0, 0, 0, 0x4, 0, 0, 0, 0, 0])
HTTP2_FRAME_HEADER_BYTES = 9
HTTP2_SETTINGS = 0x4


@dataclass(frozen=True)
class Capacity:
    """The CPUs and GPUs a run's actors may hold at once; ``gpus`` None: not a limit (a local session is given
    logical GPUs for the shares asked, and silos without a device train on the CPU)."""

    cpus: float
    gpus: float | None


def local_capacity() -> Capacity:
    """What a local session packs the silos into: this machine's cores."""
    return Capacity(cpus=float(os.cpu_count() or 1), gpus=None)


def cluster_capacity() -> Capacity:
    """What the Ray cluster this process is connected to offers."""
    import ray

    total = ray.cluster_resources()
    return Capacity(cpus=total.get("CPU", 0.0), gpus=total.get("GPU", 0.0))


@dataclass(frozen=True)
class ActorDemand:
    """What a run asks Ray for at once: one server actor and ``workers`` silo worker actors with these shares,
    hosting ``silos`` logical silos between them."""

    server_cpus: float
    server_gpus: float
    silo_cpus: float
    silo_gpus: float
    silos: int
    workers: int

    @property
    def cpus(self) -> float:
        return self.server_cpus + self.workers * self.silo_cpus

    @property
    def gpus(self) -> float:
        return self.server_gpus + self.workers * self.silo_gpus

    @property
    def actors(self) -> int:
        return self.workers + 1

    @classmethod
    def covering(cls, demands: Iterable[ActorDemand]) -> ActorDemand:
        """The field-wise maximum: at least what any one of ``demands`` asks for (runs of a sweep, one at a time)."""
        demands = list(demands)
        return cls(**{f.name: max(getattr(d, f.name) for d in demands) for f in fields(cls)})


def worker_count(*, silos: int, silos_per_actor: int | Literal["auto"], server_cpus: float, server_gpus: float,
                 silo_cpus: float, silo_gpus: float, capacity: Capacity) -> int:
    """How many silo worker actors host ``silos`` silos (``resources.silos_per_actor``).

    A number N gives ceil(silos / N) workers. ``auto`` gives one worker per silo where ``capacity`` holds the
    server's and every silo's share at once, and otherwise as many workers as it holds (at least one).
    """
    if silos_per_actor != "auto":
        return math.ceil(silos / silos_per_actor)
    fitting = silos
    for have, server, share in ((capacity.cpus, server_cpus, silo_cpus), (capacity.gpus, server_gpus, silo_gpus)):
        if have is not None and share > 0:
            fitting = min(fitting, math.floor((have - server) / share + 1e-9))
    return max(1, fitting)


@contextmanager
def ray_session(
    *, address: str | None, demand_for: Callable[[Capacity], ActorDemand], connect_timeout: float,
    ship: tuple[str, ...] = (),
) -> Iterator[ActorDemand]:
    """Use the Ray session already open in this process, or open one (and close it afterwards); yield the demand
    ``demand_for`` makes of the session's capacity (how the silos are packed depends on it).

    A local session packs the silos into this machine's cores and gets at least as many logical CPUs/GPUs as
    the demand asks for, so that e.g. ten silos with ``num_cpus: 0.5`` and ``silos_per_actor: 1`` are scheduled
    at once on two cores, and silos with a GPU share are scheduled on a machine without a GPU (they then train
    on the CPU, with a warning). A cluster at ``address`` must offer what the demand asks for; the job that joins
    it ships the users' code ``ship`` to its workers (:mod:`privsilo.simulator.runtime.shipping`).
    """
    import ray

    if ray.is_initialized() and _kept.joined not in (None, (address, ship)):
        ray.shutdown()  # kept joined to another cluster, or with other code, than this session needs
        _kept.joined = None
    if ray.is_initialized():
        demand = demand_for(cluster_capacity())
        _check_capacity(demand, where="the Ray session of this process")
        yield demand
        return
    if address:
        join_cluster(address, connect_timeout=connect_timeout, ship=ship)
        demand = demand_for(cluster_capacity())
    else:
        demand = demand_for(local_capacity())
        watchdog = _start_local_ray(demand)
    try:
        _check_capacity(demand, where=f"the Ray cluster at {address}" if address else "the local Ray instance")
        yield demand
    finally:
        if address and _kept.until_exit:
            _kept.joined = (address, ship)
        else:
            ray.shutdown()
        if not address:
            watchdog.close()


@dataclass
class _KeptSession:
    """Whether this process stays joined to the clusters it joins until it exits, and to which it is now:
    ``(address, shipped code)``."""

    until_exit: bool = False
    joined: tuple[str, tuple[str, ...]] | None = None


_kept = _KeptSession()


def stay_joined_until_exit() -> None:
    """Leave the clusters this process joins only when it exits, not when each session ends: for the ready driver
    (:mod:`privsilo.simulator.cli.ready_driver`), which exits after one command, so that its caller need not wait for
    ``ray.shutdown()``. A later session of the process that needs another cluster or other shipped code leaves the
    kept one first."""
    _kept.until_exit = True


def _start_local_ray(demand: ActorDemand) -> RayWatchdog:
    """Start a local Ray sized for ``demand``, watched so that it ends with this process however that ends
    (:mod:`privsilo.simulator.runtime.watchdog`)."""
    import ray

    cpus = max(os.cpu_count() or 1, math.ceil(demand.cpus))
    gpus = math.ceil(demand.gpus) if demand.gpus else None
    watchdog = RayWatchdog.start()
    try:
        # address="local": always a fresh local instance, never a cluster someone else started on this machine.
        ray.init(address="local", num_cpus=cpus, num_gpus=gpus, include_dashboard=False, logging_level="ERROR")
    except BaseException:
        watchdog.close()
        raise
    return watchdog


def join_cluster(address: str, *, connect_timeout: float, field: str = "ray.address", ship: tuple[str, ...] = ()) -> None:
    """Connect this process to the Ray cluster at ``address`` (see :func:`check_reachable`), as a job whose
    workers get the users' code ``ship`` (files or package directories); errors name ``field``."""
    import ray

    from privsilo.simulator.runtime.shipping import runtime_env

    check_reachable(address, timeout=connect_timeout, field=field)
    try:
        ray.init(address=address, logging_level="ERROR", configure_logging=True, runtime_env=runtime_env(ship))
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ScenarioError(field, address, f"cannot join this Ray cluster: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # uploading the users' code (Ray's packaging: too large, unreadable)
        if not ship:
            raise
        raise ScenarioError("ray.ship_code", ", ".join(ship), f"cannot ship this code to the cluster: {' '.join(str(exc).split())}") from None


def check_reachable(address: str, *, timeout: float, field: str = "ray.address") -> None:
    """Raise ScenarioError unless a gRPC server (a Ray head's GCS) answers at ``address`` within ``timeout`` s.

    ``address`` is ``[scheme://]HOST:PORT`` (IPv6 hosts in brackets); Ray's keywords without a port (``auto``)
    are left to Ray, which fails fast on them. With Ray's TLS on (``RAY_USE_TLS``) only the TCP connection is
    checked, since the greeting is then encrypted.
    """
    target = _host_and_port(address, field=field)
    if target is None:
        return
    deadline = time.monotonic() + timeout
    tried = f"tried {target[0]}:{target[1]} for up to {timeout:g} s, ray.connect_timeout"
    try:
        with socket.create_connection(target, timeout=timeout) as connection:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return
            connection.settimeout(max(deadline - time.monotonic(), 1e-3))
            connection.sendall(HTTP2_PREFACE + HTTP2_EMPTY_SETTINGS)
            header = _receive(connection, HTTP2_FRAME_HEADER_BYTES)
    except socket.timeout:
        problem = f"nothing answered ({tried}); check the address and that the head is running"
        raise ScenarioError(field, address, problem) from None
    except OSError as exc:
        problem = f"no Ray head there: {exc.strerror or type(exc).__name__} ({tried}); start one with `ray start --head`"
        raise ScenarioError(field, address, f"{problem} or check the address") from None
    if len(header) < HTTP2_FRAME_HEADER_BYTES or header[3] != HTTP2_SETTINGS:
        raise ScenarioError(
            field, address,
            f"something listens there but it is not a Ray head ({tried}); give the head's GCS address "
            "(`ray start --head` prints it; port 6379 by default, not the dashboard's 8265)",
        )


def _host_and_port(address: str, *, field: str) -> tuple[str, int] | None:
    rest = address.split("://", 1)[-1].rstrip("/")
    host, separator, port = rest.rpartition(":")
    if not separator and rest.isidentifier():  # a Ray keyword such as "auto"
        return None
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ScenarioError(field, address, "must look like HOST:PORT, the head's GCS address (port 6379 by default)")
    return host, int(port)


def _receive(connection: socket.socket, size: int) -> bytes:
    """Up to ``size`` bytes: fewer only when the peer closes the connection first."""
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


# Resident memory of one training actor process with torch loaded, measured here at about 450 MiB.
ACTOR_MEMORY_BYTES = 450 * 2**20
# Suggested shares are whole hundredths (Ray itself counts resources in units of 0.0001).
SHARE_DIVISIONS = 100


def _check_capacity(demand: ActorDemand, *, where: str) -> None:
    """Refuse before starting anything when the cluster clearly cannot host the run's actors at once."""
    import ray

    total = ray.cluster_resources()
    memory = total.get("memory", 0.0)
    if demand.actors * ACTOR_MEMORY_BYTES > memory:
        workers = max(int(memory // ACTOR_MEMORY_BYTES) - 1, 1)
        raise PrivsiloError(
            f"resources.silos_per_actor: {demand.workers} silo worker actors (for {demand.silos} silos) and the server "
            f"need about {demand.actors * ACTOR_MEMORY_BYTES / 2**30:.1f} GiB but Ray has {memory / 2**30:.1f} GiB; "
            f"use --set resources.silos_per_actor={math.ceil(demand.silos / workers)} (at most {workers} workers) or add nodes"
        )
    asked, offered, settings = [], [], []
    for resource, field, server, silo, needed in (("CPU", "num_cpus", demand.server_cpus, demand.silo_cpus, demand.cpus),
                                                  ("GPU", "num_gpus", demand.server_gpus, demand.silo_gpus, demand.gpus)):
        have = total.get(resource, 0.0)
        if needed > have + 1e-9:
            asked.append(f"{needed:g} {resource} (server {server:g} + {demand.workers} silo workers x {silo:g})")
            offered.append(f"{have:g} {resource}")
            settings.append(fitting_settings(field=field, server=server, silo=silo, workers=demand.workers, have=have))
    if asked:
        options = " ".join(f"--set {setting}" for group in settings for setting in group)
        remedies = [f"use {options}"] if all(settings) else []
        capacity = Capacity(cpus=total.get("CPU", 0.0), gpus=total.get("GPU", 0.0))
        fitting = worker_count(silos=demand.silos, silos_per_actor="auto", server_cpus=demand.server_cpus,
                               server_gpus=demand.server_gpus, silo_cpus=demand.silo_cpus, silo_gpus=demand.silo_gpus,
                               capacity=capacity)
        shares_fit = all(have + 1e-9 >= server + fitting * share for have, server, share in (
            (capacity.cpus, demand.server_cpus, demand.silo_cpus), (capacity.gpus, demand.server_gpus, demand.silo_gpus)))
        if fitting < demand.workers and shares_fit:
            remedies.append(f"--set resources.silos_per_actor={math.ceil(demand.silos / fitting)} ({fitting} workers)")
        remedy = " or ".join(remedies + ["add nodes"])
        raise PrivsiloError(
            f"resources: the actors need {' and '.join(asked)} at once but {where} offers {' and '.join(offered)}; "
            f"{remedy} (a local run sizes Ray to the scenario, a cluster must offer what its actors ask for)"
        )


def fitting_settings(*, field: str, server: float, silo: float, workers: int, have: float) -> list[str]:
    """``key=value`` settings under which one server and ``workers`` silo workers fit into ``have`` units of a resource.

    Shares only ever go down, in whole hundredths: the workers' alone if that suffices, else the workers' to at most
    an equal share and the server's to what is left. Without a GPU to share: no GPUs (the actors then train on
    the CPU). Empty when not even a hundredth of a CPU per actor fits.
    """
    if silo > 0 and (share := _share(have - server, workers)) > 0:
        return [f"resources.silo.{field}={share:g}"]
    new_silo = min(silo, _share(have, workers + 1))
    new_server = min(server, _share(have - workers * new_silo, 1))
    if (new_silo > 0 or silo == 0) and (new_server > 0 or server == 0):
        changed = (("server", server, new_server), ("silo", silo, new_silo))
        return [f"resources.{role}.{field}={new:g}" for role, old, new in changed if new != old]
    if field == "num_gpus":
        return [f"resources.{role}.num_gpus=0" for role, asked in (("server", server), ("silo", silo)) if asked > 0]
    return []


def _share(available: float, actors: int) -> float:
    """The largest whole number of hundredths that each of ``actors`` actors can take out of ``available``."""
    return max(math.floor(available * SHARE_DIVISIONS / actors + 1e-9), 0) / SHARE_DIVISIONS
