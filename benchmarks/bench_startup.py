"""Start-up of the quickstart's whole command: cold (``privsilo run`` starting its own Ray) against warm (``privsilo
run --address`` against a running local cluster whose warm pool holds the actors of an earlier run).

Starts a Ray head on 127.0.0.1 (``ray.cluster_utils.Cluster``, stopped at the end with every process it started),
runs the command once against it to fill the pool, then repeats, alternating the order each repetition:

- ``cold``: ``privsilo run SCENARIO`` (a fresh local Ray);
- ``warm``: ``privsilo run SCENARIO --address HEAD``;
- ``baseline:DIR`` (with ``--baseline DIR``, repeatable): the cold command from another checkout
  (``PYTHONPATH=DIR``), e.g. the commit before a start-up change.

Each command's wall time is that of its whole process; start-up is ``summary.json`` ``timing`` data + workers +
protocol set-up. Prints the medians, the ratios to ``cold``, the goals (warm wall <= 3 s, warm start-up <= 1 s)
and whether every run's ``metrics.csv`` (without wall times) and ``model.pt`` equal the first cold run's.

    python benchmarks/bench_startup.py [--repeats 3] [--scenario scenarios/quickstart.yaml] [--baseline DIR ...]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WARM_WALL_GOAL_S, WARM_STARTUP_GOAL_S = 3.0, 1.0


def start_cluster(cpus: int):
    """A Ray head on 127.0.0.1 with ``cpus`` logical CPUs, whose workers import this checkout."""
    from ray.cluster_utils import Cluster

    return Cluster(initialize_head=True, head_node_args={"num_cpus": cpus, "node_ip_address": "127.0.0.1",
                                                         "include_dashboard": False})


def timed_run(scenario: Path, out: Path, *, env: dict[str, str], address: str | None) -> dict:
    """Wall seconds of one whole ``privsilo run`` of the checkout on ``env``'s PYTHONPATH (run from there:
    ``python -m`` puts the working directory first on ``sys.path``) and its start-up seconds from summary.json."""
    command = [sys.executable, "-m", "simulator.cli", "run", str(scenario.resolve()), "--out", str(out), "--no-progress"]
    started = time.perf_counter()
    done = subprocess.run(command + (["--address", address] if address else []), env=env, cwd=env["PYTHONPATH"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"bench_startup: {' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    timing = json.loads((out / "summary.json").read_text())["timing"]
    startup = timing["data_seconds"] + timing["workers_seconds"] + timing["protocol_setup_seconds"]
    return {"wall": wall, "startup": startup, "out": out}


def same_results(a: Path, b: Path) -> bool:
    """metrics.csv without wall times and every tensor of model.pt equal."""
    import torch

    def metrics(path: Path) -> list[dict]:
        return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in csv.DictReader((path / "metrics.csv").open())]

    model_a, model_b = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    return (metrics(a) == metrics(b) and model_a.keys() == model_b.keys()
            and all(torch.equal(model_a[k], model_b[k]) for k in model_a))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scenario", type=Path, default=REPO / "scenarios" / "quickstart.yaml")
    parser.add_argument("--cluster-cpus", type=int, default=max(os.cpu_count() or 1, 3), help="the quickstart's actors ask for 3")
    parser.add_argument("--baseline", type=Path, action="append", default=[], help="another checkout whose cold command is timed too (repeatable)")
    args = parser.parse_args()
    # Ray on the loopback address (drivers and the head alike), no auth prompt, no usage stats.
    quiet = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    os.environ.update(quiet)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    os.environ["PYTHONPATH"] = str(REPO)  # the cluster's workers import this checkout
    arms: dict[str, tuple[dict[str, str], bool]] = {
        "cold": (env, False), "warm": (env, True)}
    for checkout in args.baseline:
        arms[f"baseline:{checkout.name}"] = ({**env, "PYTHONPATH": str(checkout.resolve())}, False)
    work = Path(tempfile.mkdtemp(prefix="bench_startup_"))
    load_before = os.getloadavg()
    cluster = start_cluster(args.cluster_cpus)
    try:
        first = timed_run(args.scenario, work / "first", env=env, address=cluster.address)
        print(f"first run against the cluster (fills the pool): {first['wall']:.1f} s, start-up {first['startup']:.2f} s", flush=True)
        rows: dict[str, list[dict]] = {arm: [] for arm in arms}
        for repeat in range(args.repeats):
            order = list(arms) if repeat % 2 == 0 else list(reversed(arms))
            for arm in order:
                arm_env, warm = arms[arm]
                rows[arm].append(timed_run(args.scenario, work / f"{arm}{repeat}", env=arm_env,
                                           address=cluster.address if warm else None))
            print(f"repeat {repeat + 1}: " + ", ".join(f"{arm} {rows[arm][-1]['wall']:.1f} s (start-up "
                                                      f"{rows[arm][-1]['startup']:.2f} s)" for arm in arms), flush=True)
        subprocess.run([sys.executable, "-m", "simulator.cli", "pool", "stop", "--address", cluster.address],
                       env=env, cwd=REPO, check=True, capture_output=True)
    finally:
        cluster.shutdown()
    reference = rows["cold"][0]["out"]
    identical = all(same_results(reference, row["out"]) for arm in ("cold", "warm") for row in rows[arm])
    shutil.rmtree(work)
    load_after = os.getloadavg()
    median = {arm: {key: statistics.median(row[key] for row in rows[arm]) for key in ("wall", "startup")} for arm in arms}
    print(f"{args.scenario.name}: medians of {args.repeats} interleaved repetitions; load average (1/5/15 min) "
          f"{'/'.join(f'{x:.1f}' for x in load_before)} at the start, {'/'.join(f'{x:.1f}' for x in load_after)} at the end")
    for arm in arms:
        print(f"  {arm:20s} wall {median[arm]['wall']:5.2f} s ({median[arm]['wall'] / median['cold']['wall']:.3f} of cold), "
              f"start-up {median[arm]['startup']:5.2f} s ({median[arm]['startup'] / median['cold']['startup']:.3f} of cold)")
    print(f"warm goals: wall {median['warm']['wall']:.2f} s <= {WARM_WALL_GOAL_S:g} s: "
          f"{'met' if median['warm']['wall'] <= WARM_WALL_GOAL_S else 'missed'}; start-up {median['warm']['startup']:.2f} s "
          f"<= {WARM_STARTUP_GOAL_S:g} s: {'met' if median['warm']['startup'] <= WARM_STARTUP_GOAL_S else 'missed'}")
    print(f"metrics.csv (without wall times) and model.pt of every cold and warm run equal the first cold run's: {identical}")


if __name__ == "__main__":
    main()
