"""N DLG attacks one after the other in this process against the same N attacks as parallel Ray tasks (one CPU
each, as ``privsilo attack`` runs them), on one real upload: MNIST, the DLG LeNet, batch 1.

Run: ``python -m benchmarks.runtime.bench_attack_parallel [--attacks 4] [--iterations 100] [--repeats 3]``. The upload
comes from a real federation round (``privsilo.simulator.attacks.capture.capture_round``). Every repeat times the
sequential loop and the parallel tasks back to back (the task workers are started once before timing, as they
are in a long ``privsilo attack``); the medians and their ratio (speed-up) are printed, with the ideal
``min(N, CPUs)``. The reconstructions of both ways are checked equal first (same seeds, same result).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import ray

from privsilo.simulator.attacks.capture import capture_round
from privsilo.simulator.attacks.inversion import InversionSettings, snapshot_steps
from privsilo.simulator.attacks.runner import invert_task
from privsilo.simulator.scenario import validate_scenario

SCENARIO = {
    "name": "bench_attack",
    "data": {"dataset": "mnist", "silos": 2},
    "model": {"name": "lenet"},
    "federation": {"rounds": 1, "local_steps": 1, "batch_size": 1, "lr": 0.1},
    "resources": {"server": {"num_cpus": 0.1}, "silo": {"num_cpus": 0.1}},
    "attack": {"target_silo": 0},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attacks", type=int, default=4, help="N attacks (seeds 0..N-1)")
    parser.add_argument("--iterations", type=int, default=100, help="L-BFGS steps per attack")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level="ERROR")
    try:
        observation = capture_round(validate_scenario(SCENARIO)).observations[0]
        settings = InversionSettings(method="dlg", iterations=args.iterations, line_search="strong_wolfe", snapshot_steps=snapshot_steps(args.iterations))
        task = ray.remote(num_cpus=1)(invert_task)
        shared = ray.put(observation)
        seeds = range(args.attacks)

        def sequential() -> list:
            return [invert_task(observation, settings, seed, 1) for seed in seeds]

        def parallel() -> list:
            return ray.get([task.remote(shared, settings, seed, 1) for seed in seeds])

        first = parallel()  # starts the task workers
        assert all(np.array_equal(a.inputs, b.inputs) for a, b in zip(sequential(), first)), "sequential and parallel differ"
        times: dict[str, list[float]] = {"sequential": [], "parallel": []}
        for _ in range(args.repeats):
            for label, fn in (("sequential", sequential), ("parallel", parallel)):
                started = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - started)
        seq, par = statistics.median(times["sequential"]), statistics.median(times["parallel"])
        print(f"{args.attacks} DLG attacks of {args.iterations} L-BFGS steps (MNIST, LeNet, batch 1), {cpus} CPUs, {args.repeats} repeats")
        print(f"sequential median {seq:.1f} s, parallel Ray tasks median {par:.1f} s: speed-up {seq / par:.2f}x (ideal {min(args.attacks, cpus)}x)")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
