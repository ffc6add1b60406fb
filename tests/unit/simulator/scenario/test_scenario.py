"""Scenario validation and the CLI's handling of bad input (exit code 2, one line, nothing written)."""
from __future__ import annotations


import pytest
import yaml

from privsilo.simulator.cli import main
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import apply_overrides, validate_scenario
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario


def test_defaults_fill_a_minimal_scenario():
    scenario = validate_scenario({"name": "x"})
    resolved = scenario.to_dict()
    assert resolved["data"] == {"dataset": "digits", "partition": "iid", "silos": 5, "alpha": None, "shards_per_silo": 2, "path": None, "users": None, "rotations": None, "max_records_per_silo": None}
    assert resolved["mechanism"] == {"name": "none"}
    assert resolved["federation"]["client_rate"] == 1.0


def test_mechanism_params_are_validated_and_resolved():
    scenario = validate_scenario(small_scenario(mechanism={"name": "dp_sgd", "noise_multiplier": 1.5}))
    mech = scenario.to_dict()["mechanism"]
    assert mech["name"] == "dp_sgd" and mech["noise_multiplier"] == 1.5 and mech["max_grad_norm"] == 1.0


@pytest.mark.parametrize(
    ("change", "field", "value_text"),
    [
        ({"federation": {"client_rate": -0.5}}, "federation.client_rate", "-0.5"),
        ({"federation": {"rounds": "ten"}}, "federation.rounds", "'ten'"),
        ({"federation": {"rounds": 3, "epochs": 2}}, "federation.epochs", "2"),
        ({"colour": "blue"}, "colour", "'blue'"),
        ({"data": {"dataset": "cifar", "silos": 3}}, "data.dataset", "'cifar'"),
        ({"data": {"dataset": "digits", "partition": "dirichlet", "silos": 3}}, "data.alpha", "null"),
        ({"data": {"dataset": "digits", "silos": 3, "path": "/no/such/dir"}}, "data.path", "'/no/such/dir'"),
        ({"model": {"name": "cnn"}, "data": {"dataset": "breast_cancer", "silos": 3}}, "model.name", "'cnn'"),
        ({"mechanism": {"name": "dp_sgd", "noise_multiplier": -1}}, "mechanism.noise_multiplier", "-1"),
        ({"mechanism": {"name": "dp_sgd", "delta": 1.5}}, "mechanism.delta", "1.5"),
        ({"mechanism": {"name": "dp_sgd", "sigma": 1}}, "mechanism.sigma", "1"),
        ({"mechanism": {"name": "magic"}}, "mechanism.name", "'magic'"),
        ({"resources": {"silo": {"num_gpus": -0.25}}}, "resources.silo.num_gpus", "-0.25"),
        ({"resources": {"silo": {"num_gpus": 1.5}}}, "resources.silo.num_gpus", "1.5"),
    ],
)
def test_bad_field_names_field_value_and_rule(change, field, value_text):
    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(**change))
    assert info.value.field == field
    message = str(info.value)
    assert message.startswith(field) and value_text in message
    assert info.value.allowed  # says what is allowed


def test_unknown_key_lists_allowed_keys():
    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(federation={"rounds": 2, "epochs": 2}))
    assert "client_rate" in info.value.allowed and "local_steps" in info.value.allowed


@pytest.mark.parametrize(
    ("change", "field", "keys"),
    [
        ({"data": {"users": {"count": 3, "recrods": "zipf"}}}, "data.users.recrods", "count, records, silos"),
        ({"attack": {"batchsize": 2}}, "attack.batchsize", "batch_size, iterations, line_search, method, num_cpus"),
    ],
)
def test_unknown_key_in_an_optional_block_lists_that_blocks_keys(change, field, keys):
    with pytest.raises(ScenarioError) as info:
        validate_scenario(small_scenario(**change))
    assert info.value.field == field
    assert keys in info.value.allowed and "none" not in info.value.allowed


def test_overrides_parse_yaml_values():
    raw = apply_overrides(small_scenario(), ["federation.lr=0.05", "protocol.secure_aggregation=true", "data.silos=4"])
    scenario = validate_scenario(raw)
    assert scenario.federation.lr == 0.05 and scenario.protocol.secure_aggregation and scenario.data.silos == 4
    with pytest.raises(ScenarioError) as info:
        apply_overrides(small_scenario(), ["federation.lr"])
    assert info.value.field == "--set"


@pytest.mark.parametrize(("setting", "hint"), [
    ("federation.rounds=1e3", "(YAML read 1e3 as text, not a number: write 1000)"),
    ("federation.rounds=1.5e1", "(YAML read 1.5e1 as text, not a number: write 15)"),
    ("federation.lr=1e-3", "(YAML read 1e-3 as text, not a number: write 0.001)"),
    ("federation.lr=1e-7", "(YAML read 1e-7 as text, not a number: write 1.0e-07)"),
])
def test_a_number_yaml_reads_as_text_is_named_with_what_to_write(setting, hint):
    with pytest.raises(ScenarioError) as info:
        validate_scenario(apply_overrides(small_scenario(), [setting]))
    assert str(info.value).endswith(hint), str(info.value)
    written = hint.rpartition("write ")[2].rstrip(")")
    key = setting.partition("=")[0]
    scenario = validate_scenario(apply_overrides(small_scenario(), [f"{key}={written}"]))  # what it says works
    assert float(getattr(scenario.federation, key.rpartition(".")[2])) == float(setting.partition("=")[2])
    with pytest.raises(ScenarioError) as info:
        validate_scenario(apply_overrides(small_scenario(), ["federation.rounds=ten"]))
    assert "YAML read" not in str(info.value)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["validate", "no-such-file.yaml"], "scenario"),
        (["validate", str(REPO / "scenarios" / "quickstart.yaml"), "--set", "data.silos=0"], "data.silos"),
        (["validate", str(REPO / "scenarios" / "quickstart.yaml"), "--set", "federation.batch_size=1.5"], "federation.batch_size"),
        (["data", "fetch", "imagenet"], "imagenet"),
    ],
)
def test_cli_user_errors_return_2(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_missing_heart_disease_files_are_a_user_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PRIVSILO_DATA_DIR", str(tmp_path))
    assert main(["validate", str(REPO / "scenarios" / "heart_disease_dpsgd.yaml")]) == 2
    err = capsys.readouterr().err
    assert "privsilo data fetch heart_disease" in err


def test_every_shipped_scenario_is_valid():
    scenarios = [p for p in sorted((REPO / "scenarios").rglob("*.yaml")) if not p.name.endswith("_grid.yaml")]
    assert len(scenarios) >= 5
    for path in scenarios:  # sweep grids (*_grid.yaml) are checked by the sweep tests
        validate_scenario(yaml.safe_load(path.read_text()))


def test_list_names_everything(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("dp_sgd", "none", "digits", "heart_disease", "mnist", "cnn", "dirichlet", "secure_aggregation"):
        assert name in out


def test_min_participants_defaults_to_two_with_secure_aggregation_and_is_checked(capsys):
    assert validate_scenario(small_scenario(protocol={"secure_aggregation": True})).protocol.min_participants == 2
    assert validate_scenario(small_scenario(protocol={"secure_aggregation": False})).protocol.min_participants == 1
    resolved = validate_scenario(small_scenario(protocol={"secure_aggregation": True, "min_participants": 3}))
    assert resolved.to_dict()["protocol"]["min_participants"] == 3
    secagg = str(REPO / "scenarios" / "quickstart_secagg.yaml")  # 5 silos
    for setting, allowed in [("protocol.min_participants=6", "must not exceed data.silos = 5"),
                             ("protocol.min_participants=1", "secure aggregation needs at least 2"),
                             ("protocol.min_participants=0", "greater than or equal to 1")]:
        assert main(["validate", secagg, "--set", setting]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"privsilo: error: protocol.min_participants: got {setting[-1]}; ")
        assert allowed in err
    assert main(["validate", secagg, "--set", "data.silos=1"]) == 2
    assert "protocol.min_participants: got 2; must not exceed data.silos = 1" in capsys.readouterr().err


def test_registry_names_match_the_mechanism_classes():
    from privsilo.mechanisms.registry import MECHANISM_NAMES, mechanism_class

    assert MECHANISM_NAMES == ("dp_fedavg", "dp_sgd", "dprivacy", "none", "pldp", "rpdp", "uldp")
    for name in MECHANISM_NAMES:
        assert mechanism_class(name).name == name
    with pytest.raises(KeyError):
        mechanism_class("magic")


@pytest.mark.parametrize("setting", ["federation.lr=.inf", "federation.lr=.nan", "mechanism.noise_multiplier=.inf"])
def test_infinite_or_nan_settings_are_refused_naming_the_field(setting):
    scenario = small_scenario(mechanism={"name": "dp_sgd", "noise_multiplier": 1.0, "clip_norm": 1.0})
    with pytest.raises(ScenarioError) as info:
        validate_scenario(apply_overrides(scenario, [setting]))
    message = str(info.value)
    assert setting.partition("=")[0] in message and "finite" in message, message
