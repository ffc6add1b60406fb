"""The auditing table of docs/auditing.md (Measured): claims, bounds, ceiling, bound/claim, estimate, accuracy and cost per setting.

Per setting: the claimed epsilon (RDP and, where the mechanism has it, PLD), the audit's view, its two lower
bounds (Steinke et al.'s counting bound and the Gaussian-DP one of Mahloujifar et al.), each over the claim (the
PLD one where there is one), the counting bound's ceiling (every guess right) and whether the claim is testable
below it, the canaries' signal-to-noise, direction (``audit.canary_direction``) and score (``audit.score``), the estimate, test accuracy with
and without canaries, and the audit's cost against the plain
run of the same scenario (runs alternating, in one local Ray session, so both reuse the same warm actors).
``--no-plain`` skips the plain runs (no accuracy without canaries, no cost ratio: half the time); ``--table``
prints the table's rows (markdown) after the per-setting dicts.

Each setting is a shipped scenario with ``--set``-style overrides (see ``SETTINGS``; ``--only NAME`` picks some).
The cost is the median over ``--repeats`` of the audit's wall time (``privsilo.simulator.audit.runner.audit``: the run with
canaries plus scoring) divided by the plain run's (``privsilo.simulator.engine.run``); "rounds cost" compares the round loops
alone (``timing.rounds_seconds`` of the last repeat), free of start-up (the first run of an actor shape starts the
actors) and of the audit's data loading and scoring.

    python -m benchmarks.runtime.bench_audit [--repeats 1] [--only dp_sgd_mnist_s1 ...] [--no-plain] [--table]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.support.round_parts import loadavg, local_ray, median
from privsilo.simulator.audit.runner import audit
from privsilo.simulator.engine import run

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
MNIST_SHORT = ["federation.rounds=3", "audit.canaries=1000"]
SETTINGS: dict[str, tuple[str, list[str]]] = {
    **{f"dp_sgd_digits_s{sigma}": ("audits/dp_sgd_digits.yaml", [f"mechanism.noise_multiplier={sigma}", "mechanism.accountant=pld"])
       for sigma in ("0.3", "1.0", "3.0")},
    **{f"dp_sgd_digits_s{sigma}_uploads": ("audits/dp_sgd_digits.yaml", [f"mechanism.noise_multiplier={sigma}", "mechanism.accountant=pld",
                                                                          "audit.view=uploads"])
       for sigma in ("0.3", "1.0")},
    **{f"dp_sgd_digits_s1.0_uploads_{count}{suffix}": ("audits/dp_sgd_digits.yaml", [
        "mechanism.noise_multiplier=1.0", "mechanism.accountant=pld", "audit.view=uploads", f"audit.canaries={count}", *extra])
       for count, suffix, extra in ((3000, "", []), (3000, "_quiet", ["audit.canary_direction=quiet"]),
                                    (9000, "_quiet", ["audit.canary_direction=quiet"]),
                                    (3000, "_quiet_likelihood", ["audit.canary_direction=quiet", "audit.score=likelihood"]),
                                    (9000, "_quiet_likelihood", ["audit.canary_direction=quiet", "audit.score=likelihood"]))},
    **{f"dp_sgd_mnist_s0.5_uploads{suffix}": ("mnist_dpsgd.yaml", [*MNIST_SHORT, "mechanism.noise_multiplier=0.5", "mechanism.accountant=pld",
                                                                  "audit.view=uploads", *extra])
       for suffix, extra in (("", []), ("_quiet", ["audit.canary_direction=quiet"]),
                             ("_quiet_likelihood", ["audit.canary_direction=quiet", "audit.score=likelihood"]))},
    **{f"dp_sgd_mnist_s{sigma}": ("mnist_dpsgd.yaml", [*MNIST_SHORT, f"mechanism.noise_multiplier={sigma}", "mechanism.accountant=pld"])
       for sigma in ("0.5", "1.0", "2.0")},
    "rpdp_mnist_three_levels": ("rpdp/mnist_iid.yaml", MNIST_SHORT),
    **{f"uldp_digits_avg_w_s{sigma}": ("audits/uldp_digits.yaml", [f"mechanism.noise_multiplier={sigma}", "mechanism.accountant=pld"])
       for sigma in ("0.5", "1.0")},
    **{f"uldp_digits_avg_w_s{sigma}_{direction}": ("audits/uldp_digits.yaml", [f"mechanism.noise_multiplier={sigma}",
                                                                             "mechanism.accountant=pld", f"audit.canary_direction={direction}"])
       for sigma, direction in (("1.0", "dirac"), ("1.0", "quiet"), ("0.5", "quiet"))},
    "pldp_mnist_eps2": ("pldp/mnist.yaml", ["data.silos=10", "federation.rounds=3"]),
    "dprivacy_rotated_mnist_clipped": ("dprivacy/rotated_mnist.yaml", []),
    "dprivacy_rotated_mnist_paper": ("dprivacy/rotated_mnist.yaml", ["mechanism.calibration=paper", "mechanism.radius=null"]),
    "none_quickstart": ("quickstart.yaml", ["model.name=mlp_128"]),
}


def one_setting(name: str, repeats: int, *, plain_runs: bool = True) -> dict[str, object]:
    path, overrides = SETTINGS[name]
    scenario = str(SCENARIOS / path)
    audit_seconds, plain_seconds, report, plain = [], [], None, None
    for _ in range(repeats):
        started = time.perf_counter()
        report = audit(scenario, overrides=overrides)
        audit_seconds.append(time.perf_counter() - started)
        if plain_runs:
            started = time.perf_counter()
            plain = run(scenario, overrides=[o for o in overrides if not o.startswith("audit.")] + ["audit=null"])
            plain_seconds.append(time.perf_counter() - started)
    summary = report.to_json()
    claim = summary.get("claimed_epsilon_pld", summary["claimed_epsilon"])
    return {
        "setting": name,
        "claimed (RDP)": summary.get("claimed_epsilon_rdp", summary["claimed_epsilon"]),
        "claimed (PLD)": summary.get("claimed_epsilon_pld"),
        "other claims": {key: value for key, value in summary.items() if key.startswith("claimed_") and "rdp" not in key
                         and "pld" not in key and key != "claimed_epsilon"},
        "view": summary["view"],
        "canaries": summary["canaries"],
        "canary direction": summary["canary_direction"],
        "score": summary["score_kind"],
        "lower bound": summary["empirical_epsilon_lower_bound"],
        "GDP bound (mu, mu*)": (summary["gdp_mu_lower_bound"], summary["gdp_mu_star"]),
        "bound / claim": _ratio(summary["empirical_epsilon_lower_bound"], claim),
        "GDP mu / mu*": summary["gdp_mu_over_mu_star"],
        "signal to noise": summary["signal_to_noise"],
        "ceiling": summary["ceiling"],
        "testable": summary["testable"],
        "estimate": summary["estimate"],
        "levels": [(level["budget"], level["empirical_epsilon_lower_bound"], level["estimate"]) for level in summary.get("levels", [])],
        "accuracy (audit)": report.result.rounds[-1].report.accuracy,
        "accuracy (plain)": None if plain is None else plain.rounds[-1].report.accuracy,
        "cost": median([a / p for a, p in zip(audit_seconds, plain_seconds)]) if plain_seconds else None,
        "rounds cost": None if plain is None else report.result.timing["rounds_seconds"] / plain.timing["rounds_seconds"],
        "audit seconds": median(audit_seconds),
        "plain seconds": median(plain_seconds) if plain_seconds else None,
    }


def _ratio(bound: float | None, claim: float | None) -> float | None:
    return None if bound is None or not claim else bound / claim


TABLE_HEADER = ("| setting | canaries (direction) | view | claim (PLD where given) | ceiling | counting bound | Gaussian-DP bound: mu "
                "(mu*) | counting / claim, mu / mu* | signal to noise | audit seconds |\n|---|---|---|---|---|---|---|---|---|---|")


def table_row(row: dict[str, object]) -> str:
    """One line of the auditing table from ``one_setting``'s dict."""
    def figure(value: object) -> str:
        return "-" if value is None else f"{value:.2f}"

    claim = row["claimed (PLD)"] if row["claimed (PLD)"] is not None else row["claimed (RDP)"]
    gdp_mu, mu_star = row["GDP bound (mu, mu*)"]
    scored = "" if row["score"] == "sum" else f", {row['score']} score"
    return (f"| {row['setting']} | {row['canaries']:,} ({row['canary direction']}{scored}) | {row['view']} | {figure(claim)} | "
            f"{figure(row['ceiling'])} | {figure(row['lower bound'])} | {figure(gdp_mu)} ({figure(mu_star)}) | "
            f"{figure(row['bound / claim'])}, {figure(row['GDP mu / mu*'])} | {figure(row['signal to noise'])} | "
            f"{row['audit seconds']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--no-plain", action="store_true", help="skip the plain runs (no accuracy without canaries, no cost)")
    parser.add_argument("--table", action="store_true", help="print the auditing table's rows at the end")
    args = parser.parse_args()
    print(f"load before: {loadavg()}", flush=True)
    rows = []
    with local_ray(cpus=2):
        for name in args.only:
            rows.append(one_setting(name, args.repeats, plain_runs=not args.no_plain))
            print(rows[-1], flush=True)
    print(f"load after: {loadavg()}", flush=True)
    if args.table:
        print("\n".join([TABLE_HEADER, *map(table_row, rows)]))


if __name__ == "__main__":
    main()
