"""The rpdp mechanism: per-record rates in local DP-SGD, budget enforcement, baselines, scenario errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from privsilo.mechanisms.accounting import DEFAULT_ORDERS
from privsilo.mechanisms.base import LocalTraining, PrivacyBudgetError, SiloContext
from privsilo.mechanisms.per_sample import noisy_sgd_steps
from privsilo.mechanisms.rpdp import epsilon
from privsilo.mechanisms.rpdp.budget_accountant import RecordBudgetAccountant
from privsilo.mechanisms.rpdp.mechanism import Rpdp, RpdpParams
from privsilo.simulator.cli import main
from privsilo.simulator.engine import run
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from privsilo.simulator.experiments.sweep import rebuild_accountant
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario
from tests.support.rpdp_reference import lemma6_epsilon

SETTINGS = dict(noise_multiplier=1.0, rounds=6, local_steps=5, client_rate=0.5, delta=1e-3)
INTEGER_ORDERS = tuple(order for order in DEFAULT_ORDERS if float(order).is_integer())


def _context(n: int = 300, *, rounds: int = 6, client_rate: float = 0.5) -> SiloContext:
    generator = torch.Generator().manual_seed(0)
    return SiloContext(
        silo_id=0,
        record_ids=np.arange(n),
        features=torch.randn(n, 4, generator=generator, dtype=torch.float64),
        labels=torch.randint(2, (n,), generator=generator),
        model=torch.nn.Linear(4, 2).double(),
        training=LocalTraining(local_steps=5, batch_size=32, lr=0.1, rounds=rounds, client_rate=client_rate),
        generator=generator,
        device=torch.device("cpu"),
    )


def test_budget_invariant_holds_under_any_participation():
    """Seeded random participation (each round run with probability 0.8, until some record reaches T rounds).

    Every record's spent epsilon is checked against an independent 50-digit evaluation of Theorem 1 for the
    server (k realised rounds: k * tau * rho(a, q), Lemma 4 summed directly; ``tests.support.rpdp_reference``), not
    against the accountant itself: it never exceeds the budget, it equals the accountant's figure, and every
    record the accountant stops would have exceeded its budget in one more round. The accountant runs on the
    integer orders the reference evaluates (its fractional orders are checked against Opacus elsewhere)."""
    rng = np.random.default_rng(7)
    budgets = rng.uniform(0.2, 3.0, size=400)
    rates = rng.choice(np.concatenate([[0.0], rng.uniform(0.001, 0.3, size=7)]), size=400)
    settings = dict(SETTINGS, orders=INTEGER_ORDERS)
    accountant = RecordBudgetAccountant(budgets=budgets, rates=rates, settings=settings)

    def reference(participations: np.ndarray) -> np.ndarray:
        return np.array([
            lemma6_epsilon(q, sigma=SETTINGS["noise_multiplier"], rounds=int(k), local_steps=SETTINGS["local_steps"],
                           client_rate=1.0, delta=SETTINGS["delta"], conversion="opacus", orders=INTEGER_ORDERS)
            for q, k in zip(rates, participations)
        ])

    for _ in range(2 * SETTINGS["rounds"]):
        if accountant.rounds.max() == SETTINGS["rounds"]:
            break
        used = accountant.rates_for_next_round()
        stopped = (rates > 0) & (used == 0)
        assert np.all(reference(accountant.rounds + 1)[stopped] > budgets[stopped])
        if rng.random() < 0.8:
            accountant.commit(used)
        spent = reference(accountant.rounds)
        assert np.all(spent <= budgets)
        np.testing.assert_allclose(accountant.spent(), spent, rtol=1e-9, atol=0)
    assert accountant.rounds.max() == SETTINGS["rounds"]
    assert accountant.excluded_early.sum() > 0
    assert np.all(accountant.spent()[rates == 0] == 0)


def test_per_record_rates_normalise_by_expected_batch_size():
    """Zero features and no bias: every gradient is 0, so the update is noise of std lr*sigma*C/sum(q)."""
    n, steps = 500, 400
    rates = torch.linspace(0.01, 0.2, n, dtype=torch.float64)
    model = torch.nn.Linear(3, 2, bias=False).double()
    torch.nn.init.zeros_(model.weight)
    generator = torch.Generator().manual_seed(1)
    noisy_sgd_steps(model, features=torch.zeros(n, 3, dtype=torch.float64), labels=torch.zeros(n, dtype=torch.long),
                    rates=rates, steps=steps, max_grad_norm=2.0, noise_multiplier=1.5, lr=0.1, generator=generator)
    expected_std = np.sqrt(steps) * 0.1 * 1.5 * 2.0 / float(rates.sum())
    observed = model.weight.detach().numpy().ravel() / expected_std
    # Six standard normal draws: |z| < 5.5 fails with probability < 3e-7 (stated false-failure rate).
    assert np.all(np.abs(observed) < 5.5)
    assert 0.1 < observed.std() < 3.0


@pytest.mark.parametrize("variant", ["rpdp", "minimum", "dropout"])
def test_variants_plan_rates_within_budgets(variant):
    params = RpdpParams(variant=variant, budgets={"distribution": "three_levels"}, delta=1e-3)
    silo = Rpdp(params).silo(_context())
    planned, budgets = silo.planned_rates, silo.budgets
    cost = epsilon(planned, **SETTINGS)
    assert np.all(cost <= budgets)
    if variant == "minimum":
        assert np.unique(planned).size == 1
    if variant == "dropout":
        assert np.all(planned[budgets < budgets.mean()] == 0) and np.unique(planned[budgets >= budgets.mean()]).size == 1
    if variant == "rpdp":  # larger budgets get larger rates
        order = np.argsort(budgets)
        assert np.all(np.diff(planned[order]) >= 0) and planned.max() > planned.min()


def test_refuses_infeasible_budgets_when_asked():
    params = RpdpParams(budgets={"distribution": "three_levels", "levels": [0.001, 1.0, 5.0]}, infeasible="refuse")
    with pytest.raises(PrivacyBudgetError, match="infeasible"):
        Rpdp(params).silo(_context())


@pytest.mark.slow
def test_rpdp_run_on_heart_disease_respects_every_budget(ray_local, heart_disease_dir):
    """Rates planned for the server's *expected* cost (lambda*T*rho) overspend when a silo takes part more often
    than expected: the budget accountant must stop those records before they exceed their budgets."""
    result = run(
        REPO / "scenarios" / "rpdp" / "heart_disease_three_levels.yaml",
        overrides=[f"data.path={heart_disease_dir}", "federation.rounds=4", "federation.local_steps=5",
                   "federation.client_rate=0.5", "mechanism.adversary=server", "seed=1"],
    )
    privacy = result.privacy
    participations = np.zeros(4, dtype=int)
    for record in result.rounds:
        participations[list(record.report.participants)] += 1
    assert participations.max() > 2  # some silo took part more often than lambda*T = 2 rounds
    assert privacy["excluded_early"] > 0
    assert privacy["max_spent_over_budget"] <= 1.0
    assert [row["budget"] for row in privacy["by_budget"]] == [0.1, 1.0, 5.0]
    q_means = [row["q_mean"] for row in privacy["by_budget"]]
    assert q_means == sorted(q_means)


@pytest.mark.parametrize(
    ("budgets", "needle"),
    [
        ({"distribution": "bounded_pareto", "eps_min": 5.0, "eps_max": 1.0}, "eps_max"),
        ({"distribution": "three_levels", "levels": [0.1, -1.0, 5.0]}, "levels"),
        ({"distribution": "gamma"}, "gamma"),
        ({"distribution": "column", "path": "/no/such.csv", "column": "eps"}, "path"),
    ],
)
def test_bad_budgets_name_the_field(budgets, needle):
    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(mechanism={"name": "rpdp", "budgets": budgets}))
    assert info.value.field.startswith("mechanism.budgets") and needle in str(info.value)  # e.g. mechanism.budgets.path


@pytest.mark.slow
def test_cli_reports_refusal_in_one_line(ray_local, tmp_path, capsys):
    code = main(["run", str(REPO / "scenarios" / "quickstart.yaml"), "--out", str(tmp_path / "o"), "--no-progress",
                 "--set", "mechanism={name: rpdp, infeasible: refuse, budgets: {distribution: three_levels, levels: [0.001, 1.0, 5.0]}}"])
    assert code == 2
    err = capsys.readouterr().err
    assert "mechanism.infeasible" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_budgets_from_a_csv_column(tmp_path):
    path = tmp_path / "budgets.csv"
    path.write_text("record,eps\n" + "".join(f"{i},{0.5 + i % 3}\n" for i in range(300)))
    params = RpdpParams(budgets={"distribution": "column", "path": str(path), "column": "eps"})
    silo = Rpdp(params).silo(_context())
    np.testing.assert_array_equal(silo.budgets, 0.5 + np.arange(300) % 3)
    path.write_text("record,eps\n0,1.0\n1,nan\n2,-1\n")
    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(mechanism={"name": "rpdp", "budgets": {"distribution": "column", "path": str(path), "column": "eps"}}))
    assert info.value.field == "mechanism.budgets" and "2 of 3" in str(info.value)


@pytest.mark.parametrize(("value", "field"), [([], "mechanism"), (0, "mechanism"), (False, "mechanism"),
                                               ("", "mechanism.name")])  # a string alone is the mechanism's name
def test_malformed_mechanism_block_is_an_error(value, field):
    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(mechanism=value))
    assert info.value.field == field


def test_mechanism_params_are_strict():
    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(mechanism={"name": "rpdp", "noise_multiplier": "1.5"}))
    assert info.value.field == "mechanism.noise_multiplier"


def test_budget_column_shorter_than_the_training_set_is_refused(tmp_path):
    path = tmp_path / "budgets.csv"
    path.write_text("eps\n" + "1.0\n" * 10)
    params = RpdpParams(budgets={"distribution": "column", "path": str(path), "column": "eps"})
    with pytest.raises(PrivacyBudgetError, match="10 budgets"):
        Rpdp(params).silo(_context())


def test_report_covers_silos_that_were_never_sampled(ray_local, heart_disease_dir):
    """Each silo announces its plan at start-up, so records of silos never sampled are in the report (spent 0)."""
    result = run(
        REPO / "scenarios" / "rpdp" / "heart_disease_three_levels.yaml",
        overrides=[f"data.path={heart_disease_dir}", "federation.rounds=1", "federation.local_steps=2",
                   "federation.client_rate=0.25", "seed=0"],
    )
    participants = set(result.rounds[0].report.participants)
    assert len(participants) < 4  # some silo sat the only round out
    privacy = result.privacy
    assert privacy["records"] == sum(info.num_records for info in result.placement)
    assert set(privacy["epsilon_per_silo"]) == {"0", "1", "2", "3"}
    idle = [info for info in result.placement if info.silo_id not in participants]
    assert all(privacy["epsilon_per_silo"][str(info.silo_id)] == 0.0 for info in idle)
    assert privacy["never_trained"] >= sum(info.num_records for info in idle)
    per_record = rebuild_accountant(result).per_record()
    assert per_record["budget"].size == privacy["records"]
    offsets = np.cumsum([0] + [info.num_records for info in sorted(result.placement, key=lambda i: i.silo_id)])
    for info in result.placement:
        (plan,) = info.events
        own = slice(offsets[info.silo_id], offsets[info.silo_id + 1])
        np.testing.assert_array_equal(per_record["budget"][own], plan.budgets)
        if info.silo_id not in participants:
            assert np.all(per_record["spent"][own] == 0) and np.all(per_record["rounds"][own] == 0)
    assert privacy["never_trained"] == int((per_record["rounds"] == 0).sum())
