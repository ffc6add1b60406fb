"""``privsilo audit``: canaries inside each mechanism (exact checks), the audit's power and its bounds against the
claimed epsilon on real runs, its files, and bad input. The statistics themselves: tests/unit/simulator/audit/test_audit_bounds.py."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.support.paths import REPO
from tests.support.scenarios import scenario_file_args, small_scenario
from privsilo.mechanisms.canaries import CanaryGradients, SiloCanaries, canary_directions
from privsilo.mechanisms.per_sample import noisy_sgd_steps
from privsilo.mechanisms.gdp import schedule_mu
from privsilo.simulator.audit.bounds import epsilon_ceiling
from privsilo.simulator.audit.canaries import CanaryPlan
from privsilo.simulator.audit.runner import audit
from privsilo.simulator.cli import main
from privsilo.simulator.scenario import validate_scenario


def _audited(mechanism: dict, *, canaries: int, data: dict | None = None, **blocks) -> dict:
    return small_scenario(data=data or {"dataset": "digits", "partition": "iid", "silos": 3}, model={"name": "mlp_128"},
                          mechanism=mechanism, audit={"canaries": canaries}, **blocks)


def test_canary_record_adds_its_clipped_gradient_to_a_dp_sgd_step():
    """No record sampled, no noise, one canary at rate 1: the step moves the model by exactly -lr/B * C u."""
    model = torch.nn.Linear(4, 3)
    before = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    hosted = SiloCanaries(ids=np.array([7]), seed=11)
    canaries = CanaryGradients.of(hosted, dimension=before.numel(), rates=1.0)
    noisy_sgd_steps(model, features=torch.zeros(5, 4), labels=torch.zeros(5, dtype=torch.long), rates=0.0, steps=1, max_grad_norm=0.5,
                    noise_multiplier=0.0, lr=0.2, generator=torch.Generator().manual_seed(0), divisor=10.0, canaries=canaries)
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    expected = -0.2 / 10.0 * 0.5 * canary_directions(11, np.array([7]), before.numel())[0]
    np.testing.assert_allclose((after - before).double().numpy(), expected, atol=1e-7)


def test_input_canaries_are_appended_to_their_host_silos_records():
    from privsilo.simulator.engine.actors import _silo_records
    from privsilo.simulator.engine.silo import SiloSpec

    scenario = validate_scenario(_audited({"name": "dp_sgd", "sampling_rate": 0.1}, canaries=50) | {"audit": {"canaries": 50, "kind": "input"}})
    plan = CanaryPlan.draw(scenario, feature_shape=(64,), num_classes=10)
    features, labels = np.zeros((100, 64), dtype=np.float32), np.zeros(100, dtype=np.int64)
    hosted = plan.by_silo()[1]
    records = _silo_records(SiloSpec(silo_id=1, record_ids=np.arange(10), seed=0, canaries=hosted), features, labels)
    np.testing.assert_array_equal(records["features"][10:], plan.features[hosted.ids])
    np.testing.assert_array_equal(records["labels"][10:], plan.labels[hosted.ids])
    assert records["labels"].dtype == labels.dtype and len(records["labels"]) == 10 + len(hosted)


def test_groups_too_small_to_bound_or_fit_report_none_instead_of_failing():
    from privsilo.simulator.audit.runner import _group

    one_included = _group(np.array([0.3, 0.1, 0.2]), np.array([True, False, False]), budget=None, claim=1.0, delta=1e-5, confidence=0.95,
                          mu_star=None)
    assert one_included.bound is not None and one_included.estimate is None
    assert one_included.to_json()["estimate"] is None
    single = _group(np.array([0.3]), np.array([True]), budget=5.0, claim=5.0, delta=1e-5, confidence=0.95, mu_star=1.0)
    assert single.bound is None and single.lower_bound == 0.0 and single.to_json()["empirical_epsilon_lower_bound"] == 0.0
    assert single.to_json()["gdp"] is None and single.gdp_testable() is None


def test_canary_plan_follows_the_audit_seed_and_scores_directions():
    scenario = validate_scenario(_audited({"name": "dp_sgd"}, canaries=200))
    first, second = (CanaryPlan.draw(scenario, feature_shape=(64,), num_classes=10) for _ in range(2))
    np.testing.assert_array_equal(first.included, second.included)
    np.testing.assert_array_equal(first.hosts, second.hosts)
    other = CanaryPlan.draw(validate_scenario(_audited({"name": "dp_sgd"}, canaries=200) | {"seed": 1}), feature_shape=(64,), num_classes=10)
    assert not np.array_equal(first.included, other.included)
    hosted = first.by_silo()
    assert sorted(np.concatenate([h.ids for h in hosted.values()]).tolist()) == np.flatnonzero(first.included).tolist()
    direction = canary_directions(first.seed, np.array([5]), 300)[0]
    scores = first.scores(3.0 * direction)
    assert scores[5] == pytest.approx(1.0) and np.abs(np.delete(scores, 5)).max() < 0.35


def test_canary_users_are_weighted_as_uldp_weighs_users():
    scenario = validate_scenario(_audited({"name": "uldp", "variant": "avg_w"}, canaries=40,
                                          data={"dataset": "digits", "partition": "iid", "silos": 3, "users": {"count": 100}},
                                          protocol={"secure_aggregation": True}))
    plan = CanaryPlan.draw(scenario, feature_shape=(64,), num_classes=10)
    np.testing.assert_allclose(plan.user_weights.sum(axis=0), 1.0)  # AVG-w: each user's weights sum to 1
    assert ((plan.user_weights > 0).sum(axis=0) >= 2).all()  # every canary user spans several silos


def test_no_noise_and_1000_canary_clients_give_a_bound_of_at_least_3(ray_local, tmp_path):
    assert main(["audit", "--no-progress", "--out", str(tmp_path / "out"), "--set", "model.name=mlp_128", "--set", "audit.canaries=1000",
                 *scenario_file_args(tmp_path, small_scenario(audit={}))]) == 0
    report = json.loads((tmp_path / "out" / "audit.json").read_text())
    assert report["empirical_epsilon_lower_bound"] >= 3.0
    assert report["claimed_epsilon"] is None and report["unit"] == "client" and report["canaries"] == 1000
    assert report["correct"] <= report["guesses"] and report["estimate"] > report["empirical_epsilon_lower_bound"]
    for name in ("audit.png", "metrics.csv", "summary.json", "model.pt"):
        assert (tmp_path / "out" / name).is_file()


@pytest.mark.parametrize("sigma", [0.3, 1.0])
def test_dp_sgd_bound_is_positive_and_below_the_claim(ray_local, sigma):
    report = audit(REPO / "scenarios" / "audits" / "dp_sgd_digits.yaml", overrides=[f"mechanism.noise_multiplier={sigma}"])
    assert 0.0 < report.lower_bound < report.claims["claimed_epsilon"]
    written = report.to_json()
    included = written["details"]["included"]  # the ceiling is that of this run's inclusion count, below 4.00's m/2
    assert written["view"] == "final_model" and written["ceiling"] == epsilon_ceiling(300, 1e-5, 0.95, included=included) <= 3.9992
    assert written["testable"] is False and "ceiling" in written["untestable_reason"]  # claims 14.2 and 105
    # the Gaussian-DP bound in mu, beside the mechanism's own mu* (3 silos x 3 rounds x 5 steps at q 0.5) and no epsilon
    assert 0.0 <= written["gdp_mu_lower_bound"] <= written["gdp_ceiling_mu"] and "Gaussian" in written["gdp_null"]
    assert written["gdp_mu_star"] == schedule_mu(((0.5, sigma, 15),))
    assert written["gdp_mu_over_mu_star"] == written["gdp_mu_lower_bound"] / written["gdp_mu_star"] < 1.0
    assert written["joint_confidence"] == pytest.approx(0.9) and "gdp_epsilon_lower_bound" not in written
    assert "mu*" in report.headline() and "Gaussian-DP at epsilon" not in report.headline()


@pytest.mark.slow
def test_quiet_dirac_canary_records_reach_the_noise_s_own_signal_to_noise_in_the_uploads(ray_local):
    """3,000 quiet Dirac canary records (docs/auditing.md#dirac-canaries) at sigma 1, q = 0.5, 15 steps: a canary
    drawn 7.5 times against noise sqrt(15) is a signal-to-noise of 1.94 (measured 1.92; Gaussian directions 1.74)."""
    report = audit(REPO / "scenarios" / "audits" / "dp_sgd_digits.yaml",
                   overrides=["audit.view=uploads", "audit.canaries=3000", "audit.canary_direction=quiet"])
    written = report.to_json()
    assert written["canary_direction"] == "quiet" and 1.8 < written["signal_to_noise"] < 2.1
    assert 2.5 < report.lower_bound < report.claims["claimed_epsilon"]


def test_input_canary_audit_writes_a_bound_below_the_claim(ray_local):
    scenario = _audited({"name": "dp_sgd", "noise_multiplier": 1.0, "sampling_rate": 0.1}, canaries=200)
    scenario["audit"]["kind"] = "input"
    report = audit(scenario)
    assert report.to_json()["kind"] == "input" and "loss" in report.to_json()["score"]
    assert 0.0 <= report.lower_bound < report.claims["claimed_epsilon"]


def test_uldp_canary_users_bound_is_positive_and_below_the_claim(ray_local):
    """Quiet Dirac canary users (docs/auditing.md#dirac-canaries): 3 rounds of noise sigma C against a signal of C
    each, so the ideal signal-to-noise is sqrt(3) / sigma, 3.46 at sigma 0.5; Gaussian directions reach 1.17 at
    sigma 1 (the real users' aligned sum drowns them)."""
    report = audit(REPO / "scenarios" / "audits" / "uldp_digits.yaml", overrides=["mechanism.noise_multiplier=0.5",
                                                                                  "audit.canary_direction=quiet"])
    written = report.to_json()
    assert report.unit == "user" and written["canary_direction"] == "quiet"
    assert 0.0 < report.lower_bound < report.claims["claimed_epsilon"]
    assert 2.5 < written["signal_to_noise"] < 4.5
    # every user in every round: one Gaussian mechanism, mu* = sqrt(3) / sigma exactly
    assert written["gdp_mu_star"] == pytest.approx(3**0.5 / 0.5, rel=1e-12) and "user-level" in written["gdp_mu_star_basis"]
    assert written["gdp_mu_lower_bound"] < written["gdp_mu_star"]


@pytest.mark.slow
def test_rpdp_is_audited_per_budget_level_and_no_level_beats_its_budget(ray_local):
    budgets = {"distribution": "three_levels", "levels": [0.5, 2.0, 8.0], "ratios": [0.34, 0.33, 0.33]}
    report = audit(_audited({"name": "rpdp", "budgets": budgets}, canaries=600))
    assert [group.budget for group in report.groups] == [0.5, 2.0, 8.0]
    assert sum(group.scores.size for group in report.groups) == 600
    for group in report.groups:  # the three levels split the confidence, so the largest bound keeps 0.95
        assert group.lower_bound <= group.budget and group.confidence == pytest.approx(1 - 0.05 / 3)
    levels = report.to_json()["levels"]
    assert [level["claimed_epsilon"] for level in levels] == [0.5, 2.0, 8.0]
    # each level's mu*: its planned rate in every local step of the host's rounds, growing with the budget
    stars = [level["gdp"]["mu_star"] for level in levels]
    assert 0.0 < stars[0] < stars[1] < stars[2] and all(level["gdp"]["mu_lower_bound"] < level["gdp"]["mu_star"] for level in levels)


@pytest.mark.parametrize("audit_block, mechanism, field", [
    ({"canaries": 1}, {"name": "dp_sgd"}, "audit.canaries"),
    ({"canaries": 5000, "kind": "input"}, {"name": "dp_sgd", "sampling_rate": 0.1}, "audit.canaries"),
    ({"unit": "household"}, {"name": "dp_sgd"}, "audit.unit"),
    ({"kind": "membership"}, {"name": "dp_sgd"}, "audit.kind"),
    ({"unit": "client"}, {"name": "dp_sgd"}, "audit.unit"),
    ({"confidence": 1.0}, {"name": "dp_sgd"}, "audit.confidence"),
    ({"kind": "input"}, {"name": "none"}, "audit.kind"),
    ({}, {"name": "rpdp", "budgets": {"distribution": "bounded_pareto"}}, "mechanism.budgets"),
    ({"kind": "input"}, {"name": "dp_sgd"}, "mechanism.sampling_rate"),
    ({"view": "server"}, {"name": "dp_sgd"}, "audit.view"),
    ({"view": "uploads", "kind": "input"}, {"name": "dp_sgd", "sampling_rate": 0.1}, "audit.view"),
    ({"view": "uploads", "unit": "client"}, {"name": "pldp"}, "audit.view"),
])
def test_bad_audit_input_exits_2_naming_the_field(tmp_path, capsys, audit_block, mechanism, field):
    code = main(["validate", *scenario_file_args(tmp_path, small_scenario(mechanism=mechanism, audit=audit_block))])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and field in err, err


def test_gradient_canary_records_are_not_limited_by_the_records_input_canaries_are(tmp_path, capsys):
    many = small_scenario(mechanism={"name": "dp_sgd", "sampling_rate": 0.1}, audit={"canaries": 5000})
    assert validate_scenario(many).audit.canaries == 5000  # more than the silos' records
    assert main(["validate", *scenario_file_args(tmp_path, {**many, "audit": {"canaries": 5000, "kind": "input"}})]) == 2
    assert "one input canary per training record" in capsys.readouterr().err


def test_the_uploads_view_is_refused_under_secure_aggregation_and_auto_falls_back(tmp_path, capsys):
    from privsilo.simulator.scenario import audit_view

    secure = small_scenario(mechanism={"name": "dp_sgd"}, audit={"view": "uploads"}, protocol={"secure_aggregation": True})
    assert main(["validate", *scenario_file_args(tmp_path, secure)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "audit.view" in line and "secure_aggregation" in line
    assert audit_view(validate_scenario({**secure, "audit": {"view": "auto"}})) == "final_model"
    assert audit_view(validate_scenario(small_scenario(mechanism={"name": "dp_sgd"}, audit={"view": "auto"}))) == "uploads"
    assert audit_view(validate_scenario(small_scenario(mechanism={"name": "dp_sgd"}, audit={}))) == "final_model"


def test_upload_sums_add_each_silos_model_changes_and_score_canaries_against_their_host():
    from privsilo.protocols.plain import PlainVector
    from privsilo.simulator.audit.runner import UploadSums

    class Inboxes:  # what the server's inbox held in two rounds: [weight x delta, weight] per silo
        def __init__(self):
            self.rounds = iter([{0: PlainVector(0, 0, np.array([2.0, 4.0, 2.0])), 1: PlainVector(1, 0, np.array([3.0, 0.0, 3.0]))},
                                {0: PlainVector(0, 1, np.array([1.0, 0.0, 1.0]))}])

        def server_inbox(self):
            return next(self.rounds)

    sums, federation = UploadSums(), Inboxes()
    sums(federation), sums(federation)
    np.testing.assert_allclose(sums.sums[0], [2.0, 2.0])
    np.testing.assert_allclose(sums.sums[1], [1.0, 0.0])
    scenario = validate_scenario(_audited({"name": "dp_sgd"}, canaries=20))
    plan = CanaryPlan.draw(scenario, feature_shape=(64,), num_classes=10)
    host = int(plan.hosts[3])
    changes = {silo: canary_directions(plan.seed, np.array([3]), 500)[0] if silo == host else np.ones(500) for silo in range(3)}
    scores = plan.scores_by_host(changes)
    assert scores[3] == pytest.approx(1.0)
    hosted_elsewhere = plan.hosts != host
    np.testing.assert_allclose(scores[hosted_elsewhere], plan.scores(np.ones(500))[hosted_elsewhere])


def test_audit_of_uldp_with_private_weighting_is_refused(tmp_path, capsys):
    users = {"dataset": "digits", "partition": "iid", "silos": 3, "users": {"count": 100}}
    scenario = small_scenario(data=users, mechanism={"name": "uldp", "variant": "avg_w", "weighting": "private"}, audit={},
                              protocol={"secure_aggregation": True})
    assert main(["validate", *scenario_file_args(tmp_path, scenario)]) == 2
    assert "mechanism.weighting" in capsys.readouterr().err

