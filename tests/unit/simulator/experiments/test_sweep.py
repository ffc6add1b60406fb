"""``privsilo sweep``: a tiny rPDP grid on digits writes every file, honours seeds, and bad grids exit 2."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from privsilo.simulator.cli import EXIT_USER_ERROR, main
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.experiments.sweep import SweepResult, SweepRun, load_grid, read_runs_csv, summarise, sweep, write_runs_csv, write_table, write_tables
from tests.support.grids import write_grid
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"base": "missing.yaml"}, "grid.base"),
        ({"axes": {"mechanism.variant": {}}}, "grid.axes.mechanism.variant"),
        ({"axes": {"federation.roundz": {"a": 1}}}, "federation.roundz"),
        ({"axes": {"mechanism.variant": {"bad": "nope"}}}, "mechanism.variant"),
    ],
)
def test_bad_grid_exits_2_naming_the_field(tmp_path, capsys, changes, field):
    grid_path = write_grid(tmp_path, **changes)
    with pytest.raises(ScenarioError):  # every combination is checked before Ray starts
        sweep(grid_path, out_dir=tmp_path / "out")
    assert main(["sweep", str(grid_path), "--out", str(tmp_path / "out")]) == EXIT_USER_ERROR
    message = capsys.readouterr().err.strip()
    assert message.startswith(f"privsilo: error: {field}:") and "\n" not in message
    assert not (tmp_path / "out").exists()


def test_shipped_grids_load_and_every_combination_validates():
    grids = sorted((REPO / "scenarios").rglob("*_grid.yaml"))
    assert len(grids) == 12
    for path in grids:
        grid = load_grid(path)
        scenarios = [grid.scenario(labels, seed) for labels in grid.combinations() for seed in grid.seeds]
        if path.parent.name == "rpdp":  # 3 budget distributions x 4 variants
            assert len(scenarios) == 12 * len(grid.seeds)
        elif path.parent.name == "pldp":  # 3 ranges x 3 budgets x 2 perturb modes, the paper's 100 clients
            assert len(scenarios) == 18 * len(grid.seeds)
            assert {(s.mechanism.name, s.data.silos, s.federation.client_rate) for s in scenarios} == {("pldp", 100, 0.7)}
        elif path.parent.name == "attacks":  # every defence, each run attacked
            assert {s.mechanism.name for s in scenarios} == {"none", "dp_sgd", "rpdp", "dprivacy"} and all(s.attack for s in scenarios)
            assert sum(s.protocol.secure_aggregation for s in scenarios) == len(grid.seeds)
        elif path.parent.name == "dprivacy":  # nu x k, personalised runs
            assert {s.mechanism.name for s in scenarios} == {"dprivacy"}
        else:  # uldp: every variant of the axis, each with its own user-level accounting
            assert {s.mechanism.name for s in scenarios} == {"uldp"} and len(scenarios) >= 3 * len(grid.seeds)


def _sweep_dir(directory: Path, runs: list[SweepRun], axes: list[str]) -> Path:
    directory.mkdir()
    write_runs_csv(runs, axes=axes, path=directory / "runs.csv")
    return directory


def test_merge_pools_seeds_of_several_sweeps(tmp_path, capsys):
    axes = ["mechanism.variant"]
    first = _sweep_dir(tmp_path / "a", [SweepRun({"mechanism.variant": "rPDP"}, 0, 0.6, 1.0, 2.0, 0.9, 3.0),
                                        SweepRun({"mechanism.variant": "PrivacyFree"}, 0, 0.9, 0.5, None, None, 1.0)], axes)
    second = _sweep_dir(tmp_path / "b", [SweepRun({"mechanism.variant": "rPDP"}, 1, 0.8, 1.0, 4.0, 1.0, 3.0)], axes)
    assert main(["merge", str(first), str(second), "--out", str(tmp_path / "m")]) == 0
    with (tmp_path / "m" / "table.csv").open() as handle:
        table = {row["mechanism.variant"]: row for row in csv.DictReader(handle)}
    assert float(table["rPDP"]["accuracy_mean"]) == pytest.approx(0.7)
    assert float(table["rPDP"]["accuracy_std"]) == pytest.approx(0.1)
    assert float(table["rPDP"]["epsilon_mean"]) == pytest.approx(3.0)
    assert table["rPDP"]["seeds"] == "2" and table["PrivacyFree"]["epsilon_mean"] == ""
    assert (tmp_path / "m" / "comparison.png").stat().st_size > 0
    capsys.readouterr()

    assert main(["merge", str(first), str(first), "--out", str(tmp_path / "dup")]) == EXIT_USER_ERROR
    assert "seed 0 is in both" in capsys.readouterr().err
    other = _sweep_dir(tmp_path / "c", [SweepRun({"mechanism.budgets": "x"}, 2, 0.5, 1.0, 1.0, 1.0, 1.0)], ["mechanism.budgets"])
    assert main(["merge", str(first), str(other), "--out", str(tmp_path / "axes")]) == EXIT_USER_ERROR
    assert "axes" in capsys.readouterr().err
    assert not (tmp_path / "dup").exists() and not (tmp_path / "axes").exists()


@pytest.mark.parametrize(("option", "field"), [("x", "--seeds"), ("1,a", "--seeds"), ("0", "--seeds"), ("1,1", "--seeds")])
def test_bad_seed_option_exits_2(tmp_path, capsys, option, field):
    grid_path = write_grid(tmp_path)
    assert main(["sweep", str(grid_path), "--seeds", option, "--out", str(tmp_path / "out")]) == EXIT_USER_ERROR
    assert capsys.readouterr().err.startswith(f"privsilo: error: {field}: got ")


def test_seed_option_lists_seeds(tmp_path):
    from privsilo.simulator.cli.experiments import _seed_option

    assert _seed_option("3") == 3 and _seed_option("1,2") == [1, 2] and _seed_option("2,") == [2]
    assert load_grid(write_grid(tmp_path), seeds=_seed_option("2,")).seeds == (2,)


def test_validate_checks_every_combination_of_a_grid(tmp_path, capsys):
    grid_path = write_grid(tmp_path)
    assert main(["validate", str(grid_path)]) == 0
    assert "valid grid (4 runs: 2 combinations x 2 seeds)" in capsys.readouterr().out
    (tmp_path / "one_seed").mkdir()
    assert main(["validate", str(write_grid(tmp_path / "one_seed", seeds=[0]))]) == 0
    assert "valid grid (2 runs: 2 combinations x 1 seed)" in capsys.readouterr().out
    bad = write_grid(tmp_path, axes={"mechanism.variant": {"bad": "nope"}})
    assert main(["validate", str(bad)]) == EXIT_USER_ERROR
    assert capsys.readouterr().err.startswith("privsilo: error: mechanism.variant:")


def test_only_keeps_the_selected_labels(tmp_path, capsys):
    grid_path = write_grid(tmp_path)
    grid = load_grid(grid_path, only=["mechanism.variant=Minimum"])
    assert list(grid.combinations()) == [{"mechanism.budgets": "ThreeLevels", "mechanism.variant": "Minimum"}]
    for bad in ("mechanism.variant=Nope", "federation.rounds=1", "mechanism.variant="):
        assert main(["validate", str(grid_path)]) == 0  # the grid itself is fine
        assert main(["sweep", str(grid_path), "--only", bad, "--out", str(tmp_path / "o")]) == EXIT_USER_ERROR
        assert capsys.readouterr().err.splitlines()[-1].startswith("privsilo: error: --only: ")
    assert not (tmp_path / "o").exists()


def test_one_seed_shows_no_spread_and_counts_are_singular(tmp_path):
    axes = ["mechanism.variant"]
    runs = [SweepRun({"mechanism.variant": "rPDP"}, 0, 0.7, 1.0, 4.9, 0.99, 3.0),
            SweepRun({"mechanism.variant": "PrivacyFree"}, 0, 0.73, 0.6, None, None, 2.0)]
    table = list(summarise(runs, axes=axes))
    assert [row["accuracy_std"] for row in table] == [None, None]
    write_table(table, axes=axes, csv_path=tmp_path / "table.csv", md_path=tmp_path / "table.md")
    markdown = (tmp_path / "table.md").read_text()
    assert "±" not in markdown
    assert markdown.splitlines()[0] == "| mechanism.variant | accuracy | seeds | epsilon (mean) |"
    assert "| rPDP | 0.7000 | 1 | 4.9 |" in markdown and "| PrivacyFree | 0.7300 | 1 | - |" in markdown
    grid = load_grid(write_grid(tmp_path), seeds=[0], only=["mechanism.variant=rPDP"])
    result = SweepResult(grid=grid, runs=tuple(runs[:1]), table=tuple(table[:1]), out_dir=tmp_path)
    assert result.headline() == "tiny: 1 run (1 combination x 1 seed)"
    two = SweepResult(grid=load_grid(write_grid(tmp_path)), runs=tuple(runs * 2), table=tuple(table), out_dir=tmp_path, resumed=2)
    assert two.headline() == "tiny: 4 runs (2 combinations x 2 seeds; 2 taken from the unfinished sweep's journal)"


def test_a_settings_axis_sets_several_keys_and_attacked_runs_get_attack_columns(tmp_path):
    base = small_scenario(model={"name": "lenet"}, attack={"iterations": 5})
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    defences = {"none": {"mechanism.name": "none"}, "secagg": {"protocol.secure_aggregation": True, "protocol.min_participants": 3},
                "dp": {"mechanism": {"name": "dp_sgd", "noise_multiplier": 0.1}}}
    grid_path = tmp_path / "grid.yaml"
    grid_path.write_text(yaml.safe_dump({"name": "defences", "base": "base.yaml", "axes": {"defence": defences}}))
    grid = load_grid(grid_path)
    secagg, dp = grid.scenario({"defence": "secagg"}, 0), grid.scenario({"defence": "dp"}, 0)
    assert secagg.protocol.secure_aggregation and secagg.protocol.min_participants == 3 and secagg.mechanism.name == "none"
    assert dp.mechanism.name == "dp_sgd" and dp.mechanism.params.noise_multiplier == 0.1 and dp.attack.iterations == 5

    runs = [SweepRun(labels={"defence": label}, seed=0, accuracy=acc, loss=1.0, epsilon=eps, max_spent_over_budget=None, seconds=1.0,
                     attack_psnr=psnr, attack_ssim=ssim, attack_success_rate=rate)
            for label, acc, eps, psnr, ssim, rate in (("none", 0.9, None, 80.0, 1.0, 1.0), ("dp", 0.5, 3.0, 8.0, 0.1, 0.0),
                                                      ("secagg", 0.9, None, None, None, 0.0))]
    table = list(summarise(runs, axes=["defence"]))
    assert table[0]["attack_psnr_mean"] == 80.0 and table[2]["attack_psnr_mean"] is None
    write_tables(tmp_path, runs=runs, table=table, axes=["defence"], title="defences")
    assert read_runs_csv(tmp_path / "runs.csv") == (["defence"], runs)
    assert "| none | 0.9000 | 1 | - | 80.0 | 1.000 | 100% |" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "attack_vs_accuracy.png").stat().st_size > 0


def test_a_settings_axis_label_must_set_scenario_keys(tmp_path):
    grid_path = write_grid(tmp_path, axes={"defence": {"odd": {"colour": "blue"}}})
    with pytest.raises(ScenarioError) as error:
        load_grid(grid_path)
    assert error.value.field == "grid.axes.defence.odd"
