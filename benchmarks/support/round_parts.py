"""Shared by ``bench_secagg_scale.py``, ``bench_dropout_recovery.py`` and ``bench_checkpoint.py``: a local Ray
session the script owns, a server actor that times the parts of its round, and the bytes the server received.

``TimedServer`` is the engine's ``ServerActor`` with ``run_round`` wrapped (measurement only, nothing else
changes): it notes the wall seconds of each of the round's calls to the silo workers (``WorkerCalls.each``: the
protocol's per-round stages, local training with protection, the unmasking answers) and of the server's own
protocol work between them (relaying each stage, computing the unmasking requests). ``Federation(scenario,
server_actor=TimedServer)`` leases it.
"""
from __future__ import annotations

import contextlib
import math
import os
import pickle
import statistics
import time
from typing import Any, Iterator, Sequence

import ray

import privsilo.simulator  # noqa: F401  (Ray environment)
import privsilo.simulator.engine.actors as actors
from privsilo.simulator.engine.actors import ServerActor


class TimedServer(ServerActor):
    """``ServerActor`` noting, per round, the seconds of each worker call and of the protocol's server steps."""

    def run_round(self, round_index: int):  # noqa: ANN201 (RoundReport)
        parts: list[tuple[str, float]] = []
        names = [getattr(stage, "name", str(stage)) for stage in self.protocol.round_stages] + ["train+protect", "unmask answers"]
        original_each = actors.WorkerCalls.each
        protocol = self.protocol

        def each(calls: Any, silo_ids: Sequence[int], call: Any) -> Any:
            started = time.perf_counter()
            try:
                return original_each(calls, silo_ids, call)
            finally:
                index = sum(1 for name, _ in parts if not name.startswith("server "))
                parts.append((names[min(index, len(names) - 1)], time.perf_counter() - started))

        def timed(name: str, function: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return function(*args, **kwargs)
                finally:
                    parts.append((f"server {name}", time.perf_counter() - started))
            return wrapper

        actors.WorkerCalls.each = each
        protocol.begin_round = timed("begin_round", type(protocol).begin_round.__get__(protocol))
        protocol.round_relay = timed("relay", type(protocol).round_relay.__get__(protocol))
        protocol.unmask_requests = timed("unmask_requests", type(protocol).unmask_requests.__get__(protocol))
        try:
            return super().run_round(round_index)
        finally:
            actors.WorkerCalls.each = original_each
            for name in ("begin_round", "round_relay", "unmask_requests"):
                protocol.__dict__.pop(name, None)  # the protocol pickles again (server snapshots)
            self.parts = parts

    def round_parts(self) -> dict[str, float]:
        """Seconds of the last round by part (worker calls by stage; the server's protocol steps summed by kind)."""
        summed: dict[str, float] = {}
        for name, seconds in getattr(self, "parts", ()):
            summed[name] = summed.get(name, 0.0) + seconds
        return summed


@contextlib.contextmanager
def local_ray(cpus: float) -> Iterator[None]:
    """A fresh local Ray instance with ``cpus`` logical CPUs (at least this machine's cores), stopped afterwards;
    every run of the script joins it, so warm actors are reused between runs (``privsilo.simulator.runtime.pool.lease``)."""
    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, math.ceil(cpus)), include_dashboard=False,
             logging_level="ERROR")
    try:
        yield
    finally:
        ray.shutdown()


def view_bytes(view: dict[Any, Any]) -> int:
    """Sum of the pickled sizes of every message in a ``ServerActor.last_round_view()``."""
    return sum(len(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
               for messages in view.values() for message in messages.values())


def loadavg() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")
