"""rPDP-FL's run-level accountant: incremental per-record figures equal a from-scratch evaluation, per-silo
epsilon, records never trained, and the expected_batch normalisation that no accountant covers."""
from __future__ import annotations

import json

import numpy as np
import pytest

from privsilo.mechanisms.events import PersonalizedPoissonGaussianEvent, PersonalizedTrainingPlan, TrainingSchedule
from privsilo.mechanisms.rpdp import epsilon
from privsilo.mechanisms.rpdp.budget_accountant import RealisedCost
from privsilo.mechanisms.rpdp.personalized_accountant import NOT_COVERED, PersonalizedAccountant

SCHEDULE = TrainingSchedule(noise_multiplier=1.0, rounds=5, local_steps=4, client_rate=0.5)
SETTINGS = dict(SCHEDULE.as_settings(), delta=1e-3)


def _plans(rng: np.random.Generator) -> dict[int, PersonalizedTrainingPlan]:
    """Three silos whose records share a few rates across silos (as the exact estimator's grid rates do)."""
    levels = np.array([0.0, 0.004, 0.03, 0.2, 0.6])
    plans = {}
    for silo, size in enumerate((40, 25, 10)):
        rates = rng.choice(levels, size=size)
        plans[silo] = PersonalizedTrainingPlan(budgets=rng.uniform(0.5, 8.0, size=size), planned_rates=rates, schedule=SCHEDULE)
    return plans


def _run(accountant: PersonalizedAccountant, plans, rng: np.random.Generator, *, rounds: int, never: int = -1):
    """Register the plans, then ``rounds`` rounds with random participation and random early exclusions
    (silo ``never`` never takes part); returns each record's realised participations per silo."""
    participations = {silo: np.zeros(plan.planned_rates.size, dtype=np.int64) for silo, plan in plans.items()}
    for silo, plan in plans.items():
        accountant.record(silo, plan)
    for _ in range(rounds):
        for silo, plan in plans.items():
            if silo == never or rng.random() > 0.7:
                continue
            rates = np.where(rng.random(plan.planned_rates.size) < 0.2, 0.0, plan.planned_rates)
            participations[silo] += rates > 0
            accountant.record(silo, PersonalizedPoissonGaussianEvent(plan=plan, rates=rates))
    return participations


def test_incremental_figures_equal_a_from_scratch_evaluation():
    rng = np.random.default_rng(3)
    plans = _plans(rng)
    for conversion in ("opacus", "seed"):
        accountant = PersonalizedAccountant(delta=1e-3, conversion=conversion)
        participations = _run(accountant, plans, rng, rounds=SCHEDULE.rounds)
        records = accountant.per_record()
        rates = np.concatenate([plan.planned_rates for plan in plans.values()])
        k = np.concatenate(list(participations.values()))
        settings = dict(SETTINGS, conversion=conversion)
        np.testing.assert_array_equal(records["rounds"], k)
        np.testing.assert_array_equal(records["spent"], epsilon(rates, **settings, adversary="server", participations=k))
        np.testing.assert_array_equal(records["third_party"], epsilon(rates, **settings))
        np.testing.assert_array_equal(records["silo"], np.repeat([0, 1, 2], [40, 25, 10]))


def test_realised_cost_equals_the_accountant_and_validates():
    rng = np.random.default_rng(5)
    rates = rng.choice(np.concatenate([[0.0, 1.0], rng.uniform(1e-5, 0.9, 12)]), size=120)
    k = rng.integers(0, SCHEDULE.rounds + 1, size=120)
    cost = RealisedCost(**SETTINGS)
    for _ in range(2):  # the second query reads the cached one-round curves
        np.testing.assert_array_equal(cost.epsilon(rates, k), epsilon(rates, **SETTINGS, adversary="server", participations=k))
    assert cost.epsilon(np.zeros(0), np.zeros(0, dtype=np.int64)).shape == (0,)
    with pytest.raises(ValueError, match="participations"):
        cost.epsilon(rates[:1], np.array([SCHEDULE.rounds + 1]))
    for bad, name in ((dict(SETTINGS, delta=1.0), "delta"), (dict(SETTINGS, conversion="renyi"), "conversion"), (dict(SETTINGS, rounds=0), "rounds")):
        with pytest.raises(ValueError, match=name):
            RealisedCost(**bad)


def test_a_round_reuses_the_cached_curves_and_third_party_figures(monkeypatch):
    """After start-up, reporting a round evaluates no accountant: new rates only, once per distinct rate."""
    import privsilo.mechanisms.rpdp.budget_accountant
    import privsilo.mechanisms.rpdp.personalized_accountant

    calls = []

    def counted(module, name):
        real = getattr(module, name)

        def wrapper(q, **kwargs):
            calls.append((name, np.unique(q).size))
            return real(q, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted(privsilo.mechanisms.rpdp.budget_accountant, "rdp_curve")
    counted(privsilo.mechanisms.rpdp.personalized_accountant, "epsilon")
    rng = np.random.default_rng(4)
    plans = _plans(rng)
    accountant = PersonalizedAccountant(delta=1e-3)
    _run(accountant, plans, rng, rounds=1)
    accountant.report()
    distinct = np.unique(np.concatenate([plan.planned_rates for plan in plans.values()])).size
    assert sum(n for name, n in calls if name == "epsilon") == distinct  # third party: each rate once
    assert sum(n for name, n in calls if name == "rdp_curve") == distinct  # one-round curves: each rate once
    calls.clear()
    for _ in range(SCHEDULE.rounds - 1):
        for silo, plan in plans.items():
            accountant.record(silo, PersonalizedPoissonGaussianEvent(plan=plan, rates=plan.planned_rates))
        accountant.report()
    assert calls == []


def test_report_lists_every_silo_and_the_records_that_never_trained():
    rng = np.random.default_rng(8)
    plans = _plans(rng)
    accountant = PersonalizedAccountant(delta=1e-3)
    participations = _run(accountant, plans, rng, rounds=3, never=2)
    report = accountant.report()
    records = accountant.per_record()
    assert report["epsilon_per_silo"]["2"] == 0.0
    for silo in ("0", "1", "2"):
        assert report["epsilon_per_silo"][silo] == records["spent"][records["silo"] == int(silo)].max()
    assert report["epsilon"] == max(report["epsilon_per_silo"].values())
    never_trained = sum(int((k == 0).sum()) for k in participations.values())
    assert report["never_trained"] == never_trained >= plans[2].planned_rates.size
    assert report["never_eligible"] == sum(int((p.planned_rates == 0).sum()) for p in plans.values())
    json.dumps(report, allow_nan=False)


def test_expected_batch_normalisation_reports_no_epsilon_and_labels_the_papers_figures():
    """The paper's divisor sum_j q_ij is data-dependent: no accountant covers it, so no epsilon is claimed; the
    figures the paper's analysis would give are kept apart, under paper_accounting."""
    plans = _plans(np.random.default_rng(9))
    public, paper = PersonalizedAccountant(delta=1e-3), PersonalizedAccountant(delta=1e-3, normalization="expected_batch")
    _run(public, plans, np.random.default_rng(1), rounds=3)
    _run(paper, plans, np.random.default_rng(1), rounds=3)
    covered, report = public.report(), paper.report()
    assert report["guarantee"] == NOT_COVERED == "not covered: expected_batch normalisation"
    assert report["epsilon"] is None and "max_spent_over_budget" not in report
    assert report["epsilon_per_silo"] == {"0": None, "1": None, "2": None}
    figures = report["paper_accounting"]
    assert figures["epsilon"] == covered["epsilon"] > 0
    assert figures["by_budget"] == covered["by_budget"] and "not a guarantee" in figures["meaning"]
    assert report["never_trained"] == covered["never_trained"]
    with pytest.raises(ValueError, match="normalization"):
        PersonalizedAccountant(delta=1e-3, normalization="realised")
