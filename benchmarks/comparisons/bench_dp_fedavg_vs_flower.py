"""privsilo's ``dp_fedavg`` (central noise, fixed clipping) against Flower's ``DifferentialPrivacyServerSideFixedClipping``
at the same z, C, q and rounds, over several seeds, in one run.

The workload is ``bench_vs_flower.py``'s (10 IID silos of scikit-learn digits, the MLP 64-128-10, 20 local SGD steps
of batch 32 at lr 0.1, 10 rounds, 2 CPUs), exported per seed from privsilo's own data loading, so that in each seed
both sides train the same network from the same initial weights on the same split and the same batches; only the
noise (and, at q < 1, the sample of silos) is drawn independently by each. privsilo runs ``mechanism: dp_fedavg``
through ``privsilo.simulator.engine.run`` in this interpreter; Flower runs ``flower_fedavg.py --noise-multiplier``
in its own environment (``bash benchmarks/comparisons/flower_env.sh``).

What differs between the two (Flower 1.41's ``flwr.serverapp.strategy.dp_fixed_clipping`` and
``flwr.supercore.differential_privacy``):

- *Sampling.* privsilo Poisson-samples each silo at rate q and divides the noisy sum by the expected count q N;
  Flower's FedAvg samples exactly m = int(q N) silos without replacement and the wrapper divides by the configured m.
  At q = 1 (the default) both take every silo and divide by N: the same mechanism.
- *Noise.* privsilo adds N(0, (z C)^2) in float64 to the sum of the clipped deltas; Flower adds N(0, (z C / m)^2)
  in float32 to the average of the clipped models (the current model plus the clipped delta), from numpy's global
  generator (seeded here per run; Flower leaves it unseeded).
- *Clipping.* privsilo's silo clips its own delta (a server never sees an unclipped update); Flower's server clips
  the models the silos send (server-side clipping: the server sees them unclipped). The same vector either way.
- *Weights.* Both average with equal weights (``flower_fedavg.py`` weights by a constant ``unit-weight``).
- *Accounting.* privsilo reports the client-level epsilon (RDP of the Poisson-subsampled Gaussian, and the view of
  one who knows the sample); Flower 1.41's wrapper reports nothing unless given an accountant (optional,
  ``dp-accounting`` not installed, no amplification only).

With ``--noise-multiplier 0`` the two must agree round by round (the script prints in how many rounds the test
accuracies differ: float rounding only, expected 0 at q = 1).

    python -m benchmarks.comparisons.bench_dp_fedavg_vs_flower [--seeds 0 1 2] [--noise-multiplier 0.5] [--clip-norm 1]
        [--client-rate 1] [--rounds 10] [--local-steps 20] [--silos 10] [--delta 1e-5] [--flower-python PY]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.comparisons.bench_vs_flower import DEFAULT_FLOWER_PYTHON, export_workload, fmt_load, timed  # noqa: E402
from benchmarks.support.workload import CPUS, SILOS, fedavg_scenario  # noqa: E402

QUIET = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "FLWR_TELEMETRY_ENABLED": "0"}


def dp_fedavg_scenario(args: argparse.Namespace, seed: int, mechanism: dict) -> dict:
    """The shared workload at ``seed`` with ``mechanism`` and the client rate ``args.client_rate``."""
    raw = fedavg_scenario(name="bench_dp_fedavg", rounds=args.rounds, local_steps=args.local_steps, silos=args.silos)
    raw["seed"] = seed
    raw["federation"]["client_rate"] = args.client_rate
    raw["mechanism"] = mechanism
    return raw


def refuse_invalid(raw: dict) -> None:
    """Exit with status 2 and the scenario's one-line error where a flag makes the scenario invalid."""
    from privsilo.simulator.errors import PrivsiloError
    from privsilo.simulator.scenario import validate_scenario

    try:
        validate_scenario(raw)
    except PrivsiloError as error:
        print(f"{Path(sys.argv[0]).stem}: {error}", file=sys.stderr)
        sys.exit(2)


def privsilo_run(raw: dict) -> dict:
    """One privsilo run in this interpreter: each round's test accuracy, the privacy report and the wall seconds."""
    from privsilo.simulator.engine import run

    started = time.perf_counter()
    result = run(raw)
    accuracies = [record.report.accuracy for record in result.rounds]
    return {"accuracy": accuracies[-1], "accuracies": accuracies, "privacy": dict(result.privacy),
            "wall_seconds": time.perf_counter() - started}


def flower_run(args: argparse.Namespace, raw: dict, work: Path, seed: int) -> dict:
    """One Flower run on the workload exported from ``raw``, in the Flower environment."""
    export_workload(raw, work / "workload.npz")
    command = [args.flower_python, str(HERE / "flower_fedavg.py"), "--workload", str(work / "workload.npz"),
               "--result", str(work / "flower.json"), "--cpus", str(CPUS), "--noise-multiplier", str(args.noise_multiplier),
               "--clip-norm", str(args.clip_norm), "--client-rate", str(args.client_rate), "--seed", str(seed)]
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **QUIET}  # Flower must not see privsilo
    return timed(command, env=env, result=work / "flower.json", log=work / "flower.log")


def spread(values: list[float]) -> str:
    """Mean, sample standard deviation and median of ``values``."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"mean {statistics.mean(values):.4f} (sd {sd:.4f}), median {statistics.median(values):.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--noise-multiplier", type=float, default=0.5)
    parser.add_argument("--clip-norm", type=float, default=1.0)
    parser.add_argument("--client-rate", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--local-steps", type=int, default=20)
    parser.add_argument("--silos", type=int, default=SILOS)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--flower-python", default=DEFAULT_FLOWER_PYTHON)
    args = parser.parse_args()
    if not Path(args.flower_python).exists():
        sys.exit(f"bench_dp_fedavg_vs_flower: no Flower environment at {args.flower_python}; run "
                 "`bash benchmarks/comparisons/flower_env.sh`")
    os.environ.update(QUIET)
    import privsilo.simulator  # noqa: F401  (Ray environment)

    mechanism = {"name": "dp_fedavg", "noise_multiplier": args.noise_multiplier, "clip_norm": args.clip_norm,
                 "delta": args.delta}
    refuse_invalid(dp_fedavg_scenario(args, args.seeds[0], mechanism))
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_dp_fedavg_") as tmp:
        for seed in args.seeds:
            raw = dp_fedavg_scenario(args, seed, mechanism)
            mine, flower = privsilo_run(raw), flower_run(args, raw, Path(tmp), seed)
            if flower.get("complete_rounds") != args.rounds:
                sys.exit(f"bench_dp_fedavg_vs_flower: Flower completed {flower.get('complete_rounds')} of {args.rounds} "
                         f"rounds with every sampled silo's reply (seed {seed})")
            differing = sum(abs(a - b) > 1e-6 for a, b in zip(mine["accuracies"], flower["accuracies"]))
            rows.append((mine, flower))
            print(f"seed {seed}: privsilo {mine['accuracy']:.4f} ({mine['wall_seconds']:.0f} s), Flower "
                  f"{flower['accuracy']:.4f} ({flower['wall_seconds']:.0f} s); rounds whose accuracy differs: "
                  f"{differing} of {args.rounds}", flush=True)
    privacy = rows[0][0]["privacy"]
    print(f"workload: {args.silos} IID silos of digits, MLP 64-128-10, {args.local_steps} local SGD steps of batch 32 at "
          f"lr 0.1, {args.rounds} rounds, q = {args.client_rate:g}, z = {args.noise_multiplier:g}, C = {args.clip_norm:g}, "
          f"{CPUS} CPUs; seeds {' '.join(map(str, args.seeds))}; load average (1, 5, 15 min) {fmt_load(load_before)} at "
          f"the start, {fmt_load(os.getloadavg())} at the end")
    print(f"  privsilo dp_fedavg (central):                    final test accuracy {spread([m['accuracy'] for m, _ in rows])}")
    print(f"  Flower DifferentialPrivacyServerSideFixedClipping: final test accuracy {spread([f['accuracy'] for _, f in rows])}")
    differences = [m["accuracy"] - f["accuracy"] for m, f in rows]
    print(f"  paired difference privsilo - Flower: {spread(differences)}")
    extra = (f", {epsilon(privacy['epsilon_without_sampling'])} for one who knows the sample"
             if "epsilon_without_sampling" in privacy else "")
    print(f"  privsilo's client-level epsilon: {epsilon(privacy['epsilon'])} at delta {privacy['delta']:g}{extra} "
          f"({privacy['rounds_accounted']} rounds); Flower reports none")


def epsilon(value: float | None) -> str:
    """An epsilon as the report gives it (None: no guarantee, z = 0)."""
    return "inf (z = 0)" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
