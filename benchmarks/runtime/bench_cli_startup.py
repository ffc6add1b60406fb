"""Wall time of short ``privsilo`` commands, against the interpreter's own start-up in the same run.

Each command runs REPEATS times as a fresh process, interleaved with the baselines (so that a busy machine slows
all of them alike); medians are printed with their ratio to ``python -c pass``. The heaviest baseline imports
what every command paid before they imported torch, Ray and matplotlib only where needed.

    python -m benchmarks.runtime.bench_cli_startup [--repeats 5]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "import torch, ray, matplotlib.pyplot": ["-c", "import torch, ray, matplotlib.pyplot"],
    "privsilo --version": ["-m", "privsilo.simulator.cli", "--version"],
    "privsilo list": ["-m", "privsilo.simulator.cli", "list"],
    "privsilo validate quickstart": ["-m", "privsilo.simulator.cli", "validate", "scenarios/quickstart.yaml"],
}


def _seconds(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(repeats):
        for name, args in COMMANDS.items():
            times[name].append(_seconds(args))
    bare = statistics.median(times["python -c pass"])
    for name, runs in times.items():
        median = statistics.median(runs)
        print(f"{name:40s} median {median:6.2f} s over {repeats} runs ({median / bare:5.1f}x python -c pass)")


if __name__ == "__main__":
    main()
