"""Where a warm ``privsilo run --address`` spends its time before and around the run itself: fresh interpreters
that stop after each step, against a Ray head this script starts on 127.0.0.1 (stopped at the end).

Steps, each the wall time of a whole process, repetitions interleaved: a bare interpreter; importing the CLI and
the engine (torch, Ray); that plus the report code (matplotlib); that plus joining the cluster and leaving it
(``ray.init(address=...)``, ``ray.shutdown()``). Prints each step's median and its increment over the previous.

    python -m benchmarks.support.startup_parts [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from benchmarks.runtime.bench_startup import REPO


def start_cluster(cpus: int):
    """A Ray head on 127.0.0.1 with ``cpus`` logical CPUs."""
    from ray.cluster_utils import Cluster

    return Cluster(initialize_head=True, head_node_args={"num_cpus": cpus, "node_ip_address": "127.0.0.1",
                                                         "include_dashboard": False})

STEPS = {
    "interpreter": "pass",
    "+ import privsilo.simulator.cli, privsilo.simulator.engine (torch, Ray)": "import privsilo.simulator.cli, privsilo.simulator.engine.api",
    "+ import privsilo.simulator.run_dir.writers (matplotlib)": "import privsilo.simulator.cli, privsilo.simulator.engine.api, privsilo.simulator.run_dir.writers",
    "+ ray.init(address=HEAD), ray.shutdown()": ("import privsilo.simulator.cli, privsilo.simulator.engine.api, privsilo.simulator.run_dir.writers, ray; "
                                                 "ray.init(address='{address}', logging_level='ERROR'); ray.shutdown()"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.update({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
                       "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)})
    load_before = os.getloadavg()
    cluster = start_cluster(2)
    seconds: dict[str, list[float]] = {step: [] for step in STEPS}
    try:
        for _ in range(args.repeats):
            for step, code in STEPS.items():
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", code.format(address=cluster.address)], cwd=REPO, check=True,
                               capture_output=True)
                seconds[step].append(time.perf_counter() - started)
    finally:
        cluster.shutdown()
    print(f"medians of {args.repeats} interleaved repetitions; load average {'/'.join(f'{x:.1f}' for x in load_before)} "
          f"at the start, {'/'.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    previous = 0.0
    for step, values in seconds.items():
        median = statistics.median(values)
        print(f"  {step:55s} {median:5.2f} s  (+{median - previous:.2f} s)")
        previous = median


if __name__ == "__main__":
    main()
