"""Start-up of the quickstart's whole command: cold (``privsilo run`` starting its own Ray) against warm (the same
command after ``privsilo pool start``, whose local pool holds the actors of an earlier run and a ready driver).

Starts the local pool (``privsilo pool start``, in a state directory of this script's own, so no other pool is
seen; stopped at the end with ``privsilo pool stop``), runs the command once to fill the pool, then repeats,
alternating the order each repetition:

- ``cold``: ``privsilo run SCENARIO`` without a local pool (a fresh local Ray);
- ``warm``: ``privsilo run SCENARIO`` with the local pool running (no ``--address``), once its ready driver
  listens (``privsilo.simulator.cli.ready_driver``: the command runs there, in a process that imported torch and Ray ahead);
- ``warm-own-process``: the same with ``PRIVSILO_READY_DRIVER=0``: the command runs in its own interpreter, on the
  pool's warm actors (what the ready driver saves is the difference);
- ``baseline:DIR`` (with ``--baseline DIR``, repeatable): the cold command from another checkout
  (``PYTHONPATH=DIR``), e.g. the commit before a start-up change.

Each command's wall time is that of its whole process; start-up is ``summary.json`` ``timing`` data + workers +
protocol set-up. Prints the medians, the ratios to ``cold``, the goals (warm wall <= 3 s, warm start-up <= 1 s)
and whether every run's ``metrics.csv`` (without wall times) and ``model.pt`` equal the first cold run's.

    python -m benchmarks.runtime.bench_startup [--repeats 3] [--settle 8] [--scenario scenarios/quickstart.yaml] [--baseline DIR ...]
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

REPO = Path(__file__).resolve().parents[2]
WARM_WALL_GOAL_S, WARM_STARTUP_GOAL_S = 3.0, 1.0


def privsilo(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``privsilo ARGS`` of this checkout; exits the script if it fails."""
    done = subprocess.run([sys.executable, "-m", "privsilo.simulator.cli", *args], env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_startup: privsilo {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done


def timed_run(scenario: Path, out: Path, *, env: dict[str, str]) -> dict:
    """Wall seconds of one whole ``privsilo run`` of the checkout on ``env``'s PYTHONPATH (run from there:
    ``python -m`` puts the working directory first on ``sys.path``) and its start-up seconds from summary.json."""
    command = [sys.executable, "-m", "privsilo.simulator.cli", "run", str(scenario.resolve()), "--out", str(out), "--no-progress"]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=env["PYTHONPATH"], capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"bench_startup: {' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    timing = json.loads((out / "summary.json").read_text())["timing"]
    startup = timing["data_seconds"] + timing["workers_seconds"] + timing["protocol_setup_seconds"]
    return {"wall": wall, "startup": startup, "out": out}


def wait_for_ready_driver(state_dir: Path, timeout: float = 300.0) -> int:
    """The pid of the pool's ready driver once it listens (it loads torch and Ray after the previous one exits)."""
    deadline = time.monotonic() + timeout
    while not (state_dir / "ready-driver.sock").exists():
        if time.monotonic() > deadline:
            sys.exit(f"bench_startup: no ready driver listened within {timeout:g} s (see {state_dir / 'local-pool.log'})")
        time.sleep(0.1)
    return json.loads((state_dir / "local-pool.json").read_text())["driver"][0]


def driver_served(state_dir: Path, pid: int) -> bool:
    """Whether the driver ``pid`` ran the command: a driver exits after its one command, and the pool records the next."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if json.loads((state_dir / "local-pool.json").read_text())["driver"][0] != pid:
            return True
        time.sleep(0.1)
    return False


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
    parser.add_argument("--pool-cpus", type=int, default=os.cpu_count() or 1,
                        help="the local pool's logical CPUs (default: this machine's cores, as a cold run packs the silos)")
    parser.add_argument("--settle", type=float, default=8.0,
                        help="seconds to wait before each command, once the ready driver listens (default 8)")
    parser.add_argument("--baseline", type=Path, action="append", default=[], help="another checkout whose cold command is timed too (repeatable)")
    args = parser.parse_args()
    # Ray on the loopback address (drivers and the head alike), no auth prompt, no usage stats.
    quiet = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    os.environ.update(quiet)
    work = Path(tempfile.mkdtemp(prefix="bench_startup_"))
    # Cold commands look for a pool where there is none; warm ones find the pool this script starts.
    cold_env = {**os.environ, "PYTHONPATH": str(REPO), "PRIVSILO_STATE_DIR": str(work / "no-pool")}
    warm_env = {**cold_env, "PRIVSILO_STATE_DIR": str(work / "pool")}
    arms: dict[str, dict[str, str]] = {"cold": cold_env, "warm": warm_env,
                                       "warm-own-process": {**warm_env, "PRIVSILO_READY_DRIVER": "0"}}
    for checkout in args.baseline:
        arms[f"baseline:{checkout.name}"] = {**cold_env, "PYTHONPATH": str(checkout.resolve())}
    load_before = os.getloadavg()
    started = time.perf_counter()
    privsilo("pool", "start", "--num-cpus", str(args.pool_cpus), "--idle-timeout", "3600", env=warm_env)
    print(f"privsilo pool start: {time.perf_counter() - started:.1f} s", flush=True)
    try:
        first = timed_run(args.scenario, work / "first", env=warm_env)
        print(f"first run on the local pool (fills it): {first['wall']:.1f} s, start-up {first['startup']:.2f} s", flush=True)
        rows: dict[str, list[dict]] = {arm: [] for arm in arms}
        served: list[bool] = []
        for repeat in range(args.repeats):
            order = list(arms) if repeat % 2 == 0 else list(reversed(arms))
            for arm in order:
                driver = wait_for_ready_driver(work / "pool")  # no arm shares the CPUs with a driver still loading,
                time.sleep(args.settle)  # nor with the previous command's Ray processes still ending
                rows[arm].append(timed_run(args.scenario, work / f"{arm}{repeat}", env=arms[arm]))
                if arm == "warm":
                    served.append(driver_served(work / "pool", driver))
            print(f"repeat {repeat + 1}: " + ", ".join(f"{arm} {rows[arm][-1]['wall']:.1f} s (start-up "
                                                      f"{rows[arm][-1]['startup']:.2f} s)" for arm in arms), flush=True)
    finally:
        privsilo("pool", "stop", env=warm_env)
    reference = rows["cold"][0]["out"]
    identical = all(same_results(reference, row["out"]) for arm in arms if not arm.startswith("baseline") for row in rows[arm])
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
    print(f"every warm command was run by the ready driver: {all(served)} ({sum(served)} of {len(served)})")
    print(f"metrics.csv (without wall times) and model.pt of every cold and warm run equal the first cold run's: {identical}")


if __name__ == "__main__":
    main()
