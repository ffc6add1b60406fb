"""Dirac canaries (``audit.canary_direction: dirac | quiet``): a coordinate of the model per canary. Their exact
effect inside DP-SGD, their scores, the choice of quiet coordinates, bad input, and the bounds' soundness on a
Gaussian mechanism whose quiet coordinates were chosen from the data (tests/unit/simulator/audit/test_audit_bounds.py's style)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from privsilo.mechanisms.canaries import CanaryGradients, SiloCanaries, canary_directions
from privsilo.mechanisms.per_sample import noisy_sgd_steps
from privsilo.simulator.audit.bounds import fdp_one_run_audit, one_run_audit
from privsilo.simulator.audit.canaries import CanaryPlan
from privsilo.simulator.audit.directions import DIRAC_STREAM, _initial_model, dirac_coordinates, gradient_activity, quietest_coordinates
from privsilo.simulator.cli import main
from privsilo.simulator.data.sources import scenario_dataset
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from tests.support.audit_soundness import CONFIDENCE, REPEATS, SEED, assert_sound, reference_gaussian_epsilon
from tests.support.scenarios import small_scenario


def _dirac_scenario(direction: str, canaries: int = 200) -> dict:
    return small_scenario(data={"dataset": "digits", "partition": "iid", "silos": 3}, model={"name": "mlp_128"},
                          mechanism={"name": "dp_sgd"}, audit={"canaries": canaries, "canary_direction": direction})


def test_a_dirac_canary_record_moves_only_its_coordinate_in_a_dp_sgd_step():
    """No record sampled, no noise, one canary at rate 1: the step moves coordinate j by exactly -lr/B * C."""
    model = torch.nn.Linear(4, 3)
    before = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    canaries = CanaryGradients.of(SiloCanaries(ids=np.array([7]), seed=11, coordinates=np.array([9])), dimension=before.numel(), rates=1.0)
    noisy_sgd_steps(model, features=torch.zeros(5, 4), labels=torch.zeros(5, dtype=torch.long), rates=0.0, steps=1, max_grad_norm=0.5,
                    noise_multiplier=0.0, lr=0.2, generator=torch.Generator().manual_seed(0), divisor=10.0, canaries=canaries)
    expected = np.zeros(before.numel())
    expected[9] = -0.2 / 10.0 * 0.5
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    np.testing.assert_allclose((after - before).double().numpy(), expected, atol=1e-7)


def test_dirac_plans_hand_each_silo_its_coordinates_and_score_the_change_there():
    plan = CanaryPlan.draw(validate_scenario(_dirac_scenario("dirac")), feature_shape=(64,), num_classes=10)
    plan = CanaryPlan(seed=plan.seed, included=plan.included, hosts=plan.hosts, coordinates=np.arange(200)[::-1] * 3)
    for hosted in plan.by_silo().values():
        np.testing.assert_array_equal(hosted.coordinates, plan.coordinates[hosted.ids])
        rows = hosted.directions(600)
        assert (rows.sum(axis=1) == 1).all() and (rows[np.arange(len(hosted)), hosted.coordinates] == 1).all()
    change = np.random.default_rng(0).standard_normal(600)
    np.testing.assert_allclose(plan.scores(change), change[plan.coordinates] / np.linalg.norm(change))


def test_quiet_coordinates_are_distinct_and_the_ones_the_data_moves_least():
    scenario = validate_scenario(_dirac_scenario("quiet", canaries=3000))
    dataset = scenario_dataset(scenario.data, seed=scenario.seed)
    quiet = dirac_coordinates(scenario, dataset, seed=5)
    activity = gradient_activity(_initial_model(scenario, dataset), dataset, np.random.default_rng([5, DIRAC_STREAM]))
    assert np.unique(quiet).size == 3000 and activity.size == 9610
    assert activity[quiet].max() <= np.delete(activity, quiet).min()
    assert activity[quiet].mean() < 0.01 * activity.mean()  # blank pixels' weights, ReLUs off on every record
    randomly = dirac_coordinates(validate_scenario(_dirac_scenario("dirac", canaries=3000)), dataset, seed=5)
    assert np.unique(randomly).size == 3000 and activity[randomly].mean() > 0.5 * activity.mean()
    np.testing.assert_array_equal(randomly, dirac_coordinates(validate_scenario(_dirac_scenario("dirac", canaries=3000)), dataset, seed=5))
    assert dirac_coordinates(validate_scenario(_dirac_scenario("gaussian")), dataset, seed=5) is None


def test_more_dirac_canaries_than_parameters_are_refused_naming_the_field():
    scenario = validate_scenario(_dirac_scenario("dirac", canaries=9611))  # mlp_128 on digits: 9,610 parameters
    with pytest.raises(ScenarioError, match="audit.canaries.*at most 9610"):
        dirac_coordinates(scenario, scenario_dataset(scenario.data, seed=0), seed=1)


@pytest.mark.parametrize("audit_block, mechanism, expected", [
    ({"canary_direction": "sparse"}, {"name": "dp_sgd"}, "'gaussian', 'dirac' or 'quiet'"),
    ({"canary_direction": "quiet", "kind": "input"}, {"name": "dp_sgd", "sampling_rate": 0.1}, "input canaries are records"),
])
def test_bad_canary_direction_exits_2_in_one_line(tmp_path, capsys, audit_block, mechanism, expected):
    import yaml

    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(small_scenario(mechanism=mechanism, audit=audit_block)))
    code = main(["validate", str(path)])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "audit.canary_direction" in line and expected in line, line


# --- soundness: quiet coordinates chosen from the data, then a Gaussian mechanism per canary ------------------


def _dirac_gaussian_mechanism(rng: np.random.Generator, data: np.ndarray, coordinates: np.ndarray, mu: float):
    """The model change ``data + mu sum_{included} e_{j_i} + N(0, I)``: each canary's inclusion moves only its own
    coordinate, by mu against unit noise, so the mechanism is mu-GDP per canary. Scored as the audit scores Dirac
    canaries (the change's coordinate over its norm)."""
    included = rng.random(coordinates.size) < 0.5
    change = data + rng.standard_normal(data.size)
    change[coordinates[included]] += mu
    plan = CanaryPlan(seed=0, included=included, hosts=np.zeros(coordinates.size, dtype=int), coordinates=coordinates)
    return plan.scores(change), included


@pytest.mark.parametrize("mu", [1.0, 2.0])
def test_bounds_of_quiet_dirac_canaries_are_sound(mu):
    """Coordinates chosen from the data, independently of the coins, keep both bounds sound (measured: 0 of 200
    above the truth for either bound at mu 1 and 2; mean counting bounds 1.50 and 3.11, mean mu 0.51 and 1.05)."""
    rng = np.random.default_rng([SEED, 23, int(mu)])
    data = rng.standard_cauchy(3000) * (rng.random(3000) < 0.6)  # heavy-tailed "real" updates, 40 % of coordinates blank
    coordinates = quietest_coordinates(np.abs(data), 1000, rng)
    draws = [_dirac_gaussian_mechanism(rng, data, coordinates, mu) for _ in range(REPEATS)]
    true_epsilon = reference_gaussian_epsilon(mu, 1e-5)
    assert_sound([one_run_audit(scores, included, 1e-5, CONFIDENCE).epsilon for scores, included in draws], true_epsilon)
    gdp = [fdp_one_run_audit(scores, included, CONFIDENCE) for scores, included in draws]
    assert_sound([bound.mu for bound in gdp], mu)
    assert np.mean([bound.mu for bound in gdp]) > 0.4 * mu  # and not vacuous


def test_quiet_dirac_canaries_see_through_data_that_drowns_gaussian_directions():
    """Large aligned updates (the real users' sum under ULDP): a Gaussian direction picks up |data| / sqrt(d) of
    them, a quiet coordinate none; the same mechanism, mu = 2, gives the quiet canaries the larger bound."""
    rng = np.random.default_rng([SEED, 29])
    data = np.where(rng.random(3000) < 0.6, 6.0, 0.0)  # |data| / sqrt(d) = 4.6, above the canaries' signal of 2
    coordinates = quietest_coordinates(np.abs(data), 1000, rng)
    quiet = one_run_audit(*_dirac_gaussian_mechanism(rng, data, coordinates, 2.0), 1e-5, CONFIDENCE).epsilon
    included = rng.random(1000) < 0.5
    gaussian_plan = CanaryPlan(seed=3, included=included, hosts=np.zeros(1000, dtype=int))
    directions = canary_directions(3, np.arange(1000), 3000)
    change = data + 2.0 * directions[included].sum(axis=0) + rng.standard_normal(3000)
    drowned = one_run_audit(gaussian_plan.scores(change), included, 1e-5, CONFIDENCE).epsilon
    assert quiet > drowned + 1.0
