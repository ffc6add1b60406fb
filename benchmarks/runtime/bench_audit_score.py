"""``audit.score``: the likelihood score against the summed one, on the same runs (paired over seeds).

For each ``bench_audit`` setting named (default: the digits DP-SGD uploads audits with 3,000 and 9,000 quiet canaries)
and each scenario ``seed`` in ``0 .. --seeds - 1``, audits the run with ``audit.score=sum`` and with
``audit.score=likelihood``: the same seed gives the same run and the same canaries, so each pair differs only in
the score. Prints each pair's counting bound and Gaussian-DP bound on mu, then per setting the medians and the median
paired ratio (likelihood over sum) of each bound, and each bound over what it is set against (the claim; mu*).

    python -m benchmarks.runtime.bench_audit_score [--seeds 10] [--only dp_sgd_digits_s1.0_uploads_9000_quiet ...]
"""
from __future__ import annotations

import argparse

from benchmarks.runtime.bench_audit import SCENARIOS, SETTINGS
from benchmarks.support.round_parts import loadavg, local_ray, median
from privsilo.simulator.audit.runner import audit

DEFAULT_SETTINGS = ("dp_sgd_digits_s1.0_uploads_3000_quiet", "dp_sgd_digits_s1.0_uploads_9000_quiet")


def bounds(name: str, seed: int, score: str) -> tuple[float, float, tuple[float, float]]:
    """(counting bound, Gaussian-DP bound on mu, (PLD claim, mu*)) of setting ``name`` at ``seed`` with
    ``audit.score=score``: each bound with the figure it is set against."""
    path, overrides = SETTINGS[name]
    summary = audit(str(SCENARIOS / path), overrides=[*overrides, f"seed={seed}", f"audit.score={score}"]).to_json()
    claim = summary.get("claimed_epsilon_pld", summary["claimed_epsilon"])
    return summary["empirical_epsilon_lower_bound"], summary["gdp_mu_lower_bound"], (claim, summary["gdp_mu_star"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=list(DEFAULT_SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args()
    print(f"load before: {loadavg()}", flush=True)
    with local_ray(cpus=2):
        for name in args.only:
            pairs = []
            for seed in range(args.seeds):
                summed, weighed = bounds(name, seed, "sum"), bounds(name, seed, "likelihood")
                pairs.append((summed, weighed))
                print(f"{name} seed {seed}: counting {summed[0]:.3f} -> {weighed[0]:.3f}, Gaussian-DP mu {summed[1]:.3f} -> "
                      f"{weighed[1]:.3f}", flush=True)
            for index, bound, against in ((0, "counting", "the claim"), (1, "Gaussian-DP mu", "mu*")):
                reference = pairs[0][0][2][index]
                sums, likelihoods = [s[index] for s, _ in pairs], [w[index] for _, w in pairs]
                ratio = median([w / s for s, w in zip(sums, likelihoods)]) if all(sums) else None
                print(f"{name} {bound}: median sum {median(sums):.3f}, median likelihood {median(likelihoods):.3f} "
                      f"(over {against} {reference:.3f}: {median(sums) / reference:.3f}, {median(likelihoods) / reference:.3f}); "
                      f"median paired ratio {'-' if ratio is None else f'{ratio:.3f}'}; likelihood higher in "
                      f"{sum(w > s for s, w in zip(sums, likelihoods))} of {len(pairs)}", flush=True)
    print(f"load after: {loadavg()}", flush=True)


if __name__ == "__main__":
    main()
