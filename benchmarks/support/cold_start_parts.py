"""Where a cold local run's Ray start-up goes, piece by piece, and what Ray's settings for a local simulation save.

Each repetition runs every variant once, in a fresh interpreter each, order alternating between repetitions. An
interpreter times, one after the other:

- ``import ray``, then ``import torch`` (the driver's imports);
- ``ray.init`` of a local instance: GCS, raylet, and the processes around them (dashboard head, log monitor,
  the raylet's dashboard agent and runtime-env agent);
- the first actor (no torch) answering its first call: a worker process started and registered;
- ``ACTORS`` actors started at once, each importing torch in its process and answering: worker starts in parallel,
  with torch's import, the cost a run's server and silo workers pay; the actor's own ``import torch`` seconds
  are reported too (median over the actors);
- ``ray.shutdown``.

Variants (``ray.init`` keywords and environment):

- ``current``: what ``privsilo.simulator.runtime.cluster.ray_session`` does (``include_dashboard=False``, ``logging_level=ERROR``;
  usage stats off through ``simulator``'s environment);
- ``no_log_to_driver``: ``current`` with ``log_to_driver=False`` (no log streaming from workers to the driver);
- ``no_metrics``: ``current`` with the Ray setting ``enable_metrics_collection`` off (``RAY_enable_metrics_collection=0``).

Prints each piece's median per variant and each variant's total against ``current`` (a ratio within this run).

    python -m benchmarks.support.cold_start_parts [--repeats 5] [--actors 4]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VARIANTS = {
    "current": ({}, {}),
    "no_log_to_driver": ({"log_to_driver": False}, {}),
    "no_metrics": ({}, {"RAY_enable_metrics_collection": "0"}),
}
PIECES = ("import ray", "import torch", "ray.init", "first actor + ray.get", "actors with torch, in parallel",
          "torch import in an actor", "ray.shutdown", "total")


def measure(init_options: dict, actors: int) -> dict[str, float]:
    """One fresh interpreter's timings (this function runs in it)."""
    import time

    started = time.perf_counter()
    marks = {}
    import privsilo.simulator  # noqa: F401  (the Ray environment: no usage stats, no auth prompt)
    import ray
    marks["import ray"] = time.perf_counter()
    import torch  # noqa: F401
    marks["import torch"] = time.perf_counter()
    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, actors), include_dashboard=False,
             logging_level="ERROR", **init_options)
    marks["ray.init"] = time.perf_counter()

    @ray.remote(num_cpus=0)
    class Empty:
        def ping(self) -> int:
            return os.getpid()

    ray.get(Empty.remote().ping.remote())
    marks["first actor + ray.get"] = time.perf_counter()

    @ray.remote(num_cpus=0)
    class WithTorch:
        def __init__(self) -> None:
            begun = time.perf_counter()
            import torch  # noqa: F401
            self.seconds = time.perf_counter() - begun

        def torch_seconds(self) -> float:
            return self.seconds

    handles = [WithTorch.remote() for _ in range(actors)]
    torch_seconds = ray.get([handle.torch_seconds.remote() for handle in handles])
    marks["actors with torch, in parallel"] = time.perf_counter()
    ray.shutdown()
    marks["ray.shutdown"] = time.perf_counter()
    seconds, previous = {}, started
    for piece, mark in marks.items():
        seconds[piece], previous = mark - previous, mark
    seconds["torch import in an actor"] = statistics.median(torch_seconds)
    seconds["total"] = previous - started
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--actors", type=int, default=4, help="a quickstart run starts 4: a server and 3 silo workers")
    parser.add_argument("--measure", nargs=2, metavar=("VARIANT", "ACTORS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(VARIANTS[args.measure[0]][0], int(args.measure[1]))))
        return
    load_before = os.getloadavg()
    rows: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    failures = {variant: 0 for variant in VARIANTS}
    for repeat in range(args.repeats):
        for variant in (list(VARIANTS) if repeat % 2 == 0 else list(reversed(VARIANTS))):
            env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled", **VARIANTS[variant][1]}
            done = subprocess.run([sys.executable, __file__, "--measure", variant, str(args.actors)], env=env,
                                  capture_output=True, text=True, cwd=REPO)
            if done.returncode != 0:  # on a saturated machine Ray's raylet may miss its fixed 30 s to register
                failures[variant] += 1
                print(f"repeat {repeat + 1}: variant {variant} failed: {done.stderr.strip().splitlines()[-1]}", flush=True)
                continue
            rows[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"repeat {repeat + 1}: {variant} {rows[variant][-1]['total']:.1f} s", flush=True)
    if not all(rows.values()):
        sys.exit("cold_start_parts: a variant never completed; see the failures above")
    print(f"medians of {args.repeats} interleaved repetitions (failed inside Ray: {failures}), {args.actors} actors; load average "
          f"{'/'.join(f'{x:.1f}' for x in load_before)} at the start, {'/'.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    print(f"  {'piece':32s}" + "".join(f"{v:>18s}" for v in VARIANTS))
    median = {v: {p: statistics.median(row[p] for row in rows[v]) for p in PIECES} for v in VARIANTS}
    for piece in PIECES:
        print(f"  {piece:32s}" + "".join(f"{median[v][piece]:16.2f} s" for v in VARIANTS))
    print("  total / current:                " + "".join(f"{median[v]['total'] / median['current']['total']:18.3f}" for v in VARIANTS))


if __name__ == "__main__":
    main()
