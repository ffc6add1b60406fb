"""privsilo against Flower's simulation engine and Apple's pfl-research on one FedAvg workload, end to end, in the
same run.

The workload (issue 13): IID silos of scikit-learn digits (10, or each count of ``--silos``), an MLP 64-128-10
(privsilo's ``mlp_128``), 20 local SGD steps of batch 32 at lr 0.1, 10 rounds, FedAvg, every silo in every round,
2 CPUs. Each repetition runs every side once, in an order that rotates between repetitions: privsilo
(``privsilo.simulator.engine.run`` in a fresh interpreter of this environment), Flower (``flwr.simulation.run_simulation``,
``benchmarks/comparisons/flower_fedavg.py``, in the Flower environment) and pfl (pfl's ``SimulatedBackend``,
``benchmarks/comparisons/pfl_fedavg.py``, in the pfl environment). The wall time of each is that of its whole process, from
start to exit: interpreter, imports, data, starting Ray and the actors (privsilo, Flower), the rounds and shutting
down. Prints each repetition, the medians, the ratios privsilo / anchor (goals: <= 0.5 against Flower, <= 1.0
against pfl at 100 silos and <= 1.5 at 10) and the final test accuracies.

Every side trains the same network from the same initial weights on the same split (exported to an ``.npz`` from
privsilo's own data loading and IID partition), with plain SGD on the same batches (each silo's generator seeded
as privsilo seeds it and kept across rounds), weighted by the silos' record counts, and evaluates the global model
on the same test split; the script prints in how many rounds an anchor's test accuracy differs from privsilo's,
and each side's from a plain PyTorch loop over the same batches (``reference_fedavg.py``) (float rounding only:
expected 0). privsilo uses two silo worker actors of one CPU, hosting half the silos each (its
server actor holds no CPU share), Flower one worker actor per CPU (``client_resources.num_cpus = 1``, its ServerApp
in the driver), pfl its one process.
Neither Flower nor pfl is a dependency of privsilo: ``bash benchmarks/comparisons/flower_env.sh`` and ``bash
benchmarks/comparisons/pfl_env.sh`` make their environments first.

    python -m benchmarks.comparisons.bench_vs_flower [--repeats 3] [--rounds 10] [--local-steps 20] [--silos 10 100]
        [--sides privsilo flower pfl] [--flower-python PY] [--pfl-python PY]
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

from benchmarks.comparisons.reference_fedavg import fedavg_accuracies
from benchmarks.support.workload import CPUS, SILOS, fedavg_scenario

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_FLOWER_PYTHON = os.environ.get("FLOWER_VENV", "/tmp/privsilo-flower-venv") + "/bin/python"
DEFAULT_PFL_PYTHON = os.environ.get("PFL_VENV", "/tmp/privsilo-pfl-venv") + "/bin/python"
ENVIRONMENTS = {"flower": "benchmarks/comparisons/flower_env.sh", "pfl": "benchmarks/comparisons/pfl_env.sh"}
GOALS = {"flower": lambda silos: 0.5, "pfl": lambda silos: 1.0 if silos >= 100 else 1.5}
NAMES = {"privsilo": "privsilo", "flower": "Flower", "pfl": "pfl"}
MODEL_LAYERS = (64, 128, 10)  # privsilo's mlp_128 on digits


def export_workload(raw: dict, path: Path) -> None:
    """The data split, initial weights and settings privsilo runs with, for the Flower side."""
    from privsilo.simulator.data import load_dataset
    from privsilo.simulator.data.silos import partition_silos, run_seeds
    from privsilo.simulator.engine import initial_state
    from privsilo.simulator.scenario import validate_scenario

    config = validate_scenario(raw)
    dataset = load_dataset(config.data.dataset, seed=config.seed)
    seeds = run_seeds(config.seed, config.data.silos)
    parts = partition_silos(config, dataset, np.random.default_rng(seeds["partition"]))
    offsets = np.cumsum([0] + [len(indices) for indices in parts])
    (initial,) = initial_state(config, dataset, seeds["init"])
    fed = config.federation
    np.savez(
        path, x_train=dataset.x_train, y_train=dataset.y_train, order=np.concatenate(parts), offsets=offsets,
        x_test=dataset.x_test, y_test=dataset.y_test, initial=initial, seeds=np.array(seeds["silos"], dtype=np.int64),
        layers=np.array(MODEL_LAYERS), silos=config.data.silos, rounds=fed.rounds, local_steps=fed.local_steps,
        batch_size=fed.batch_size, lr=fed.lr,
    )


def privsilo_side(scenario_json: str, result_path: str) -> None:
    """The privsilo half, in its own interpreter: one run through the Python API."""
    import privsilo.simulator  # noqa: F401  (Ray environment)
    from privsilo.simulator.engine import run

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


def side_commands(args: argparse.Namespace, raw: dict, work: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each side's command (writing its JSON to ``work/SIDE.json``) and environment."""
    quiet = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "FLWR_TELEMETRY_ENABLED": "0"}
    # The anchors must not see privsilo: no PYTHONPATH, their own interpreters.
    anchor_env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **quiet}
    workload = str(work / "workload.npz")
    commands = {
        "privsilo": ([sys.executable, __file__, "--privsilo-side", json.dumps(raw), str(work / "privsilo.json")],
                     {**os.environ, **quiet, "PYTHONPATH": str(REPO)}),
        "flower": ([args.flower_python, str(HERE / "flower_fedavg.py"), "--workload", workload,
                    "--result", str(work / "flower.json"), "--cpus", str(CPUS)], anchor_env),
        "pfl": ([args.pfl_python, str(HERE / "pfl_fedavg.py"), "--workload", workload, "--result", str(work / "pfl.json")],
                anchor_env),
    }
    return {side: commands[side] for side in args.sides}


def compare(args: argparse.Namespace, silos: int) -> None:
    """``args.repeats`` interleaved repetitions of every side at ``silos`` silos; print them and the medians."""
    raw = fedavg_scenario(name="bench_vs_flower", rounds=args.rounds, local_steps=args.local_steps, silos=silos)
    work = Path(tempfile.mkdtemp(prefix="bench_vs_flower_"))  # kept, with every side's log, if a side fails
    export_workload(raw, work / "workload.npz")
    with np.load(work / "workload.npz") as data:
        reference = fedavg_accuracies({key: data[key] for key in data.files})  # the plain PyTorch loop
    commands = side_commands(args, raw, work)
    rows = []
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        row = {}
        # Rotate which side goes first, so that a drift in the machine's load does not favour one.
        order = args.sides[repeat % len(args.sides):] + args.sides[:repeat % len(args.sides)]
        for side in order:
            command, env = commands[side]
            row[side] = timed(command, env=env, result=work / f"{side}.json", log=work / f"{side}.log")
            if side != "privsilo" and row[side].get("complete_rounds") != args.rounds:
                sys.exit(f"bench_vs_flower: {NAMES[side]} completed {row[side].get('complete_rounds')} of "
                         f"{args.rounds} rounds with every silo's reply; see {work / f'{side}.log'}")
        rows.append(row)
        print(f"{silos} silos, repeat {repeat + 1}: " + " | ".join(_one_run(side, row[side]) for side in args.sides), flush=True)
    shutil.rmtree(work)

    def median(side: str, key: str) -> float:
        return statistics.median(row[side][key] for row in rows)

    print(f"workload: {silos} IID silos of digits, MLP 64-128-10, {args.local_steps} local SGD steps of batch 32 at "
          f"lr 0.1, {args.rounds} rounds, FedAvg, {CPUS} CPUs; medians of {args.repeats} repetitions, end to end; "
          f"machine load average (1, 5, 15 min) {fmt_load(load_before)} at the start, "
          f"{fmt_load(os.getloadavg())} at the end")
    for side in args.sides:
        # float rounding only (float32 and float64 aggregation) may move a test prediction: expected 0
        off_reference = max(sum(abs(a - b) > 1e-6 for a, b in zip(row[side]["accuracies"], reference)) for row in rows)
        print(f"  {NAMES[side] + ':':9s} {median(side, 'wall_seconds'):.1f} s, test accuracy {median(side, 'accuracy'):.4f}; "
              f"rounds off the plain PyTorch loop's accuracy (reference_fedavg.py, final {reference[-1]:.4f}) by > 1e-6: "
              f"{off_reference} of {args.rounds}")
    for anchor in (side for side in args.sides if side != "privsilo"):
        if "privsilo" in args.sides:
            ratio = median("privsilo", "wall_seconds") / median(anchor, "wall_seconds")
            goal = GOALS[anchor](silos)
            # The same computation: the same batches from the same weights; only float rounding (privsilo
            # aggregates in float64, the anchors in float32) may move a test prediction.
            differing = max(sum(a != b for a, b in zip(row["privsilo"]["accuracies"], row[anchor]["accuracies"]))
                            for row in rows)
            print(f"  ratio privsilo / {NAMES[anchor]}: {ratio:.3f} (goal <= {goal:g}: {'met' if ratio <= goal else 'missed'}); "
                  f"rounds whose test accuracy differs from privsilo's: {differing} of {args.rounds}")


def _one_run(side: str, result: dict) -> str:
    if side == "privsilo":
        timing = result["timing"]
        inside = (f"inside run(): start-up {timing['data_seconds'] + timing['workers_seconds']:.1f} s, rounds "
                  f"{timing['rounds_seconds']:.1f} s")
    else:
        inside = f"rounds {result['rounds_seconds']:.1f} s"
    return f"{NAMES[side]} {result['wall_seconds']:6.1f} s ({inside}), accuracy {result['accuracy']:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--local-steps", type=int, default=20)
    parser.add_argument("--silos", type=int, nargs="+", default=[SILOS])
    parser.add_argument("--sides", nargs="+", choices=["privsilo", "flower", "pfl"], default=["privsilo", "flower"])
    parser.add_argument("--flower-python", default=DEFAULT_FLOWER_PYTHON)
    parser.add_argument("--pfl-python", default=DEFAULT_PFL_PYTHON)
    parser.add_argument("--privsilo-side", nargs=2, metavar=("SCENARIO_JSON", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.privsilo_side:
        privsilo_side(*args.privsilo_side)
        return
    for side in set(args.sides) - {"privsilo"}:
        python = getattr(args, f"{side}_python")
        if not Path(python).exists():
            sys.exit(f"bench_vs_flower: no {NAMES[side]} environment at {python}; run `bash {ENVIRONMENTS[side]}`")
    sys.path.insert(0, str(REPO))
    for silos in args.silos:
        compare(args, silos)


if __name__ == "__main__":
    main()
