"""Wall time of a FedAvg round through the Ray actors vs the same computation in one process.

Both sides use the same data split, seeds, silo objects and aggregation; the baseline simply calls the silos
one after another in this process. Prints the median seconds per round of each and their ratio
(actors / single process); the project's goal is a ratio of at most 1.15.

    python benchmarks/bench_round_overhead.py [--silos 10] [--rounds 12] [--model mlp] [--local-steps 100]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import simulator  # noqa: F401  (Ray environment)
from protocols.plain import PlainSumServer
from simulator.actors import ServerActor
from simulator.data import load_dataset
from simulator.engine import Federation, _initial_state, _seeds, _silo_indices
from simulator.messages import RoundBroadcast
from simulator.scenario import validate_scenario
from simulator.silo import Silo, SiloSpec


def scenario_for(args: argparse.Namespace):
    return validate_scenario(
        {
            "name": "bench_round_overhead",
            "seed": 0,
            "data": {"dataset": args.dataset, "partition": "iid", "silos": args.silos},
            "model": {"name": args.model},
            "federation": {"rounds": args.rounds, "client_rate": 1.0, "local_steps": args.local_steps, "batch_size": 32, "lr": 0.05},
            "mechanism": {"name": "none"},
            "resources": {"server": {"num_cpus": 0.1}, "silo": {"num_cpus": 0.1, "num_gpus": 0}},
        }
    )


def single_process_round_times(scenario) -> list[float]:
    """The baseline: the same silo and server objects, called in turn in this process (all torch threads)."""
    threads = torch.get_num_threads()
    dataset = load_dataset(scenario.data.dataset, seed=scenario.seed)
    seeds = _seeds(scenario.seed, scenario.data.silos)
    parts = _silo_indices(scenario, dataset, np.random.default_rng(seeds["partition"]))
    common = dict(scenario=scenario, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes)
    silos = [
        Silo(SiloSpec(silo_id=i, record_ids=idx, seed=seeds["silos"][i]), features=dataset.x_train[idx],
             labels=dataset.y_train[idx], device=torch.device("cpu"), **common)
        for i, idx in enumerate(parts)
    ]
    server = ServerActor(
        workers=[], test_features=dataset.x_test, test_labels=dataset.y_test,
        initial_state=_initial_state(scenario, dataset, seeds["init"]), seed=seeds["server"], **common,
    )
    torch.set_num_threads(threads)  # the actor classes limit torch to their CPU share; the baseline may use all
    protocol = PlainSumServer()
    participants = tuple(range(len(silos)))
    times = []
    for round_index in range(scenario.federation.rounds):
        start = time.perf_counter()
        broadcast = RoundBroadcast(round_index=round_index, participants=participants, state=server.state)
        inbox = {s.silo_id: s.train(broadcast).payload for s in silos}
        total = protocol.combine(inbox, round_index=round_index, participants=participants)
        server.state = server.mechanism.aggregate(server.state, total, num_participants=len(silos))
        server.evaluate()
        times.append(time.perf_counter() - start)
    return times


def actor_round_times(scenario) -> list[float]:
    times = []
    with Federation(scenario) as federation:
        for round_index in range(scenario.federation.rounds):
            start = time.perf_counter()
            federation.run_round(round_index)
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--silos", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--local-steps", type=int, default=100)
    args = parser.parse_args()
    scenario = scenario_for(args)
    warmup = 2
    baseline = single_process_round_times(scenario)[warmup:]
    baseline_threads = torch.get_num_threads()
    actors = actor_round_times(scenario)[warmup:]
    base_median, actor_median = statistics.median(baseline), statistics.median(actors)
    print(f"{args.silos} silos, {args.model} on {args.dataset}, {args.local_steps} local steps, "
          f"{len(actors)} timed rounds (after {warmup} warm-up rounds), torch threads in baseline: {baseline_threads}")
    print(f"single process: median {base_median:.4f} s/round")
    print(f"Ray actors:     median {actor_median:.4f} s/round")
    print(f"ratio actors / single process: {actor_median / base_median:.3f}  (goal <= 1.15)")


if __name__ == "__main__":
    main()
