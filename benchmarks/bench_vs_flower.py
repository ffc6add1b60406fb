"""privsilo against Flower's simulation engine on one FedAvg workload, end to end, in the same run.

The workload (issue 13): 10 IID silos of scikit-learn digits, an MLP 64-128-10 (privsilo's ``mlp_128``), 20 local
SGD steps of batch 32 at lr 0.1, 10 rounds, FedAvg, 2 CPUs. Each repetition runs privsilo (``simulator.engine.run``
in a fresh interpreter of this environment) and Flower (``flwr.simulation.run_simulation`` in a fresh interpreter
of the Flower environment, ``benchmarks/flower_fedavg.py``), one after the other; the wall time of each is that of
its whole process, from start to exit: interpreter, imports, data, starting Ray and the actors, the rounds and
shutting down. Prints each repetition, the medians, the ratio privsilo / Flower (goal <= 0.5) and both final test
accuracies (goal: privsilo's at least Flower's).

Both sides train the same network from the same initial weights on the same split (exported to an ``.npz`` from
privsilo's own data loading and IID partition), with plain SGD on the same batches (each silo's generator seeded
as privsilo seeds it and kept across rounds), and evaluate the global model on the same test split; the script
prints in how many rounds the two test accuracies differ (float rounding only: expected 0). Both use 2 logical
CPUs for their workers: Flower one worker actor per CPU (``client_resources.num_cpus = 1``, its ServerApp in the
driver), privsilo two silo worker actors of one CPU hosting five silos each (its server actor holds no CPU share,
like Flower's server).
Flower is not a dependency of privsilo: ``bash benchmarks/flower_env.sh`` makes its environment first.

    python benchmarks/bench_vs_flower.py [--repeats 3] [--rounds 10] [--local-steps 20]
        [--flower-python /tmp/privsilo-flower-venv/bin/python]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from workload import CPUS, SILOS, fedavg_scenario

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_FLOWER_PYTHON = os.environ.get("FLOWER_VENV", "/tmp/privsilo-flower-venv") + "/bin/python"
MODEL_LAYERS = (64, 128, 10)  # privsilo's mlp_128 on digits


def export_workload(raw: dict, path: Path) -> None:
    """The data split, initial weights and settings privsilo runs with, for the Flower side."""
    from simulator.data import load_dataset
    from simulator.data.silos import partition_silos, run_seeds
    from simulator.engine import _initial_state
    from simulator.scenario import validate_scenario

    config = validate_scenario(raw)
    dataset = load_dataset(config.data.dataset, seed=config.seed)
    seeds = run_seeds(config.seed, config.data.silos)
    parts = partition_silos(config, dataset, np.random.default_rng(seeds["partition"]))
    offsets = np.cumsum([0] + [len(indices) for indices in parts])
    (initial,) = _initial_state(config, dataset, seeds["init"])
    fed = config.federation
    np.savez(
        path, x_train=dataset.x_train, y_train=dataset.y_train, order=np.concatenate(parts), offsets=offsets,
        x_test=dataset.x_test, y_test=dataset.y_test, initial=initial, seeds=np.array(seeds["silos"], dtype=np.int64),
        layers=np.array(MODEL_LAYERS), silos=config.data.silos, rounds=fed.rounds, local_steps=fed.local_steps,
        batch_size=fed.batch_size, lr=fed.lr,
    )


def privsilo_side(scenario_json: str, result_path: str) -> None:
    """The privsilo half, in its own interpreter: one run through the Python API."""
    import simulator  # noqa: F401  (Ray environment)
    from simulator.engine import run

    result = run(json.loads(scenario_json))
    accuracies = [record.report.accuracy for record in result.rounds]
    summary = {"accuracy": accuracies[-1], "accuracies": accuracies, "timing": dict(result.timing)}
    Path(result_path).write_text(json.dumps(summary))


def fmt_load(load: tuple[float, float, float]) -> str:
    return "/".join(f"{value:.0f}" for value in load)


def timed(command: list[str], *, env: dict[str, str], result: Path, log: Path) -> dict:
    """The JSON ``command`` wrote to ``result``, with its wall seconds from start to exit (``wall_seconds``)."""
    started = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"bench_vs_flower: {' '.join(command[:2])} exited {done.returncode}; its output is in {log}")
    return {**json.loads(result.read_text()), "wall_seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--local-steps", type=int, default=20)
    parser.add_argument("--flower-python", default=DEFAULT_FLOWER_PYTHON)
    parser.add_argument("--privsilo-side", nargs=2, metavar=("SCENARIO_JSON", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.privsilo_side:
        privsilo_side(*args.privsilo_side)
        return
    if not Path(args.flower_python).exists():
        sys.exit(f"bench_vs_flower: no Flower environment at {args.flower_python}; run `bash benchmarks/flower_env.sh`")
    raw = fedavg_scenario(name="bench_vs_flower", rounds=args.rounds, local_steps=args.local_steps)
    quiet = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "FLWR_TELEMETRY_ENABLED": "0"}
    privsilo_env = {**os.environ, **quiet, "PYTHONPATH": str(REPO)}
    # The Flower side must not see privsilo: no PYTHONPATH, its own interpreter.
    flower_env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **quiet}
    rows = []
    work = Path(tempfile.mkdtemp(prefix="bench_vs_flower_"))  # kept, with both sides' logs, if a side fails
    sys.path.insert(0, str(REPO))
    export_workload(raw, work / "workload.npz")
    privsilo_cmd = [sys.executable, __file__, "--privsilo-side", json.dumps(raw), str(work / "privsilo.json")]
    flower_cmd = [args.flower_python, str(HERE / "flower_fedavg.py"), "--workload", str(work / "workload.npz"),
                  "--result", str(work / "flower.json"), "--cpus", str(CPUS)]
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        row = {}
        # Alternate which side goes first, so that a drift in the machine's load does not favour one.
        for side in ("privsilo", "flower") if repeat % 2 == 0 else ("flower", "privsilo"):
            command, env = (privsilo_cmd, privsilo_env) if side == "privsilo" else (flower_cmd, flower_env)
            row[side] = timed(command, env=env, result=work / f"{side}.json", log=work / f"{side}.log")
        if row["flower"].get("complete_rounds") != args.rounds:
            sys.exit(f"bench_vs_flower: Flower completed {row['flower'].get('complete_rounds')} of {args.rounds} "
                     f"rounds with every silo's reply; see {work / 'flower.log'}")
        rows.append(row)
        privsilo, flower, timing = row["privsilo"], row["flower"], row["privsilo"]["timing"]
        print(f"repeat {repeat + 1}: privsilo {privsilo['wall_seconds']:6.1f} s (inside run(): start-up "
              f"{timing['data_seconds'] + timing['workers_seconds']:.1f} s, rounds {timing['rounds_seconds']:.1f} s), "
              f"accuracy {privsilo['accuracy']:.4f} | Flower {flower['wall_seconds']:6.1f} s (ServerApp rounds "
              f"{flower['rounds_seconds']:.1f} s), accuracy {flower['accuracy']:.4f}", flush=True)
    shutil.rmtree(work)
    # The same computation: the same batches from the same weights; only float rounding (privsilo aggregates in
    # float64, Flower in float32) may move a test prediction.
    differing = max(sum(a != b for a, b in zip(row["privsilo"]["accuracies"], row["flower"]["accuracies"]))
                    for row in rows)

    def median(side: str, key: str) -> float:
        return statistics.median(row[side][key] for row in rows)

    print(f"workload: {SILOS} IID silos of digits, MLP 64-128-10, {args.local_steps} local SGD steps of batch 32 at "
          f"lr 0.1, {args.rounds} rounds, FedAvg, {CPUS} CPUs; medians of {args.repeats} repetitions, end to end; "
          f"machine load average (1, 5, 15 min) {fmt_load(load_before)} at the start, "
          f"{fmt_load(os.getloadavg())} at the end")
    for side, label in (("privsilo", "privsilo:"), ("flower", "Flower:  ")):
        print(f"{label} {median(side, 'wall_seconds'):.1f} s, test accuracy {median(side, 'accuracy'):.4f}")
    print(f"ratio privsilo / Flower: {median('privsilo', 'wall_seconds') / median('flower', 'wall_seconds'):.3f}  "
          f"(goal <= 0.5, at equal or better accuracy)")
    print(f"rounds whose test accuracy differs between the two (same batches, same initial weights): "
          f"{differing} of {args.rounds}")


if __name__ == "__main__":
    main()
