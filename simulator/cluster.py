"""Connecting to Ray: a local instance by default, or an existing cluster by address."""
from __future__ import annotations

import math
import os
from contextlib import contextmanager
from typing import Iterator

import ray

from simulator.errors import PrivsiloError


@contextmanager
def ray_session(*, address: str | None, cpus_needed: float, gpus_needed: float, actors: int) -> Iterator[None]:
    """Use the Ray session already open in this process, or open one (and close it afterwards).

    A local session gets at least as many logical CPUs/GPUs as the scenario asks for, so that e.g. ten silos
    with ``num_cpus: 0.5`` are scheduled at once on two cores, and silos with a GPU share are scheduled on a
    machine without a GPU (they then train on the CPU, with a warning).
    """
    if ray.is_initialized():
        _check_capacity(cpus_needed, gpus_needed, actors)
        yield
        return
    if address:
        try:
            ray.init(address=address, logging_level="ERROR", configure_logging=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise PrivsiloError(f"ray.address: cannot join the Ray cluster at {address!r} ({exc})") from None
    else:
        cpus = max(os.cpu_count() or 1, math.ceil(cpus_needed))
        gpus = math.ceil(gpus_needed) if gpus_needed else None
        # address="local": always a fresh local instance, never a cluster someone else started on this machine.
        ray.init(address="local", num_cpus=cpus, num_gpus=gpus, include_dashboard=False, logging_level="ERROR")
    try:
        _check_capacity(cpus_needed, gpus_needed, actors)
        yield
    finally:
        ray.shutdown()


# Resident memory of one training actor process with torch loaded, measured here at about 450 MiB.
ACTOR_MEMORY_BYTES = 450 * 2**20


def _check_capacity(cpus_needed: float, gpus_needed: float, actors: int) -> None:
    """Refuse before starting anything when the cluster clearly cannot host the scenario's actors."""
    total = ray.cluster_resources()
    memory = total.get("memory", 0.0)
    if actors * ACTOR_MEMORY_BYTES > memory:
        raise PrivsiloError(
            f"data.silos: {actors - 1} silos need about {actors * ACTOR_MEMORY_BYTES / 2**30:.1f} GiB for their actor "
            f"processes but Ray has {memory / 2**30:.1f} GiB; use at most {int(memory // ACTOR_MEMORY_BYTES) - 1} silos "
            "here or add nodes (one actor per silo)"
        )
    for resource, needed, field in (("CPU", cpus_needed, "num_cpus"), ("GPU", gpus_needed, "num_gpus")):
        have = total.get(resource, 0.0)
        if needed > have + 1e-9:
            raise PrivsiloError(
                f"resources: the scenario's actors need {needed:g} {resource} in all but the Ray cluster has {have:g}; "
                f"lower resources.*.{field} or add nodes"
            )
