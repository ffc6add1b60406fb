"""Secure aggregation at scale through the engine: a round with SecAgg+ (``neighbours: auto``) and with the complete
graph (``all``) against the same round without secure aggregation, at 10, 100 and 1,000 silos.

The workload is ``bench_scale.py``'s (digits, MLP, FedAvg: mechanism ``none``, 20 local steps of batch 32, every
silo in every round), packed as a local session packs it (``silos_per_actor: auto``: four worker actors of half a
core beside a server of half a core on two cores: three workers, so 333 or 334 silos per worker at 1,000). All runs share one local Ray session, so the actors are
started once and reused. For every silo count, each repeat runs one federation per graph (``none``: plain sum,
``all``, ``auto``), in turn, so that all see the same machine load; each federation runs two rounds (the first
warms up) and the second is measured. Reported as medians over repeats: the round's wall seconds at the driver and
its ratio to ``none`` in the same repeat (median of the per-repeat ratios; goal for ``auto`` at 1,000: <= 1.5),
the CPU seconds the round took in every actor process (silo workers and server, ``time.process_time`` in each,
through ``__ray_call__``) and their ratio to ``none``: on a machine that other work shares, wall seconds follow
the load while CPU seconds follow the work,
the protocol's set-up seconds (secure aggregation has no run-level set-up: its key agreement is per round, the
stages ADVERTISE_KEYS / SHARE_KEYS / COLLECT_SHARES, whose seconds are given separately, measured by
``round_parts.TimedServer``), the slowest silo's protection of its upload (masking), the server's unmasking and
decoding, and the bytes the server received in the round (pickled sizes of every message of
``ServerActor.last_round_view()``). ``all`` is skipped above ``--all-up-to`` silos.

    python -m benchmarks.protocols.bench_secagg_scale [--silos 10 100 1000] [--graphs none auto all]
        [--repeats 3] [--all-up-to 1000] [--local-steps 20]   (a graph may end in :may_lie, e.g. auto:may_lie,
        and then in :RATE, the protocol.dropout_rate its parameters assume, e.g. auto:may_lie:0.01)
"""
from __future__ import annotations

import argparse
import time

import ray

from benchmarks.support.round_parts import TimedServer, loadavg, local_ray, median, view_bytes
from privsilo.simulator.engine import Federation

KEY_STAGES = ("ADVERTISE_KEYS", "SHARE_KEYS", "COLLECT_SHARES")


def scenario(silos: int, graph: str, *, local_steps: int) -> dict:
    """``graph``: ``none``, ``all``, ``auto`` or K, optionally with ``:may_lie`` (signed keys, consistency round) or
    ``:honest_but_curious``, and then optionally ``:`` and the ``protocol.dropout_rate`` the parameters assume
    (e.g. ``auto:may_lie:0.01``; default the protocol's, 0.05)."""
    neighbours, server, dropout_rate = (graph.split(":") + ["", ""])[:3]
    protocol = {"secure_aggregation": False} if graph == "none" else {
        "secure_aggregation": True, "neighbours": neighbours if neighbours in ("all", "auto") else int(neighbours),
        **({"server": server} if server else {}), **({"dropout_rate": float(dropout_rate)} if dropout_rate else {})}
    return {
        "name": f"secagg_scale_{silos}_{graph}",
        "seed": 0,
        "data": {"dataset": "digits", "partition": "iid", "silos": silos},
        "model": {"name": "mlp"},
        "federation": {"rounds": 2, "local_steps": local_steps, "batch_size": 32, "lr": 0.1},
        "mechanism": {"name": "none"},
        "protocol": protocol,
    }


def _process_cpu(_actor: object) -> float:
    return time.process_time()


def actor_cpu_seconds(federation: Federation) -> float:
    """CPU seconds used so far by the federation's actor processes (every silo worker and the server)."""
    return sum(ray.get([actor.__ray_call__.remote(_process_cpu) for actor in (*federation.workers, federation.server)]))


def measure(silos: int, graph: str, *, local_steps: int) -> dict:
    """One federation: start-up, then two rounds; the second is measured."""
    started = time.perf_counter()
    with Federation(scenario(silos, graph, local_steps=local_steps), server_actor=TimedServer) as federation:
        entered = time.perf_counter()
        first = time.perf_counter()
        federation.run_round(0)
        first = time.perf_counter() - first
        cpu, second = actor_cpu_seconds(federation), time.perf_counter()
        report = federation.run_round(1)
        second = time.perf_counter() - second
        cpu = actor_cpu_seconds(federation) - cpu
        parts = ray.get(federation.server.round_parts.remote())
        received = view_bytes(ray.get(federation.server.last_round_view.remote()))
        workers = len(federation.packing)
        setup = federation.timing["protocol_setup_seconds"]
    return {
        "startup": entered - started, "setup": setup, "first": first, "round": second, "server_round": report.seconds,
        "cpu": cpu,
        "keys": sum(parts.get(stage, 0.0) for stage in KEY_STAGES),
        "relay": sum(v for k, v in parts.items() if k.startswith("server ")),
        "train": parts.get("train+protect", 0.0), "unmask": parts.get("unmask answers", 0.0),
        "masking": report.protocol_seconds.get("silo", 0.0), "combine": report.protocol_seconds.get("server", 0.0),
        "bytes": received, "workers": workers, "abandoned": report.abandoned,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--silos", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--graphs", nargs="+", default=["none", "auto", "all"], help="none, all, auto or a number K; "
                        "append :may_lie for silos that assume a server that may lie (e.g. auto:may_lie), and "
                        ":RATE for the dropout rate the parameters assume (e.g. auto:may_lie:0.01)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--all-up-to", type=int, default=1000)
    parser.add_argument("--local-steps", type=int, default=20)
    args = parser.parse_args()
    print(f"load average at the start {loadavg()}", flush=True)
    rows = []
    with local_ray(2):
        for silos in args.silos:
            graphs = [g for g in args.graphs if not (g.startswith("all") and silos > args.all_up_to)]
            runs: dict[str, list[dict]] = {g: [] for g in graphs}
            for repeat in range(args.repeats):
                for graph in graphs:
                    runs[graph].append(measure(silos, graph, local_steps=args.local_steps))
                    print(f"{silos} silos, {graph}, repeat {repeat + 1}: round {runs[graph][-1]['round']:.2f} s, "
                          f"actor CPU {runs[graph][-1]['cpu']:.2f} s, "
                          f"load {loadavg()}", flush=True)
            for graph in graphs:
                ms = runs[graph]
                ratios = [median([m[key] / b[key] for m, b in zip(ms, runs["none"])]) if "none" in runs else float("nan")
                          for key in ("round", "cpu")]
                rows.append((silos, graph, ms[0]["workers"], {k: median([m[k] for m in ms]) for k in ms[0] if k not in ("abandoned",)},
                             ratios, sum(m["abandoned"] for m in ms)))
    print(f"\ndigits MLP, mechanism none, {args.local_steps} local steps, median of {args.repeats} interleaved repeats "
          f"(second round of each federation); load average at the end {loadavg()}")
    print("| silos | graph | workers | round s | round / none | actor CPU s | CPU / none | key stages s | server relay s "
          "| train+protect s | slowest silo masking s | unmask answers s | server combine s | first round s "
          "| protocol set-up s | MB received by server | abandoned |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for silos, graph, workers, m, (ratio, cpu_ratio), abandoned in rows:
        print(f"| {silos} | {graph} | {workers} | {m['round']:.2f} | {ratio:.3f} | {m['cpu']:.2f} | {cpu_ratio:.3f} | "
              f"{m['keys']:.2f} | {m['relay']:.2f} | "
              f"{m['train']:.2f} | {m['masking']:.3f} | {m['unmask']:.2f} | {m['combine']:.2f} | {m['first']:.2f} | "
              f"{m['setup']:.3f} | {m['bytes'] / 1e6:.2f} | {abandoned} |")


if __name__ == "__main__":
    main()
