"""Dropout recovery: the cost of a round in which 10 % or 30 % of the silos crash, against the same round with none,
with the plain sum and with secure aggregation (SecAgg+ ``auto`` and the complete graph ``all``).

Workload: ``bench_scale.py``'s (digits, MLP, mechanism ``none``, 20 local steps of batch 32, every silo in every
round). Packing: always ten worker actors (``silos_per_actor`` = silos / 10, half a core each), so one crashed
worker is exactly 10 % of the silos and three are 30 %: the crashes are injected (``faults.crashes``) for the
first silo of workers 0, 1 (and 2), at ``--at`` (default ``before_upload``: after local training, before the
update leaves; the whole worker exits, so none of its silos uploads) in the measured round. Every federation runs
two rounds (the first warms up) and the second is measured, so the crashed workers' silos restart from the
snapshots written at the end of round 1. The baseline with no crash keeps the same ``faults`` block (a crash
listed for a third round that never runs), so it pays the same snapshot writes and the same closing call to the
uploaders; ``--no-faults-baseline`` also measures the scenario without any ``faults`` block. With ``auto`` the
graph is chosen for ``protocol.dropout_rate`` = ``--dropout-rate`` (default 0.3, the largest fraction dropped).

Reported per silo count, graph and fraction, as medians over interleaved repeats (one federation per
configuration in turn): the round at the driver (``Federation.run_round``: what the server actor does, including
waiting for Ray to report the dead workers and the protocol's recovery of the dropped silos' masks), its parts
(key stages, training and protection, the unmasking answers, the server's unmasking and decoding), the restart
of the crashed workers afterwards (``Federation.recover``: Ray restarting the processes, rebuilding their silos
and restoring the snapshots; in ``RoundRecord.training_seconds`` too, as the engine calls it inside the round),
and the ratios round / round without crashes and (round + restart) / round without crashes of the same graph
(medians of the per-repeat ratios).

    python -m benchmarks.protocols.bench_dropout_recovery [--silos 20 100] [--graphs none auto all]
        [--fractions 0 0.1 0.3] [--repeats 3] [--at before_upload] [--all-up-to 100] [--no-faults-baseline]
"""
from __future__ import annotations

import argparse
import time

import ray

from benchmarks.support.round_parts import TimedServer, loadavg, local_ray, median
from privsilo.simulator.engine import Federation

WORKERS = 10
KEY_STAGES = ("ADVERTISE_KEYS", "SHARE_KEYS", "COLLECT_SHARES")


def scenario(silos: int, graph: str, fraction: float | None, *, at: str, dropout_rate: float) -> dict:
    """``fraction`` None: no ``faults`` block at all; 0: a crash listed for round 3, which never runs."""
    per_worker = silos // WORKERS
    protocol = {"secure_aggregation": False} if graph == "none" else {
        "secure_aggregation": True, "neighbours": graph if graph in ("all", "auto") else int(graph)}
    if graph == "auto":
        protocol["dropout_rate"] = dropout_rate
    raw = {
        "name": f"dropout_{silos}_{graph}_{fraction}",
        "seed": 0,
        "data": {"dataset": "digits", "partition": "iid", "silos": silos},
        "model": {"name": "mlp"},
        "federation": {"rounds": 3, "local_steps": 20, "batch_size": 32, "lr": 0.1},
        "mechanism": {"name": "none"},
        "protocol": protocol,
        "resources": {"silos_per_actor": per_worker},
    }
    if fraction is not None:
        crashed = round(fraction * WORKERS)
        raw["faults"] = {"crashes": [{"silo": w * per_worker, "round": 2, "at": at} for w in range(crashed)] if crashed
                         else [{"silo": 0, "round": 3, "at": at}]}
    return raw


def measure(raw: dict) -> dict:
    with Federation(raw, server_actor=TimedServer) as federation:
        federation.run_round(0)
        started = time.perf_counter()
        report = federation.run_round(1)
        round_seconds = time.perf_counter() - started
        parts = ray.get(federation.server.round_parts.remote())
        started = time.perf_counter()
        if report.crashed_workers:
            federation.recover(report.crashed_workers)
        restart = time.perf_counter() - started
    return {
        "round": round_seconds, "restart": restart, "keys": sum(parts.get(s, 0.0) for s in KEY_STAGES),
        "train": parts.get("train+protect", 0.0), "unmask": parts.get("unmask answers", 0.0),
        "server": sum(v for k, v in parts.items() if k.startswith("server ")) + report.protocol_seconds.get("server", 0.0),
        "dropped": len(report.dropped), "crashed": len(report.crashed_workers), "abandoned": report.abandoned,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--silos", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--graphs", nargs="+", default=["none", "auto", "all"])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.1, 0.3])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--at", choices=["setup", "before_upload", "after_upload"], default="before_upload")
    parser.add_argument("--all-up-to", type=int, default=100)
    parser.add_argument("--dropout-rate", type=float, default=0.3)
    parser.add_argument("--no-faults-baseline", action="store_true")
    args = parser.parse_args()
    fractions = ([None] if args.no_faults_baseline else []) + [f for f in args.fractions if f != 0.0]
    fractions = [0.0] + fractions  # the baseline comes first in every repeat
    print(f"load average at the start {loadavg()}", flush=True)
    rows = []
    with local_ray(0.5 + WORKERS * 0.5):
        for silos in args.silos:
            graphs = [g for g in args.graphs if not (g == "all" and silos > args.all_up_to)]
            runs = {(g, f): [] for g in graphs for f in fractions}
            for repeat in range(args.repeats):
                for graph in graphs:
                    for fraction in fractions:
                        m = measure(scenario(silos, graph, fraction, at=args.at, dropout_rate=args.dropout_rate))
                        runs[graph, fraction].append(m)
                        print(f"{silos} silos, {graph}, {fraction}, repeat {repeat + 1}: round {m['round']:.2f} s, "
                              f"restart {m['restart']:.2f} s, dropped {m['dropped']}, abandoned {m['abandoned']}, "
                              f"load {loadavg()}", flush=True)
            for graph in graphs:
                base = runs[graph, 0.0]
                for fraction in fractions:
                    ms = runs[graph, fraction]
                    ratio = median([m["round"] / b["round"] for m, b in zip(ms, base)])
                    total = median([(m["round"] + m["restart"]) / b["round"] for m, b in zip(ms, base)])
                    rows.append((silos, graph, fraction, {k: median([float(m[k]) for m in ms]) for k in ms[0]}, ratio, total,
                                 sum(m["abandoned"] for m in ms)))
    print(f"\ndigits MLP, mechanism none, 20 local steps, {WORKERS} workers, crashes at {args.at}; median of "
          f"{args.repeats} interleaved repeats (second round of each federation); load average at the end {loadavg()}")
    print("| silos | graph | dropped | round s | round / no crash | key stages s | train+protect s | unmask answers s "
          "| server protocol s | restart s | (round + restart) / no crash | abandoned |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for silos, graph, fraction, m, ratio, total, abandoned in rows:
        label = "no faults block" if fraction is None else f"{fraction:.0%} ({m['dropped']:.0f})"
        print(f"| {silos} | {graph} | {label} | {m['round']:.2f} | {ratio:.2f} | {m['keys']:.2f} | {m['train']:.2f} | "
              f"{m['unmask']:.2f} | {m['server']:.2f} | {m['restart']:.2f} | {total:.2f} | {abandoned} |")


if __name__ == "__main__":
    main()
