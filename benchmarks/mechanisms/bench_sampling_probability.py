"""Time per-record sampling probabilities for 10^6 BoundedPareto budgets (rPDP-FL Sec. 6 / 7.1.2).

exact and scf: estimator built inside the timed region, median of REPEATS runs on 10^6 records.
bisect: per-record search on BISECT_RECORDS records, extrapolated per record. Also reports how much scf overspends.

    python -m benchmarks.mechanisms.bench_sampling_probability
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from privsilo.mechanisms.rpdp import SamplingProbabilityEstimator
from privsilo.mechanisms.rpdp.budgets import BoundedPareto

RECORDS = 1_000_000
REPEATS = 5
BISECT_RECORDS = 50
AUDIT_RECORDS = 2000
SETTING = dict(noise_multiplier=1.0, rounds=20, local_steps=5, client_rate=0.5, delta=1e-3)


def _timed(method: str, budgets: np.ndarray) -> tuple[float, SamplingProbabilityEstimator, np.ndarray]:
    start = time.perf_counter()
    estimator = SamplingProbabilityEstimator(**SETTING, method=method)
    rates = estimator.sampling_probability(budgets)
    return time.perf_counter() - start, estimator, rates


def main() -> None:
    rng = np.random.default_rng(0)
    budgets = BoundedPareto(shape=1.0, eps_min=0.1, eps_max=10.0).sample(RECORDS, rng=rng)
    print(f"setting {SETTING}, {RECORDS:,} BoundedPareto(1, [0.1, 10]) budgets")
    per_record = {}
    for method in ("exact", "scf"):
        runs = [_timed(method, budgets) for _ in range(REPEATS)]
        median = statistics.median(run[0] for run in runs)
        per_record[method] = median / RECORDS
        _, estimator, rates = runs[0]
        audit = rng.choice(RECORDS, AUDIT_RECORDS, replace=False)
        feasible = audit[~estimator.infeasible[audit]]
        ratio = estimator.overspend(budgets[feasible], rates[feasible])
        print(
            f"{method:6s} median {median:.3f} s over {REPEATS} runs ({', '.join(f'{r[0]:.2f}' for r in runs)}); "
            f"infeasible {estimator.infeasible.mean():.2%}; audit of {feasible.size}: "
            f"overspent {np.mean(ratio > 1):.1%}, max eps/budget {ratio.max():.3f}, min {ratio.min():.3f}"
            + (f"; grid {estimator.grid_q.size} rates" if method == "exact" else f"; R^2 {estimator.r_squared:.6f}")
        )
    sample = budgets[:BISECT_RECORDS]
    seconds, _, _ = _timed("bisect", sample)
    per_record["bisect"] = seconds / BISECT_RECORDS
    print(f"bisect {seconds:.2f} s for {BISECT_RECORDS} records = {per_record['bisect'] * 1e3:.1f} ms/record")
    print(
        f"per record: exact {per_record['exact'] * 1e9:.0f} ns, scf {per_record['scf'] * 1e9:.0f} ns; "
        f"bisect/exact {per_record['bisect'] / per_record['exact']:.3g}x, scf/exact {per_record['scf'] / per_record['exact']:.3g}x"
    )


if __name__ == "__main__":
    main()
