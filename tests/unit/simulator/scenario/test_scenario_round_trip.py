"""A validated scenario's written form and its changed copies (issue 29): ``validate(to_dict(s))`` accepts every
shipped scenario and every cell of every shipped grid and gives ``s`` back; changing a block of a validated
scenario (the address, an audit block, ``--set`` overrides) keeps the user's settings explicit and the defaults
defaults, so a mechanism's refusal of settings given where they do nothing (ULDP's) never fires on a default."""
from __future__ import annotations

import pytest

from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.experiments.sweep import load_grid
from privsilo.simulator.scenario import resolve_scenario, validate_scenario, with_attack_block, with_changes
from tests.support.paths import REPO

SCENARIOS = REPO / "scenarios"
FILES = sorted(str(p.relative_to(SCENARIOS)) for p in SCENARIOS.rglob("*.yaml") if not p.name.endswith("_grid.yaml"))
GRIDS = sorted(str(p.relative_to(SCENARIOS)) for p in SCENARIOS.rglob("*_grid.yaml"))
ADDRESS = {"ray": {"address": "127.0.0.1:6390"}}


def assert_round_trips(scenario):
    again = validate_scenario(scenario.to_dict())
    assert again == scenario and again.to_dict() == scenario.to_dict()
    explicit = validate_scenario(scenario.explicit_dict())
    assert explicit == scenario and explicit.explicit_dict() == scenario.explicit_dict()
    moved = with_changes(scenario, ADDRESS)  # what `--address` does
    assert moved.ray.address == "127.0.0.1:6390"
    assert moved.model_copy(update={"ray": scenario.ray}) == scenario


def test_every_shipped_scenario_file_and_grid_is_covered():
    assert len(FILES) >= 15 and len(GRIDS) >= 10


@pytest.mark.parametrize("name", FILES)
def test_a_shipped_scenario_round_trips(name):
    assert_round_trips(resolve_scenario(SCENARIOS / name))


@pytest.mark.parametrize("name", GRIDS)
def test_every_cell_of_a_shipped_grid_round_trips(name):
    grid = load_grid(SCENARIOS / name)
    cells = list(grid.combinations())
    assert cells
    for labels in cells:
        assert_round_trips(grid.scenario(labels, grid.seeds[0]))


@pytest.mark.parametrize("name", ["uldp/heart_disease.yaml", "uldp/mnist.yaml", "audits/uldp_digits.yaml"])
def test_uldp_scenarios_take_an_address_an_audit_block_and_overrides(name):
    scenario = resolve_scenario(SCENARIOS / name)
    assert "naive_noise" not in scenario.to_dict()["mechanism"]  # inert under avg_w, at its default: not written
    assert with_changes(scenario, ADDRESS).mechanism == scenario.mechanism
    assert with_changes(scenario, {"audit": {"canaries": 10}}).audit.canaries == 10
    assert resolve_scenario(scenario, ["federation.rounds=1"]).federation.rounds == 1


def test_an_inert_setting_the_user_gave_is_still_refused_after_a_change():
    scenario = resolve_scenario(SCENARIOS / "uldp/heart_disease.yaml")
    with pytest.raises(ScenarioError) as refused:
        resolve_scenario(scenario, ["mechanism.naive_noise=safe"])
    assert refused.value.field == "mechanism.naive_noise"


def test_a_change_keeps_explicit_settings_explicit_and_defaults_unset():
    scenario = resolve_scenario(SCENARIOS / "quickstart.yaml")
    changed = with_changes(scenario, ADDRESS)
    assert changed.explicit_dict() == {**scenario.explicit_dict(), "ray": {**scenario.explicit_dict().get("ray", {}), **ADDRESS["ray"]}}
    assert "audit" not in changed.explicit_dict() and "pool_idle_timeout" not in changed.explicit_dict()["ray"]
    attacked = with_attack_block(scenario, address="127.0.0.1:6390")
    assert attacked.ray.address == "127.0.0.1:6390" and attacked.explicit_dict()["attack"] == {}
