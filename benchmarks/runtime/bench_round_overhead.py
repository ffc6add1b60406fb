"""Wall time of a steady-state FedAvg round through privsilo's Ray actors vs the same computation in one process.

The workload is issue 13's (``benchmarks/support/workload.py``: 10 IID silos of digits, MLP 64-128-10, batch 32, lr 0.1,
2 CPUs: two worker actors of one CPU, five silos each), run with each of the given numbers of local steps (default
20 and 5). A second packing, all ten silos in one worker actor, does the same sequential work as the baseline, so
its ratio is the actors' fixed per-round cost alone. The baseline (the floor) calls the same silo objects and the
same server aggregation and evaluation one after another in this process, with no Ray, on one torch thread (as
each actor has: for this small network more threads only add synchronisation, which on a busy machine costs
many times the work; ``--baseline-threads`` changes it). Rounds of the two alternate (one baseline round, one
actor round), so that both see the same load on a shared machine. Prints, per packing and local-step count, the
median seconds per round of each after the warm-up rounds and the median over rounds of the ratio of each round
pair (actors / single process; less sensitive to the machine's load changing during the run than the ratio of the
medians); the goal is at most 1.15. Both compute the same model: the final test accuracies are printed side by side.

    python -m benchmarks.runtime.bench_round_overhead [--local-steps 20 5] [--rounds 22] [--warmup 2] [--baseline-threads 1]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import torch

import privsilo.simulator  # noqa: F401  (Ray environment)
from privsilo.protocols.plain import PlainSumServer
from privsilo.simulator.engine.actors import ServerActor
from privsilo.simulator.data import load_dataset
from privsilo.simulator.data.silos import partition_silos, run_seeds
from privsilo.simulator.engine import Federation, initial_state
from privsilo.simulator.engine.messages import RoundBroadcast
from privsilo.simulator.scenario import validate_scenario
from privsilo.simulator.engine.silo import Silo, SiloSpec
from benchmarks.support.workload import fedavg_scenario


class SingleProcessFederation:
    """The baseline: the scenario's silos and server objects, called in turn in this process on ``threads`` torch
    threads."""

    def __init__(self, scenario, *, threads: int) -> None:
        dataset = load_dataset(scenario.data.dataset, seed=scenario.seed)
        seeds = run_seeds(scenario.seed, scenario.data.silos)
        parts = partition_silos(scenario, dataset, np.random.default_rng(seeds["partition"]))
        common = dict(scenario=scenario, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes)
        self.silos = [
            Silo(SiloSpec(silo_id=i, record_ids=idx, seed=seeds["silos"][i]), features=dataset.x_train[idx],
                 labels=dataset.y_train[idx], device=torch.device("cpu"), **common)
            for i, idx in enumerate(parts)
        ]
        self.server = ServerActor(num_cpus=0)
        self.server.open(workers=(), test_features=dataset.x_test, test_labels=dataset.y_test,
                         initial_state=initial_state(scenario, dataset, seeds["init"]), seed=seeds["server"], **common)
        torch.set_num_threads(threads)  # after ServerActor, which sets torch's threads to its CPU share
        self.protocol = PlainSumServer()
        self.participants = tuple(range(len(self.silos)))

    def run_round(self, round_index: int) -> float:
        """One round; the test accuracy after it."""
        server = self.server
        broadcast = RoundBroadcast(round_index=round_index, participants=self.participants, state=server.state)
        inbox = {silo.silo_id: silo.train(broadcast).payload for silo in self.silos}
        total = self.protocol.combine(inbox, round_index=round_index, participants=self.participants)
        server.state = server.mechanism.aggregate(server.state, total, num_participants=len(self.silos))
        return server.evaluate()[1]


PACKINGS = {"2 workers x 5 silos": 5, "1 worker x 10 silos": 10}


def round_times(local_steps: int, *, silos_per_actor: int, rounds: int, baseline_threads: int
                ) -> tuple[list[float], list[float], tuple[float, float]]:
    """Seconds per round of the baseline and of the actors, rounds alternating between the two, and the final
    test accuracy of each (the same computation, so equal up to floating-point summation order)."""
    raw = fedavg_scenario(name="bench_round_overhead", rounds=rounds, local_steps=local_steps)
    raw["resources"]["silos_per_actor"] = silos_per_actor
    scenario = validate_scenario(raw)
    baseline = SingleProcessFederation(scenario, threads=baseline_threads)
    single, actors = [], []
    with Federation(scenario) as federation:
        for round_index in range(rounds):
            start = time.perf_counter()
            baseline_accuracy = baseline.run_round(round_index)
            single.append(time.perf_counter() - start)
            start = time.perf_counter()
            actor_accuracy = federation.run_round(round_index).accuracy
            actors.append(time.perf_counter() - start)
    return single, actors, (baseline_accuracy, actor_accuracy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local-steps", type=int, nargs="+", default=[20, 5])
    parser.add_argument("--rounds", type=int, default=22)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--baseline-threads", type=int, default=1)
    args = parser.parse_args()
    print(f"issue 13's workload: 10 IID silos of digits, MLP 64-128-10, batch 32, 2 CPUs; median of "
          f"{args.rounds - args.warmup} rounds after {args.warmup} warm-up rounds; torch threads in the baseline: "
          f"{args.baseline_threads}; load average {'/'.join(f'{v:.0f}' for v in os.getloadavg())}")
    for packing, silos_per_actor in PACKINGS.items():
        for local_steps in args.local_steps:
            single, actors, accuracies = round_times(local_steps, silos_per_actor=silos_per_actor, rounds=args.rounds,
                                                     baseline_threads=args.baseline_threads)
            single, actors = single[args.warmup:], actors[args.warmup:]
            paired = statistics.median(a / s for a, s in zip(actors, single))
            print(f"{packing}, {local_steps:3d} local steps: single process {statistics.median(single):.4f} s/round, "
                  f"Ray actors {statistics.median(actors):.4f} s/round, ratio actors / single process {paired:.3f} "
                  f"(goal <= 1.15); final accuracy {accuracies[0]:.4f} / {accuracies[1]:.4f}", flush=True)
    print(f"load average at the end {'/'.join(f'{v:.0f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
