"""Mechanism parameters that do nothing in the chosen variant are refused when set explicitly (exit 2, one line
naming the field and why), never because of a default; the shipped uldp scenarios and grids carry none."""
from __future__ import annotations

import pytest
import yaml

from simulator.cli import main
from simulator.errors import ScenarioError
from simulator.experiments.sweep import load_grid
from simulator.scenario import validate_scenario
from tests.conftest import REPO, small_scenario

USERS = {"count": 30, "records": "zipf", "silos": "zipf"}


def _uldp(**mechanism) -> dict:
    secure = mechanism.get("variant", "avg_w") in ("avg", "avg_w", "sgd")
    return small_scenario(data={"dataset": "digits", "silos": 3, "users": USERS}, protocol={"secure_aggregation": secure},
                          mechanism={"name": "uldp", **mechanism})


@pytest.mark.parametrize(
    ("mechanism", "field", "why"),
    [
        ({"variant": "avg", "naive_noise": "paper"}, "mechanism.naive_noise", "variant is 'avg'"),
        ({"variant": "avg_w", "group_k": "median"}, "mechanism.group_k", "variant is 'avg_w'"),
        ({"variant": "naive", "group_k": 3}, "mechanism.group_k", "variant is 'naive'"),
        ({"variant": "sgd", "group_rounding": "paper"}, "mechanism.group_rounding", "variant is 'sgd'"),
        ({"variant": "avg_w", "paillier_key_bits": 2048}, "mechanism.paillier_key_bits", "weighting is 'plain'"),
        ({"variant": "avg_w", "weighting": "plain", "max_records_per_user": 100}, "mechanism.max_records_per_user", "weighting is 'plain'"),
    ],
)
def test_a_setting_that_does_nothing_is_refused_by_name(mechanism, field, why, tmp_path, capsys):
    with pytest.raises(ScenarioError) as info:
        validate_scenario(_uldp(**mechanism))
    assert info.value.field == field and "does nothing" in info.value.allowed and why in info.value.allowed
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_uldp(**mechanism)))
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"privsilo: error: {field}: got "), lines


@pytest.mark.parametrize(
    "mechanism",
    [
        {"variant": "avg_w"},  # every default, group_k and the Paillier settings among them
        {"variant": "naive", "naive_noise": "paper"},
        {"variant": "group", "group_k": 3, "group_rounding": "paper"},
        {"variant": "avg_w", "weighting": "private", "paillier_key_bits": 2048, "max_records_per_user": 1000},
        {"variant": "avg", "group_k": None},  # null: the setting's own "none", e.g. to clear a base scenario's
    ],
)
def test_settings_that_act_and_defaults_are_accepted(mechanism):
    assert validate_scenario(_uldp(**mechanism)).mechanism.name == "uldp"


@pytest.mark.parametrize("name", ["heart_disease_grid.yaml", "heart_disease_sampling_grid.yaml", "mnist_grid.yaml", "mnist_sampling_grid.yaml"])
def test_every_cell_of_the_shipped_uldp_grids_validates(name):
    """group_k only in the GROUP cells (without loading the data: mnist needs a download)."""
    grid = load_grid(REPO / "scenarios" / "uldp" / name)
    for labels in grid.combinations():
        params = grid.scenario(labels, grid.seeds[0]).mechanism.params
        assert (params.group_k is not None) == (params.variant == "group")
