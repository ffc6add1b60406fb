"""``privsilo pool start/status/stop``, and the Ray cluster that run, resume, sweep, audit and attack join: the
local pool's head when no address is given and it runs."""
from __future__ import annotations

import argparse
import sys

from privsilo.simulator.cli.output import after_interrupt
from privsilo.simulator.errors import PrivsiloError


def ray_address(args: argparse.Namespace, *, configured: str | None) -> str | None:
    """``--address``, else the scenario's ``ray.address`` (``configured``), else the local pool's head if it runs
    (saying so in one line), else None: Ray of the command's own."""
    from privsilo.simulator.runtime.pool.local_head import address_for_command, exit_when_stopped, serving

    address, note = address_for_command(args.address or configured)
    if note:
        print(f"privsilo: {note}", flush=True)
    if (pool := serving(address)) is not None:
        exit_when_stopped(pool, lambda why: print(f"privsilo: error: {why}; {after_interrupt(args)}", file=sys.stderr))
    return address


def cmd_pool(args: argparse.Namespace) -> int:
    """``pool start``: a local Ray head and warm pool (:mod:`privsilo.simulator.runtime.pool.local_head`); ``pool status`` / ``pool stop``
    against the cluster at ``--address``, else the local pool (:mod:`privsilo.simulator.runtime.pool.registry`)."""
    from privsilo.simulator.runtime.pool import local_head as local_pool

    if args.pool_command == "start":
        state = local_pool.start(idle_timeout=args.idle_timeout, num_cpus=args.num_cpus)
        print(f"started the local pool: Ray head at {state.address} ({state.num_cpus} CPUs); run, sweep, audit and "
              f"attack use it without --address; it stops after {state.idle_timeout:g} s without a command, or "
              f"with `privsilo pool stop`")
        return 0
    if args.address is None:
        return _local_pool_command(args.pool_command)
    import ray

    from privsilo.simulator.runtime.cluster import join_cluster
    from privsilo.simulator.runtime.pool.registry import status_table, stop_pool
    from privsilo.simulator.scenario import RayConfig

    join_cluster(args.address, connect_timeout=RayConfig().connect_timeout, field="--address")
    try:
        if args.pool_command == "status":
            print(status_table())
        else:
            print(f"stopped {stop_pool()} actors of the warm pool (registry included); none is left")
    finally:
        ray.shutdown()
    return 0


def _local_pool_command(command: str) -> int:
    """``pool status`` / ``pool stop`` without ``--address``: the local pool of ``privsilo pool start``."""
    import ray

    from privsilo.simulator.runtime.pool import local_head as local_pool
    from privsilo.simulator.runtime.cluster import join_cluster
    from privsilo.simulator.runtime.pool.registry import status_table

    state = local_pool.read_state()
    if state is None:
        raise PrivsiloError(f"pool {command}: no local pool is running (`privsilo pool start` starts one); "
                            "give --address for a cluster's pool")
    if command == "stop":
        local_pool.stop()
        print(f"stopped the local pool (Ray head at {state.address}, supervisor pid {state.pid}) and every process it started")
        return 0
    if (reason := local_pool.problem(state)) is not None:
        print(f"the local pool is not usable: {reason} (log: {local_pool.log_path()}); `privsilo pool stop` clears it")
        return 0
    print(local_pool.describe(state))
    local_pool.use_credentials()
    join_cluster(state.address, connect_timeout=local_pool.REACH_TIMEOUT_S, field="local pool")
    try:
        print(status_table(local=True))
    finally:
        ray.shutdown()
    return 0
