"""The README's auditing table: claims, bounds, ceiling, estimate, accuracy and cost per setting.

Per setting: the claimed epsilon (RDP and, where the mechanism has it, PLD), the audit's view, its two lower
bounds (Steinke et al.'s counting bound and the Gaussian-DP one of Mahloujifar et al.), the counting bound's
ceiling (every guess right) and whether the claim is testable below it, the estimate, test accuracy with and
without canaries, and the audit's cost against the plain
run of the same scenario (runs alternating, in one local Ray session, so both reuse the same warm actors).

Each setting is a shipped scenario with ``--set``-style overrides (see ``SETTINGS``; ``--only NAME`` picks some).
The cost is the median over ``--repeats`` of the audit's wall time (``simulator.audit.runner.audit``: the run with
canaries plus scoring) divided by the plain run's (``simulator.engine.run``); "rounds cost" compares the round loops
alone (``timing.rounds_seconds`` of the last repeat), free of start-up (the first run of an actor shape starts the
actors) and of the audit's data loading and scoring.

    PYTHONPATH=. python benchmarks/bench_audit.py [--repeats 1] [--only dp_sgd_mnist_s1 ...]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from round_parts import loadavg, local_ray, median
from simulator.audit.runner import audit
from simulator.engine import run

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
MNIST_SHORT = ["federation.rounds=3", "audit.canaries=1000"]
SETTINGS: dict[str, tuple[str, list[str]]] = {
    **{f"dp_sgd_digits_s{sigma}": ("audits/dp_sgd_digits.yaml", [f"mechanism.noise_multiplier={sigma}", "mechanism.accountant=pld"])
       for sigma in ("0.3", "1.0", "3.0")},
    **{f"dp_sgd_digits_s{sigma}_uploads": ("audits/dp_sgd_digits.yaml", [f"mechanism.noise_multiplier={sigma}", "mechanism.accountant=pld",
                                                                          "audit.view=uploads"])
       for sigma in ("0.3", "1.0")},
    "dp_sgd_mnist_s0.5_uploads": ("mnist_dpsgd.yaml", [*MNIST_SHORT, "mechanism.noise_multiplier=0.5", "mechanism.accountant=pld",
                                                       "audit.view=uploads"]),
    **{f"dp_sgd_mnist_s{sigma}": ("mnist_dpsgd.yaml", [*MNIST_SHORT, f"mechanism.noise_multiplier={sigma}", "mechanism.accountant=pld"])
       for sigma in ("0.5", "1.0", "2.0")},
    "rpdp_mnist_three_levels": ("rpdp/mnist_iid.yaml", MNIST_SHORT),
    **{f"uldp_digits_avg_w_s{sigma}": ("audits/uldp_digits.yaml", [f"mechanism.noise_multiplier={sigma}", "mechanism.accountant=pld"])
       for sigma in ("0.5", "1.0")},
    "pldp_mnist_eps2": ("pldp/mnist.yaml", ["data.silos=10", "federation.rounds=3"]),
    "dprivacy_rotated_mnist_clipped": ("dprivacy/rotated_mnist.yaml", []),
    "dprivacy_rotated_mnist_paper": ("dprivacy/rotated_mnist.yaml", ["mechanism.calibration=paper", "mechanism.radius=null"]),
    "none_quickstart": ("quickstart.yaml", ["model.name=mlp_128"]),
}


def one_setting(name: str, repeats: int) -> dict[str, object]:
    path, overrides = SETTINGS[name]
    scenario = str(SCENARIOS / path)
    audit_seconds, plain_seconds, report, plain = [], [], None, None
    for _ in range(repeats):
        started = time.perf_counter()
        report = audit(scenario, overrides=overrides)
        audit_seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        plain = run(scenario, overrides=[o for o in overrides if not o.startswith("audit.")] + ["audit=null"])
        plain_seconds.append(time.perf_counter() - started)
    summary = report.to_json()
    return {
        "setting": name,
        "claimed (RDP)": summary.get("claimed_epsilon_rdp", summary["claimed_epsilon"]),
        "claimed (PLD)": summary.get("claimed_epsilon_pld"),
        "other claims": {key: value for key, value in summary.items() if key.startswith("claimed_") and "rdp" not in key
                         and "pld" not in key and key != "claimed_epsilon"},
        "view": summary["view"],
        "lower bound": summary["empirical_epsilon_lower_bound"],
        "GDP bound (epsilon, mu)": (summary["gdp_epsilon_lower_bound"], summary["gdp_mu_lower_bound"]),
        "ceiling": summary["ceiling"],
        "testable": summary["testable"],
        "estimate": summary["estimate"],
        "levels": [(level["budget"], level["empirical_epsilon_lower_bound"], level["estimate"]) for level in summary.get("levels", [])],
        "accuracy (audit)": report.result.rounds[-1].report.accuracy,
        "accuracy (plain)": plain.rounds[-1].report.accuracy,
        "cost": median([a / p for a, p in zip(audit_seconds, plain_seconds)]),
        "rounds cost": report.result.timing["rounds_seconds"] / plain.timing["rounds_seconds"],
        "plain seconds": median(plain_seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args()
    print(f"load before: {loadavg()}", flush=True)
    with local_ray(cpus=2):
        for name in args.only:
            print(one_setting(name, args.repeats), flush=True)
    print(f"load after: {loadavg()}", flush=True)


if __name__ == "__main__":
    main()
