"""Drivers for tests/system/test_warm_pool.py: each command joins the cluster at ADDRESS as its own Ray job (a separate
process, as two ``privsilo run`` would be) and prints one JSON line.

    python -m tests.support.pool_drivers ADDRESS lease COUNT [--version V] [--hold | --die]
    python -m tests.support.pool_drivers ADDRESS isolation
    python -m tests.support.pool_drivers ADDRESS alive
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys

import privsilo.simulator  # noqa: F401  (the Ray environment)

LIGHT_CPUS = 0.0  # Sleeper actors hold no CPU share, so any number of them fits the test cluster


class Sleeper:
    """A pooled actor without torch: starts in a fraction of a second."""

    def __init__(self, *, num_cpus: float) -> None:
        self.run = None

    def release(self) -> None:
        self.run = None


def lease(count: int, *, version: str | None, hold: bool, die: bool) -> None:
    """Lease ``count`` Sleepers (under a made-up code version with ``version``), wait until they are scheduled (as
    a run does, which ends its turn at starting actors), print their actor ids, and with ``hold`` keep them until a
    line arrives on stdin; then give them back. With ``die`` the process exits at once instead, as a killed driver
    would, never giving them back."""
    from privsilo.simulator.runtime.pool import registry as detached_pool
    from privsilo.simulator.runtime.pool.lease import ActorShape, wait_until_scheduled

    if version is not None:
        detached_pool.code_version = lambda: version
    shape = ActorShape(Sleeper, num_cpus=LIGHT_CPUS, num_gpus=0.0)
    pool = detached_pool.DetachedPool(idle_timeout=600)
    handles = pool.lease({shape: count})[shape]
    assert wait_until_scheduled([], pool=pool, timeout=60)[1] == []
    print(json.dumps(sorted(h._actor_id.hex() for h in handles)), flush=True)
    if die:
        os._exit(0)
    if hold:
        sys.stdin.readline()
    pool.give_back(shape, handles)


def leftovers(worker: object) -> dict[str, int]:
    """In an actor's process: the run objects still alive (silos, torch modules, protocol and mechanism state)
    and the attributes the actor keeps."""
    import torch

    from privsilo.mechanisms.base import ServerMechanism, SiloMechanism
    from privsilo.protocols.base import ServerProtocol
    from privsilo.simulator.engine.silo import Silo

    gc.collect()
    kinds = {"silos": Silo, "torch_modules": torch.nn.Module, "server_protocols": ServerProtocol,
             "mechanisms": (ServerMechanism, SiloMechanism)}
    alive = {name: sum(isinstance(obj, kind) for obj in gc.get_objects()) for name, kind in kinds.items()}
    silos = getattr(worker, "silos", {})
    return {**alive, "hosted": len(silos), "attributes_holding_a_run": sum(
        value is not None for name, value in vars(worker).items() if name in ("vault", "model", "state", "protocol"))}


def isolation() -> None:
    """Lease the idle actors a small run left (its shapes) and report what of that run each still holds."""
    import ray

    from privsilo.simulator.engine.actors import ServerActor, SiloWorker
    from privsilo.simulator.runtime.pool.registry import DetachedPool
    from privsilo.simulator.runtime.pool.lease import ActorShape

    shapes = {ActorShape(SiloWorker, num_cpus=0.5, num_gpus=0.0): 3, ActorShape(ServerActor, num_cpus=0.5, num_gpus=0.0): 1}
    pool = DetachedPool(idle_timeout=600)
    leased = pool.lease(shapes)
    handles = [h for group in leased.values() for h in group]
    reports = ray.get([h.__ray_call__.remote(leftovers) for h in handles])
    print(json.dumps({"actor_ids": sorted(h._actor_id.hex() for h in handles), "leftovers": reports}), flush=True)
    for shape, group in leased.items():
        pool.give_back(shape, group)


def alive() -> None:
    """The names and ids of the detached actors alive in the cluster (Ray's GCS actor table)."""
    from ray._private.state import actors

    print(json.dumps(sorted([a["Name"], a["ActorID"]] for a in actors().values() if a["IsDetached"] and a["State"] == "ALIVE")),
          flush=True)


def main() -> None:
    import ray

    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("command", choices=("lease", "isolation", "alive"))
    parser.add_argument("count", type=int, nargs="?", default=0)
    parser.add_argument("--version")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--die", action="store_true")
    args = parser.parse_args()
    ray.init(address=args.address, logging_level="ERROR")
    if args.command == "lease":
        lease(args.count, version=args.version, hold=args.hold, die=args.die)
    elif args.command == "isolation":
        isolation()
    else:
        alive()
    ray.shutdown()


if __name__ == "__main__":
    main()
