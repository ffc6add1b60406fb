"""Which of a user's code a cluster run ships with its Ray job (``ray.ship_code``; privsilo.simulator.runtime.shipping): the module
file or top-level package of the model and dataset, per mode; never privsilo's own, a built-in, or a script's
``__main__``. The upload itself and leased workers importing it are in tests/system/test_cluster_runs.py."""
from __future__ import annotations

import sys

import pytest

from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from privsilo.simulator.runtime.shipping import code_to_ship
from tests.support.scenarios import small_scenario

MODEL = '''
import torch


def build(*, feature_shape, num_classes):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, num_classes))
'''


@pytest.fixture
def own_code(tmp_path, monkeypatch):
    """A working directory holding a module ``shipme_model.py`` and a package ``shipme_pkg`` with a model each."""
    (tmp_path / "shipme_model.py").write_text(MODEL)
    (tmp_path / "shipme_pkg").mkdir()
    (tmp_path / "shipme_pkg" / "__init__.py").write_text("")
    (tmp_path / "shipme_pkg" / "models.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("shipme_")]:
        del sys.modules[name]


def _scenario(model: str, ship_code: str = "auto"):
    return validate_scenario(small_scenario(model={"name": model}, ray={"ship_code": ship_code}))


def test_auto_ships_the_module_file_or_the_top_level_package_found_in_the_working_directory(own_code):
    assert code_to_ship([_scenario("shipme_model:build")]) == (str(own_code / "shipme_model.py"),)
    assert code_to_ship([_scenario("shipme_pkg.models:build")]) == (str(own_code / "shipme_pkg"),)
    both = code_to_ship([_scenario("shipme_model:build"), _scenario("shipme_pkg.models:build")])
    assert both == tuple(sorted([str(own_code / "shipme_model.py"), str(own_code / "shipme_pkg")]))


def test_never_ships_nothing_and_auto_leaves_code_outside_the_working_directory(own_code, tmp_path_factory, monkeypatch):
    assert code_to_ship([_scenario("shipme_model:build", "never")]) == ()
    scenario = _scenario("shipme_model:build", "always")
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))  # the module is now outside the working directory
    assert code_to_ship([scenario]) == (str(own_code / "shipme_model.py"),)
    assert code_to_ship([scenario.model_copy(update={"ray": scenario.ray.model_copy(update={"ship_code": "auto"})})]) == ()


def test_built_in_models_and_datasets_ship_nothing():
    assert code_to_ship([validate_scenario(small_scenario(ray={"ship_code": "always"}))]) == ()


def test_a_mode_that_does_not_exist_is_refused_by_name():
    with pytest.raises(ScenarioError) as refused:
        validate_scenario(small_scenario(ray={"ship_code": "sometimes"}))
    assert refused.value.field == "ray.ship_code" and "'auto', 'always' or 'never'" in str(refused.value)
