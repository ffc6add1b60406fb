"""Users' own models and datasets (examples/wine_csv): from YAML import strings through the CLI, as objects through
``privsilo.run``, as names registered by an installed package; each with dp_sgd and secure aggregation on real
Ray actors. Bad models and datasets exit 2 with one line naming the field (checked through ``main``, the function
``python -m privsilo.simulator.cli`` calls, in this process; one case also in a fresh interpreter)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import privsilo
from privsilo.simulator.cli import main
from examples.wine_csv.data import load_wine_csv
from examples.wine_csv.model import tabular_mlp
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import load_scenario_file, validate_scenario
from tests.support.outputs import metrics_without_wall_times as _metrics
from tests.support.paths import REPO
from tests.support.cli import one_error_line, privsilo as privsilo_cli

EXAMPLE = REPO / "examples" / "wine_csv" / "scenario.yaml"
SHORT = ["federation.rounds=3"]


def _validate(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess:
    """``privsilo validate ARGS`` through the CLI's ``main`` in this process (what ``python -m privsilo.simulator.cli``
    runs, without a new interpreter's second of imports per case), as the CompletedProcess ``one_error_line`` reads."""
    capsys.readouterr()
    code = main(["validate", *args])
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["privsilo", "validate", *args], code, captured.out, captured.err)


def _same_model(a: Path, b: Path) -> bool:
    first, second = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_example_runs_from_yaml_and_as_objects_with_the_same_results(ray_local, tmp_path) -> None:
    """The CLI with import strings and ``privsilo.run`` with the same callables as objects: one seed, one result."""
    cli = privsilo_cli("run", str(EXAMPLE), "--out", str(tmp_path / "cli"), "--no-progress", *[f"--set={s}" for s in SHORT], timeout=600)
    assert cli.returncode == 0, cli.stderr[-3000:]
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert summary["config"]["model"] == {"name": "examples.wine_csv.model:tabular_mlp", "kwargs": {"hidden": 32}}
    assert summary["config"]["protocol"]["secure_aggregation"] is True
    assert summary["privacy"]["epsilon"] > 0 and summary["final"]["accuracy"] > 0.5

    result = privsilo.run(
        EXAMPLE, model=tabular_mlp, model_kwargs={"hidden": 32}, dataset=load_wine_csv, dataset_kwargs={"test_fraction": 0.25},
        overrides=SHORT, out_dir=tmp_path / "api",
    )
    assert result.privacy["epsilon"] == summary["privacy"]["epsilon"]
    assert _metrics(tmp_path / "api") == _metrics(tmp_path / "cli")
    assert _same_model(tmp_path / "api", tmp_path / "cli")


def test_arrays_and_a_model_defined_in_the_script(ray_local, tmp_path) -> None:
    """A dataset given as arrays and a model factory defined here (pickled to the actors by value or reference)."""
    arrays = load_wine_csv(seed=0)

    def small_model(*, feature_shape, num_classes):
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(feature_shape)), num_classes))

    result = privsilo.run(EXAMPLE, model=small_model, dataset=arrays, overrides=SHORT)
    assert len(result.rounds) == 3 and result.privacy["epsilon"] > 0
    assert result.scenario.data.dataset == "user:dataset" and result.final["accuracy"] > 0.3


def _write_distribution(root: Path) -> None:
    """An installed package's metadata registering the example's loader and model under privsilo's groups."""
    info = root / "wine_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: wine-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[privsilo.datasets]\nwine = examples.wine_csv.data:load_wine_csv\n\n"
        "[privsilo.models]\nwine_mlp = examples.wine_csv.model:tabular_mlp\n"
    )


def test_registered_names_are_listed_and_usable(tmp_path) -> None:
    _write_distribution(tmp_path / "site")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    listed = privsilo_cli("list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "wine " in listed.stdout and "wine_mlp " in listed.stdout and "privsilo.datasets" in listed.stdout
    scenario = yaml.safe_load(EXAMPLE.read_text())
    scenario["data"] = {**scenario["data"], "dataset": "wine"}
    scenario["model"] = {"name": "wine_mlp", "kwargs": {"hidden": 8}}
    path = tmp_path / "registered.yaml"
    path.write_text(yaml.safe_dump(scenario))
    valid = privsilo_cli("validate", str(path), env=env)
    assert valid.returncode == 0, valid.stderr
    assert "dp_sgd on wine" in valid.stdout


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        (["model.name=no_such_model"], "model.name", "package.module:factory"),
        (["model.name=examples.wine_csv.missing:f"], "model.name", "cannot import module"),
        (["model.name=examples.wine_csv.model:nothing"], "model.name", "has no attribute"),
        (["model.name=examples.wine_csv.data:load_wine_csv", "model.kwargs={}"], "model.name", "not a torch.nn.Module"),
        (["model.name=examples.wine_csv.model:tabular_mlp_with_batchnorm"], "model.name", "batch normalisation"),
        (["model.kwargs={width: 3}"], "model.name", "unexpected keyword"),
        (["model.name=mlp"], "model.kwargs", "takes no kwargs"),
        (["data.dataset=digits"], "data.kwargs", "takes no kwargs"),
        (["data.kwargs={test_fraction: 1.5}"], "data.dataset", "failed when loaded"),
        (["data.kwargs={label: alcohol}"], "data.dataset", "integer class labels"),
        (["data.path=/tmp"], "data.path", "data.kwargs"),
        (["data.dataset=no.such.module:load"], "data.dataset", "cannot import module"),
    ],
)
def test_bad_models_and_datasets_name_the_field(overrides, field, words, capsys) -> None:
    proc = _validate(capsys, str(EXAMPLE), *[f"--set={s}" for s in overrides])
    line = one_error_line(proc)
    assert line.startswith(f"privsilo: error: {field}: "), line
    assert words in line, line


def test_a_bad_model_exits_2_with_one_line_from_a_fresh_interpreter() -> None:
    """The cases above run ``main`` in this process; one of them again as a command in a new interpreter (exit
    status 2, nothing but the one line on stderr)."""
    proc = privsilo_cli("validate", str(EXAMPLE), "--set=model.name=examples.wine_csv.model:nothing")
    line = one_error_line(proc)
    assert line.startswith("privsilo: error: model.name: ") and "has no attribute" in line, line


class _MixesRecords(torch.nn.Module):
    """No parameters, no buffers: centres each feature over the batch (functional batch normalisation)."""

    def forward(self, x):
        return x - x.mean(dim=0, keepdim=True)


def mixing_mlp(*, feature_shape, num_classes):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(feature_shape)), 8), _MixesRecords(),
                               torch.nn.ReLU(), torch.nn.Linear(8, num_classes))


class _GlobalDropout(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x, 0.5, training=self.training)


def global_dropout_mlp(*, feature_shape, num_classes):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(feature_shape)), 8), _GlobalDropout(),
                               torch.nn.Linear(8, num_classes))


def frozen_mlp(*, feature_shape, num_classes):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(feature_shape)), 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, num_classes))
    model[1].requires_grad_(False)
    return model


@pytest.mark.parametrize(
    ("factory", "mechanism", "words"),
    [
        ("mixing_mlp", "{name: dp_sgd}", "mixes the records"),
        ("mixing_mlp", "{name: uldp}", "mixes the records"),
        ("global_dropout_mlp", "{name: none}", "different outputs for the same inputs"),
        ("frozen_mlp", "{name: none}", "frozen parameters"),
    ],
)
def test_models_that_break_clipping_or_determinism_are_refused(factory, mechanism, words, capsys) -> None:
    """Found by a review: parameterless layers that mix records passed a check by layer type, and functional
    dropout or frozen parameters failed only inside the run."""
    extra = ["--set=data.users={count: 20}"] if "uldp" in mechanism else []
    proc = _validate(capsys, str(EXAMPLE), f"--set=model.name=tests.system.test_user_code:{factory}", "--set=model.kwargs={}",
                     f"--set=mechanism={mechanism}", *extra)
    line = one_error_line(proc)
    assert line.startswith("privsilo: error: model.name: ") and words in line, line


def test_batchnorm_is_fine_without_per_record_clipping(capsys) -> None:
    proc = _validate(capsys, str(EXAMPLE), "--set=model.name=examples.wine_csv.model:tabular_mlp_with_batchnorm",
                     "--set=mechanism={name: none}", "--set=protocol.secure_aggregation=false")
    assert proc.returncode == 0, proc.stderr


def test_a_model_whose_outputs_do_not_match_the_classes_is_refused() -> None:
    with pytest.raises(ScenarioError, match=r"model\.name.*outputs shaped \(2, 5\).*needs \(batch, 3\)"):
        privsilo.run(EXAMPLE, model=lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(13, 5)))


def test_loader_shapes_are_checked() -> None:
    (x, y), (xt, yt) = load_wine_csv()
    for bad, words in (
        (((x, y[:-1]), (xt, yt)), "y_train must have shape"),
        (((x, y), (xt[:, :5], yt)), "train records have shape"),
        (((x, y + 0.5), (xt, yt)), "integer class labels"),
        (((x, y), (xt, np.where(yt == 2, 9, yt))), "y_test holds labels that no training record has (9); y_train's labels are 0, 1, 2"),
        ((x, y), "must give ((x_train, y_train), (x_test, y_test))"),
    ):
        with pytest.raises(ScenarioError, match=r"data\.dataset") as error:
            privsilo.run(EXAMPLE, dataset=bad)
        assert words in str(error.value)


def test_the_example_reads_no_file_outside_the_repository() -> None:
    assert Path(sys.modules["examples.wine_csv.data"].CSV).resolve().is_relative_to(REPO)


def test_the_uldp_example_of_the_docs_validates_on_the_wine_data():
    """docs/your-own-work.md's ``uldp`` block, over the wine example's scenario, is a scenario privsilo accepts."""
    import re

    page = (REPO / "docs" / "your-own-work.md").read_text()
    section = page.split("## User-level DP")[1].split("\n## ")[0]
    block = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    raw = load_scenario_file(REPO / "examples" / "wine_csv" / "scenario.yaml")
    raw = {**raw, **block, "data": {**raw["data"], **block["data"]}}
    scenario = validate_scenario(raw)
    assert scenario.mechanism.name == "uldp" and scenario.data.users.count == 40
