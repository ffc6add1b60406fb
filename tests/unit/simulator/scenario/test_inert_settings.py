"""Settings that do nothing are refused when set explicitly (exit 2, one line naming the field and why), never
because of a default: mechanism parameters of another variant (the shipped uldp scenarios and grids carry none),
secure aggregation's keys without secure aggregation, an audit block in a plain run; and too few records for the
silos is refused when the scenario is validated, not when the run partitions them."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from privsilo.simulator.cli import main
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.experiments.sweep import load_grid
from privsilo.simulator.scenario import validate_scenario
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario

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


@pytest.mark.parametrize(("key", "value"), [("neighbours", 2), ("neighbours", "auto"), ("threshold", 2),
                                            ("corrupt_fraction", 0.2), ("dropout_rate", 0.3)])
def test_a_secure_aggregation_key_without_secure_aggregation_is_refused(key, value):
    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(protocol={"secure_aggregation": False, key: value}))
    assert info.value.field == f"protocol.{key}" and "does nothing without secure aggregation" in info.value.allowed
    assert validate_scenario(small_scenario(protocol={"secure_aggregation": True, key: value})).protocol.secure_aggregation


def test_secure_aggregation_keys_at_their_defaults_are_accepted_without_it():
    """A resolved scenario (summary.json's config, a sweep's journal) writes them out at their defaults."""
    plain = validate_scenario(small_scenario(protocol={"secure_aggregation": False, "neighbours": None, "threshold": None}))
    assert validate_scenario(plain.to_dict()) == plain


def test_an_audit_block_in_a_plain_run_is_refused_before_ray_starts(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(audit={"canaries": 10})))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("privsilo: error: audit: got {") and "privsilo audit" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_too_few_records_for_the_silos_is_refused_when_validated():
    def four_records():
        x = np.zeros((4, 3), dtype=np.float32)
        return (x, np.array([0, 1, 0, 1])), (x, np.array([0, 1, 0, 1]))

    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(data={"dataset": "digits", "silos": 5}), dataset=four_records)
    assert info.value.field == "data.silos" and "4 training records" in info.value.allowed and "at most 4 silos" in info.value.allowed
    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(data={"dataset": "digits", "silos": 3, "partition": "shards"}), dataset=four_records)
    assert "2 shards" in info.value.allowed and "at most 2 silos" in info.value.allowed
