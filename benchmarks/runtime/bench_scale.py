"""Scale: 10, 100 and 1,000 silos on this machine, one round each (digits, MLP, FedAvg or DP-SGD).

For each silo count: start-up seconds (data, workers, protocol set-up; the protocol's set-up, secure aggregation's
key agreement, also on its own), seconds for the round (and the slowest silo's protection of its upload: with
secure aggregation, expanding and adding one mask stream per other participant), the peak resident
memory of all privsilo processes together (this driver and every process of the Ray session it starts,
sampled from /proc every 0.2 s) and, against the smallest count, the memory per extra silo. Each count runs in
a fresh Ray session, so start-up includes starting Ray and the actor processes. Ratios, not absolute times,
are what to compare between machines: start-up for 100 silos over start-up for 10 (goal <= 3).

With ``--secure-aggregation``, ``--neighbours`` sets the graph (``all``: complete, ``auto``: SecAgg+, or a number
K); ``bench_secagg_scale.py`` compares the graphs against plain summation in one session.

    python -m benchmarks.runtime.bench_scale [--silos 10 100 1000] [--mechanism none|dp_sgd] [--secure-aggregation]
        [--neighbours all|auto|K]
"""
from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

import privsilo.simulator  # noqa: F401  (Ray environment)
from privsilo.simulator.engine import run

PAGE = os.sysconf("SC_PAGE_SIZE")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(parent, []).append(int(entry.name))
    return tree


def session_rss_bytes() -> int:
    """Resident memory of this process and all its descendants (Ray's raylet and workers included)."""
    tree, total, stack = _children(), 0, [os.getpid()]
    while stack:
        pid = stack.pop()
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
        stack.extend(tree.get(pid, ()))
    return total


class PeakMemory:
    """Samples :func:`session_rss_bytes` in a thread; ``peak`` is the largest sample."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, session_rss_bytes())
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakMemory":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def scenario(silos: int, *, mechanism: str, secure_aggregation: bool, neighbours: str = "all") -> dict:
    mech = {"name": "none"} if mechanism == "none" else {"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0}
    return {
        "name": f"scale_{silos}",
        "data": {"dataset": "digits", "partition": "iid", "silos": silos},
        "model": {"name": "mlp"},
        "federation": {"rounds": 1, "local_steps": 20, "batch_size": 32, "lr": 0.1},
        "mechanism": mech,
        "protocol": {"secure_aggregation": secure_aggregation,
                     **({"neighbours": neighbours if neighbours in ("all", "auto") else int(neighbours)} if secure_aggregation else {})},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--silos", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--mechanism", choices=["none", "dp_sgd"], default="none")
    parser.add_argument("--secure-aggregation", action="store_true")
    parser.add_argument("--neighbours", default="all", help="secure aggregation's graph: all, auto or a number K")
    args = parser.parse_args()
    rows = []
    for silos in args.silos:
        with PeakMemory() as memory:
            result = run(scenario(silos, mechanism=args.mechanism, secure_aggregation=args.secure_aggregation,
                                   neighbours=args.neighbours))
        timing = result.timing
        startup = timing["data_seconds"] + timing["workers_seconds"] + timing["protocol_setup_seconds"]
        rows.append((silos, len(result.packing), startup, timing["protocol_setup_seconds"], timing["rounds_seconds"],
                     timing["protocol_round_silo_seconds"], memory.peak))
        print(f"{silos} silos done", flush=True)
    base_silos, _, base_startup, _, _, _, base_memory = rows[0]
    graph = f"on, neighbours {args.neighbours}" if args.secure_aggregation else "off"
    print(f"\n{args.mechanism}, secure aggregation {graph}, digits MLP, 1 round, "
          f"{os.cpu_count()} CPUs")
    print("| silos | workers | start-up s | of which protocol set-up s | round s | of which one silo's masking s "
          "| peak memory GiB | MiB per extra silo | start-up / first |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for silos, workers, startup, setup, round_seconds, masking, peak in rows:
        extra = "" if silos == base_silos else f"{(peak - base_memory) / (silos - base_silos) / 2**20:.2f}"
        print(f"| {silos} | {workers} | {startup:.1f} | {setup:.1f} | {round_seconds:.2f} | {masking:.3f} | "
              f"{peak / 2**30:.2f} | {extra} | {startup / base_startup:.2f} |")


if __name__ == "__main__":
    main()
