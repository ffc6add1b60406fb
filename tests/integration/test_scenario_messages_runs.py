"""privsilo.run takes log as the command line does (the messages themselves, without Ray:
tests/unit/simulator/scenario/test_scenario_messages.py)."""
from __future__ import annotations

import numpy as np
import pytest
from torch import nn

import privsilo
from privsilo.simulator.errors import ScenarioError
from tests.support.datasets import tabular
from tests.support.scenarios import small_scenario


def _tabular_mlp(*, feature_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(feature_shape)), num_classes))


def test_privsilo_run_takes_log_as_the_command_line_does(ray_local, tmp_path):
    scenario = small_scenario(federation={"rounds": 2, "client_rate": 1.0, "local_steps": 2, "batch_size": 8, "lr": 0.1})
    result = privsilo.run(scenario, model=_tabular_mlp, dataset=tabular, out_dir=tmp_path / "out", log=["tensorboard"])
    assert len(result.rounds) == 2
    assert list((tmp_path / "out" / "tensorboard").iterdir()), "no TensorBoard events written"
    with pytest.raises(ScenarioError, match="allowed: tensorboard"):
        privsilo.run(scenario, model=_tabular_mlp, dataset=tabular, log=["wandb"])
