"""Checkpointing's cost: ``scenarios/mnist_dpsgd.yaml`` with ``checkpoint.every: 1`` (into the run's output
directory) against ``checkpoint.every: 0``, same seed, runs alternating (goal: overhead under 5 % of round time).

Each repeat runs the scenario twice through ``privsilo.simulator.engine.run(..., out_dir=...)``, once each way, in one local
Ray session of this machine's cores (warm actors are reused between runs; the packing is the scenario's own: ten
workers of a fifth of a core). ``--set`` overrides apply to both (default: 3 rounds, fewer local steps than the
scenario's 50 so that a repeat takes minutes on a shared machine: a shorter round makes the same checkpoint a
larger fraction of it, so the ratio is an upper bound for the full scenario). Reported as medians over repeats:
seconds per round of the round loop (``total_seconds`` minus data and worker start-up, over the rounds: rounds,
checkpoints and the end of the run), its ratio with / without checkpoints (median of the per-repeat ratios) and
where the difference goes: the rounds themselves (``training_seconds``: with checkpoints every silo pickles its
snapshot and sends it to the vault actor before its update leaves), the protocol set-up (the initial snapshots),
``Federation.checkpoint_state`` (the server's snapshot and the vault's blobs fetched by the driver) and
``write_checkpoint`` (pickling the whole checkpoint, SHA-256, write and fsync), both timed by wrapping them in this
process; and the size of ``checkpoint.pkl`` and of one silo's snapshot.

    python -m benchmarks.runtime.bench_checkpoint [--repeats 3] [--set federation.rounds=3 federation.local_steps=10]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import privsilo.simulator.engine.checkpoints as checkpoints
from benchmarks.support.round_parts import loadavg, local_ray, median
from privsilo.simulator.engine import Federation, run
from privsilo.simulator.run_dir.checkpoint import checkpoint_path

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "mnist_dpsgd.yaml"


class Probe:
    """Times ``Federation.checkpoint_state`` and ``write_checkpoint`` (as the round loop's checkpoint step,
    ``privsilo.simulator.engine.checkpoints.save_checkpoint``, calls them) in this process, and notes the file's size."""

    def __init__(self) -> None:
        self.state = self.write = 0.0
        self.file_bytes = self.silo_bytes = 0
        original_state, original_write = Federation.checkpoint_state, checkpoints.write_checkpoint

        def checkpoint_state(federation):  # noqa: ANN001, ANN202
            started = time.perf_counter()
            state = original_state(federation)
            self.state += time.perf_counter() - started
            self.silo_bytes = max(len(blob) for blob in state["silos"].values())
            return state

        def write_checkpoint(directory, state, **header):  # noqa: ANN001, ANN202
            started = time.perf_counter()
            original_write(directory, state, **header)
            self.write += time.perf_counter() - started
            self.file_bytes = os.path.getsize(checkpoint_path(directory))

        Federation.checkpoint_state = checkpoint_state
        checkpoints.write_checkpoint = write_checkpoint

    def reset(self) -> None:
        self.state = self.write = 0.0


def measure(every: int, overrides: list[str], probe: Probe) -> dict:
    probe.reset()
    with tempfile.TemporaryDirectory(prefix="bench_checkpoint_") as tmp:
        result = run(SCENARIO, out_dir=Path(tmp) / "run", overrides=[*overrides, f"checkpoint.every={every}"])
    t, rounds = result.timing, len(result.rounds)
    loop = t["total_seconds"] - t["data_seconds"] - t["workers_seconds"] - t["protocol_setup_seconds"]
    return {"loop": loop / rounds, "training": t["training_seconds"] / rounds, "setup": t["protocol_setup_seconds"],
            "state": probe.state / rounds, "write": probe.write / rounds, "accuracy": result.rounds[-1].report.accuracy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", nargs="*", default=["federation.rounds=3", "federation.local_steps=10"])
    args = parser.parse_args()
    probe = Probe()
    print(f"load average at the start {loadavg()}", flush=True)
    runs: dict[int, list[dict]] = {1: [], 0: []}
    with local_ray(2):
        for repeat in range(args.repeats):
            for every in (0, 1):
                runs[every].append(measure(every, args.set, probe))
                m = runs[every][-1]
                print(f"repeat {repeat + 1}, every {every}: {m['loop']:.2f} s/round (training {m['training']:.2f}), "
                      f"checkpoint_state {m['state']:.3f} s, write {m['write']:.3f} s, accuracy {m['accuracy']:.4f}, "
                      f"load {loadavg()}", flush=True)
    on, off = runs[1], runs[0]
    ratio = median([a["loop"] / b["loop"] for a, b in zip(on, off)])
    training = median([a["training"] / b["training"] for a, b in zip(on, off)])
    print(f"\n{SCENARIO.name} with {' '.join(args.set)}; median of {args.repeats} alternating repeats; "
          f"load average at the end {loadavg()}")
    print("| checkpoint.every | s/round (loop) | of which training s | protocol set-up s | checkpoint_state s/round "
          "| write_checkpoint s/round |")
    print("|---:|---:|---:|---:|---:|---:|")
    for every, ms in ((0, off), (1, on)):
        print(f"| {every} | {median([m['loop'] for m in ms]):.2f} | {median([m['training'] for m in ms]):.2f} | "
              f"{median([m['setup'] for m in ms]):.3f} | {median([m['state'] for m in ms]):.3f} | "
              f"{median([m['write'] for m in ms]):.3f} |")
    print(f"\nround-loop ratio every=1 / every=0: {ratio:.3f} (overhead {100 * (ratio - 1):.1f} %, goal < 5 %); "
          f"training-seconds ratio {training:.3f}")
    print(f"checkpoint.pkl {probe.file_bytes / 2**20:.2f} MiB; largest silo snapshot {probe.silo_bytes / 2**10:.1f} KiB")


if __name__ == "__main__":
    main()
