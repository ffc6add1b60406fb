"""Wall time of a DP-FedAvg round with distributed noise under secure aggregation against one with central noise
under secure aggregation, both through privsilo's Ray actors (issue goal: at most 1.3x).

The workload is ``scenarios/dp_fedavg/distributed.yaml`` (100 IID digits silos, MLP 64-128-10, every silo every
round, z = 2, C = 1, secure aggregation with its default SecAgg+ graph); the central variant changes only
``mechanism.noise`` to ``central``. The two scenarios run alternately, ``--repeats`` times each with ``--rounds``
rounds, so that load changes on the shared machine hit both alike. Per-round seconds come from each run's
``metrics.csv`` (``wall_seconds``), the first round of every run left out as warm-up. Prints the median seconds per
round of each, their ratio, and the median over repeats of the ratio of each pair of runs' medians.

    nice -n 10 python -m benchmarks.protocols.bench_distributed_round [--rounds 6] [--repeats 3]
"""
from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
from pathlib import Path

import yaml

from privsilo.simulator.engine import run

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "dp_fedavg" / "distributed.yaml"


def round_seconds(scenario: dict, out: Path) -> list[float]:
    """Per-round wall seconds of one run, the first round left out."""
    run(scenario, out_dir=out)
    with open(out / "metrics.csv", newline="") as handle:
        rows = [float(row["wall_seconds"]) for row in csv.DictReader(handle) if row["skipped"] != "true"]
    return rows[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    distributed = yaml.safe_load(SCENARIO.read_text())
    distributed["federation"]["rounds"] = args.rounds
    central = {**distributed, "mechanism": {**distributed["mechanism"], "noise": "central"}}
    seconds: dict[str, list[float]] = {"central": [], "distributed": []}
    pair_ratios = []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            medians = {}
            for name, scenario in (("central", central), ("distributed", distributed)):
                rounds = round_seconds(scenario, Path(scratch) / f"{name}{repeat}")
                seconds[name] += rounds
                medians[name] = statistics.median(rounds)
            pair_ratios.append(medians["distributed"] / medians["central"])
            print(f"repeat {repeat}: central {medians['central']:.3f} s/round, distributed {medians['distributed']:.3f} "
                  f"s/round, ratio {pair_ratios[-1]:.2f}", flush=True)
    central_median, distributed_median = (statistics.median(seconds[name]) for name in ("central", "distributed"))
    print(f"100 silos, secure aggregation, {args.repeats} x {args.rounds - 1} rounds each after warm-up:")
    print(f"  central noise     {central_median:.3f} s/round (median)")
    print(f"  distributed noise {distributed_median:.3f} s/round (median), ratio {distributed_median / central_median:.2f}")
    print(f"  median of the per-repeat ratios: {statistics.median(pair_ratios):.2f} (goal <= 1.3)")


if __name__ == "__main__":
    main()
