"""Run outputs: all-or-nothing directories, which plots are drawn, and the result line."""
import math

import pytest

from privsilo.simulator.engine import RoundRecord, RunResult
from privsilo.simulator.engine.messages import RoundReport
from privsilo.simulator.run_dir.writers import atomic_directory, metrics_figure, privacy_line, write_run
from privsilo.simulator.scenario import validate_scenario
from tests.support.scenarios import small_scenario


def test_atomic_directory_replaces_only_on_success(tmp_path):
    target = tmp_path / "run"
    with atomic_directory(target, kind="sweep") as staging:
        (staging / "a.txt").write_text("first")
    assert (target / "a.txt").read_text() == "first"
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(target, kind="sweep") as staging:
            (staging / "a.txt").write_text("half")
            raise KeyboardInterrupt
    assert (target / "a.txt").read_text() == "first"
    with atomic_directory(target, kind="sweep") as staging:
        (staging / "b.txt").write_text("second")
    assert sorted(p.name for p in target.iterdir()) == [".privsilo-output", "b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def _result(*, epsilons, train_losses, privacy=None):
    """A run's result as the engine returns it (no actors needed to test what is written from it)."""
    rounds = tuple(
        RoundRecord(
            report=RoundReport(round_index=i, participants=(0, 1), loss=1.0 / (i + 1), accuracy=0.5, events={},
                               train_loss=loss, seconds=0.1),
            epsilon=eps,
            training_seconds=0.1,
            accounting_seconds=0.01,
        )
        for i, (eps, loss) in enumerate(zip(epsilons, train_losses))
    )
    privacy = privacy or {"guarantee": "none", "epsilon": None, "delta": None}
    return RunResult(scenario=validate_scenario(small_scenario()), rounds=rounds, privacy=privacy, timing={},
                     placement=(), model_state={})


def test_train_loss_is_in_the_legend_only_where_the_mechanism_reveals_it():
    dp = metrics_figure(_result(epsilons=[0.5, 0.8], train_losses=[math.nan, math.nan]))
    assert [t.get_text() for t in dp.axes[0].get_legend().get_texts()] == ["test loss"]
    fedavg = metrics_figure(_result(epsilons=[None, None], train_losses=[0.9, 0.7]))
    assert [t.get_text() for t in fedavg.axes[0].get_legend().get_texts()] == ["test loss", "mean local train loss"]


def test_privacy_plot_only_for_runs_with_an_epsilon(tmp_path):
    write_run(_result(epsilons=[None, None], train_losses=[0.9, 0.7]), tmp_path / "none")
    assert sorted(p.name for p in (tmp_path / "none").iterdir()) == [".privsilo-output", "metrics.csv", "metrics.png", "model.pt", "summary.json"]
    privacy = {"guarantee": "record-level", "epsilon": 0.8, "delta": 1e-5}
    write_run(_result(epsilons=[0.5, 0.8], train_losses=[math.nan] * 2, privacy=privacy), tmp_path / "dp")
    assert (tmp_path / "dp" / "privacy.png").stat().st_size > 0


def test_result_line_claims_an_epsilon_only_where_a_guarantee_covers_the_run():
    assert privacy_line({"guarantee": "none", "epsilon": None, "delta": None}) == "no DP guarantee"
    assert privacy_line({"epsilon": 1.25, "delta": 1e-5}) == "epsilon = 1.25 at delta = 1e-05"
    rpdp = {"epsilon": 4.967, "delta": 1e-3, "records": 486, "never_trained": 344}
    assert privacy_line(rpdp) == "epsilon = 4.967 at delta = 0.001; 344 of 486 records never trained"
    paper = {"guarantee": "not covered: expected_batch normalisation", "epsilon": None, "delta": 1e-3, "records": 486,
             "never_trained": 344, "paper_accounting": {"epsilon": 4.973}}
    line = privacy_line(paper)
    assert "epsilon =" not in line and "4.97" not in line
    assert line.startswith("no epsilon (not covered: expected_batch normalisation") and "344 of 486" in line
