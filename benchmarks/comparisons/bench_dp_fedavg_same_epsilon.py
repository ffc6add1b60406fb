"""What distributed noise buys: ``dp_fedavg`` with distributed noise under secure aggregation, ``dp_fedavg`` with
central noise and ``dp_sgd`` under secure aggregation, all at one epsilon number, over several seeds, in one run.

1. ``dp_fedavg``, ``noise: distributed``, ``protocol.secure_aggregation: true``, at ``--noise-multiplier`` z: every
   silo adds its share of exact discrete Gaussian noise, so the sum carries the central noise z C and no party
   sees it without noise. Its client-level epsilon E (Kairouz et al.'s accountant, as privsilo reports it) sets the
   number the other two are calibrated to.
2. ``dp_fedavg``, ``noise: central`` (a trusted server adds the noise; no secure aggregation) at the z whose
   client-level epsilon is E (every silo every round, found by bisection on privsilo's RDP accountant,
   ``privsilo.mechanisms.accounting.schedule_epsilon``): the price of removing the trusted server.
3. ``dp_sgd`` under secure aggregation, each silo running DP-SGD with the full record-level noise (no silo trusts
   the others or the server), at the noise multiplier whose record-level epsilon is E (the same accountant; every
   silo samples its records at the same public rate q = batch size / (training records / silos)).

The epsilons are the same number, not the same guarantee: E for ``dp_fedavg`` protects everything one silo
contributes (a whole client); for ``dp_sgd`` it protects one record of one silo, a much weaker promise for a silo's
data as a whole. Same seed, same split, initial weights and silo generators on every side.

Defaults (digits, 10 IID silos, the MLP 64-128-10, 20 local SGD steps of batch 32 at lr 0.1, 10 rounds, C = 1, z =
1, delta 1e-5, seeds 0 1 2) take about 4 minutes on 2 shared cores; ``--dataset mnist --silos 100 --rounds 20
--local-steps 10 --noise-multiplier 2`` is MNIST with 100 silos (``privsilo data fetch mnist`` first; about 13
minutes). The table's last column is the median wall time of a run (the process's first run includes starting
Ray). ``--others central`` leaves ``dp_sgd`` out (the distributed side always runs: it sets E).

    python -m benchmarks.comparisons.bench_dp_fedavg_same_epsilon [--seeds 0 1 2] [--noise-multiplier 1] [--clip-norm 1]
        [--dataset digits] [--silos 10] [--model mlp_128] [--rounds 10] [--local-steps 20] [--batch-size 32] [--lr 0.1]
        [--delta 1e-5] [--others central dp_sgd]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.comparisons.bench_dp_fedavg_vs_flower import refuse_invalid  # noqa: E402
from benchmarks.comparisons.bench_vs_flower import fmt_load  # noqa: E402
from benchmarks.support.workload import CPUS  # noqa: E402

SIDES = ("distributed", "central", "dp_sgd")
PROTECTS = {"distributed": "one silo (client-level)", "central": "one silo (client-level), trusted server",
            "dp_sgd": "one record of one silo (record-level)"}


def scenario(args: argparse.Namespace, seed: int, mechanism: dict, *, secure_aggregation: bool) -> dict:
    """The workload at ``seed`` with ``mechanism``; every silo every round."""
    per_actor = math.ceil(args.silos / CPUS)
    return {
        "name": "bench_dp_fedavg_same_epsilon", "seed": seed,
        "data": {"dataset": args.dataset, "partition": "iid", "silos": args.silos},
        "model": {"name": args.model},
        "federation": {"rounds": args.rounds, "client_rate": 1.0, "local_steps": args.local_steps,
                       "batch_size": args.batch_size, "lr": args.lr},
        "mechanism": mechanism,
        "protocol": {"secure_aggregation": secure_aggregation},
        "resources": {"server": {"num_cpus": 0}, "silo": {"num_cpus": CPUS / 2}, "silos_per_actor": per_actor},
    }


def calibrate(epsilon_of, target: float) -> float:
    """The smallest noise multiplier (to 1e-6 relative) whose epsilon ``epsilon_of(z)`` is at most ``target``
    (epsilon falls as z grows); the bracket's upper end, so the calibrated side never claims less than ``target``."""
    low, high = 1e-3, 1.0
    while epsilon_of(high) > target:
        low, high = high, 2 * high
    while high - low > 1e-6 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if epsilon_of(middle) > target else (low, middle)
    return high


def record_rate(args: argparse.Namespace) -> float:
    """dp_sgd's public Poisson rate: batch size over a silo's share of the training records (IID, even split)."""
    from privsilo.simulator.data import load_dataset

    records = len(load_dataset(args.dataset, seed=args.seeds[0]).y_train) // args.silos
    return min(1.0, args.batch_size / records)


def privsilo_run(raw: dict) -> dict:
    """One privsilo run in this interpreter: the final test accuracy, the privacy report and the wall seconds."""
    from privsilo.simulator.engine import run

    started = time.perf_counter()
    result = run(raw)
    return {"accuracy": result.rounds[-1].report.accuracy, "privacy": dict(result.privacy),
            "wall_seconds": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--noise-multiplier", type=float, default=1.0, help="z of the distributed side")
    parser.add_argument("--clip-norm", type=float, default=1.0, help="C of dp_fedavg and dp_sgd's per-record C")
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--silos", type=int, default=10)
    parser.add_argument("--model", default="mlp_128")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--local-steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--others", nargs="*", choices=SIDES[1:], default=list(SIDES[1:]),
                        help="the sides calibrated to the distributed side's epsilon")
    args = parser.parse_args()
    os.environ.update({"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"})
    import privsilo.simulator  # noqa: F401  (Ray environment)
    from privsilo.mechanisms.accounting import schedule_epsilon

    fedavg = {"name": "dp_fedavg", "clip_norm": args.clip_norm, "delta": args.delta}
    for mechanism, secure in (({**fedavg, "noise": "distributed", "noise_multiplier": args.noise_multiplier}, True),
                              ({"name": "dp_sgd", "max_grad_norm": args.clip_norm, "delta": args.delta}, True)):
        refuse_invalid(scenario(args, args.seeds[0], mechanism, secure_aggregation=secure))
    load_before = os.getloadavg()
    results: dict[str, list[dict]] = {side: [] for side in SIDES}
    for seed in args.seeds:  # the distributed side first: its epsilon is the target
        raw = scenario(args, seed, {**fedavg, "noise": "distributed", "noise_multiplier": args.noise_multiplier},
                       secure_aggregation=True)
        results["distributed"].append(privsilo_run(raw))
        print(f"seed {seed}: distributed {results['distributed'][-1]['accuracy']:.4f}", flush=True)
    target = max(run["privacy"]["epsilon"] for run in results["distributed"])  # the same unless a silo dropped out
    settings = {"distributed": f"z = {args.noise_multiplier:g}"}
    if "central" in args.others:
        z = calibrate(lambda z: schedule_epsilon(((1.0, z, args.rounds),), args.delta, "rdp"), target)
        settings["central"] = f"z = {z:.6f}"
        for seed in args.seeds:
            raw = scenario(args, seed, {**fedavg, "noise_multiplier": z}, secure_aggregation=False)
            results["central"].append(privsilo_run(raw))
            print(f"seed {seed}: central {results['central'][-1]['accuracy']:.4f}", flush=True)
    if "dp_sgd" in args.others:
        q = record_rate(args)
        sigma = calibrate(lambda s: schedule_epsilon(((q, s, args.rounds * args.local_steps),), args.delta, "rdp"), target)
        settings["dp_sgd"] = f"sigma = {sigma:.6f}, q = {q:.4f}"
        mechanism = {"name": "dp_sgd", "noise_multiplier": sigma, "max_grad_norm": args.clip_norm, "delta": args.delta,
                     "sampling_rate": q}
        for seed in args.seeds:
            results["dp_sgd"].append(privsilo_run(scenario(args, seed, mechanism, secure_aggregation=True)))
            print(f"seed {seed}: dp_sgd {results['dp_sgd'][-1]['accuracy']:.4f}", flush=True)

    print(f"workload: {args.silos} IID silos of {args.dataset}, {args.model}, {args.local_steps} local steps of batch "
          f"{args.batch_size} at lr {args.lr:g}, {args.rounds} rounds, every silo every round, C = {args.clip_norm:g}, "
          f"delta {args.delta:g}, {CPUS} CPUs; seeds {' '.join(map(str, args.seeds))}; load average (1, 5, 15 min) "
          f"{fmt_load(load_before)} at the start, {fmt_load(os.getloadavg())} at the end")
    print(f"target epsilon E = {target:.3f} (dp_fedavg distributed, client-level)")
    print("| side | noise | epsilon protects | epsilon reported | " + " | ".join(f"seed {s}" for s in args.seeds)
          + " | mean (sd) | median | s per run |")
    for side in (side for side in SIDES if results[side]):
        runs = results[side]
        accuracies = [run["accuracy"] for run in runs]
        sd = statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0
        print(f"| {side} | {settings[side]} | {PROTECTS[side]} | {max(run['privacy']['epsilon'] for run in runs):.3f} | "
              + " | ".join(f"{a:.4f}" for a in accuracies)
              + f" | {statistics.mean(accuracies):.4f} ({sd:.4f}) | {statistics.median(accuracies):.4f} | "
              f"{statistics.median(run['wall_seconds'] for run in runs):.0f} |")


if __name__ == "__main__":
    main()
