"""Per-round privacy accounting: the incremental accountants vs recomputing from the history, in the same run.

dp_sgd, the ``mnist_dpsgd`` setting (10 silos of 6,000 records, q = 64/6000, sigma = 1, tau = 50, lambda = 0.8,
delta = 1e-4): the new :class:`~privsilo.mechanisms.accounting.RdpAccountant` records a round's events and reports; the
baseline keeps one Opacus ``RDPAccountant`` per silo and asks it for epsilon, which recomputes the RDP of its
whole history (what privsilo did before, once per silo instead of its two to three passes).

rpdp, the ``mnist_iid`` setting (10 silos of 6,000 records, ThreeLevels or BoundedPareto budgets, T = 15,
tau = 50, lambda = 0.8, delta = 1e-4): the new :class:`~privsilo.mechanisms.rpdp.personalized_accountant.PersonalizedAccountant` records
a round's events and reports; the baseline evaluates, per silo, the realised cost of every record and its
third-party epsilon from scratch with :func:`privsilo.mechanisms.rpdp.epsilon` (what its report did before).

Both see the same seeded sequence of rounds; the script checks that they agree and prints the median time per
round of each and the ratio baseline / new.

    python -m benchmarks.mechanisms.bench_accounting [--rounds 15] [--budgets three_levels|bounded_pareto]
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
from opacus.accountants import RDPAccountant

from privsilo.mechanisms.accounting import RdpAccountant
from privsilo.mechanisms.events import PersonalizedPoissonGaussianEvent, PersonalizedTrainingPlan, PoissonGaussianEvent, TrainingSchedule
from privsilo.mechanisms.rpdp import SamplingProbabilityEstimator, epsilon
from privsilo.mechanisms.rpdp.budgets import make_distribution
from privsilo.mechanisms.rpdp.personalized_accountant import PersonalizedAccountant

SILOS, RECORDS, CLIENT_RATE, DELTA = 10, 6000, 0.8, 1e-4
SIGMA, LOCAL_STEPS = 1.0, 50


def _participants(rng: np.random.Generator, rounds: int) -> list[list[int]]:
    return [[s for s in range(SILOS) if rng.random() < CLIENT_RATE] for _ in range(rounds)]


def _median_per_round(rounds: list[list[int]], account: Callable[[list[int]], float]) -> tuple[float, float]:
    """Median seconds per round of ``account(participants)`` and the epsilon it returned last."""
    times, eps = [], 0.0
    for participants in rounds:
        start = time.perf_counter()
        eps = account(participants)
        times.append(time.perf_counter() - start)
    return statistics.median(times), eps


def bench_dp_sgd(rounds: list[list[int]]) -> None:
    event = PoissonGaussianEvent(sampling_rate=64 / RECORDS, noise_multiplier=SIGMA, steps=LOCAL_STEPS)
    new = RdpAccountant(delta=DELTA)
    new.enrol(range(SILOS))

    def incremental(participants: list[int]) -> float:
        for silo in participants:
            new.record(silo, event)
        return new.report()["epsilon"]

    opacus = {silo: RDPAccountant() for silo in range(SILOS)}

    def from_history(participants: list[int]) -> float:
        for silo in participants:
            for _ in range(LOCAL_STEPS):
                opacus[silo].step(noise_multiplier=SIGMA, sample_rate=event.sampling_rate)
        return max((acc.get_epsilon(DELTA) for acc in opacus.values() if acc.history), default=0.0)

    _report("dp_sgd", rounds, baseline=from_history, new=incremental)


def _plans(budgets: str, rounds: int, rng: np.random.Generator) -> list[PersonalizedTrainingPlan]:
    schedule = TrainingSchedule(noise_multiplier=SIGMA, rounds=rounds, local_steps=LOCAL_STEPS, client_rate=CLIENT_RATE)
    estimator = SamplingProbabilityEstimator(**schedule.as_settings(), delta=DELTA)
    plans = []
    for _ in range(SILOS):
        values = make_distribution(budgets).sample(RECORDS, rng=rng)
        plans.append(PersonalizedTrainingPlan(budgets=values, planned_rates=estimator.sampling_probability(values), schedule=schedule))
    return plans


def bench_rpdp(rounds: list[list[int]], budgets: str, rng: np.random.Generator) -> None:
    plans = _plans(budgets, len(rounds), rng)
    settings = dict(plans[0].schedule.as_settings(), delta=DELTA)
    start = time.perf_counter()
    new = PersonalizedAccountant(delta=DELTA)
    for silo, plan in enumerate(plans):
        new.record(silo, plan)
    print(f"rpdp ({budgets}): registering the plans took {time.perf_counter() - start:.2f} s (once per run)")

    def incremental(participants: list[int]) -> float:
        for silo in participants:
            new.record(silo, PersonalizedPoissonGaussianEvent(plan=plans[silo], rates=plans[silo].planned_rates))
        return new.report()["epsilon"]

    counts = [np.zeros(RECORDS, dtype=np.int64) for _ in range(SILOS)]

    def from_scratch(participants: list[int]) -> float:
        for silo in participants:
            counts[silo] += plans[silo].planned_rates > 0
        worst = 0.0
        for silo, plan in enumerate(plans):
            pairs, inverse = np.unique(np.stack([plan.planned_rates, counts[silo]]), axis=1, return_inverse=True)
            spent = epsilon(pairs[0], **settings, adversary="server", participations=pairs[1].astype(np.int64))
            worst = max(worst, float(spent[inverse.reshape(-1)].max()))
            epsilon(np.unique(plan.planned_rates), **settings)  # the third-party figure, recomputed every round
        return worst

    _report(f"rpdp ({budgets})", rounds, baseline=from_scratch, new=incremental)


def _report(name: str, rounds: list[list[int]], *, baseline: Callable, new: Callable) -> None:
    new_seconds, new_eps = _median_per_round(rounds, new)
    old_seconds, old_eps = _median_per_round(rounds, baseline)
    if not np.isclose(new_eps, old_eps, rtol=1e-9, atol=0):
        raise SystemExit(f"{name}: epsilon differs: incremental {new_eps!r}, from scratch {old_eps!r}")
    print(
        f"{name}: median accounting time per round over {len(rounds)} rounds: from scratch {old_seconds * 1e3:.1f} ms, "
        f"incremental {new_seconds * 1e3:.3f} ms; ratio {old_seconds / new_seconds:.0f}x (final epsilon {new_eps:.4f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--budgets", default="three_levels", choices=["three_levels", "bounded_pareto", "bounded_mix_gauss"])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rounds = _participants(rng, args.rounds)
    bench_dp_sgd(rounds)
    bench_rpdp(rounds, args.budgets, rng)


if __name__ == "__main__":
    main()
