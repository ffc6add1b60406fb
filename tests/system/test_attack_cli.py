"""``privsilo attack`` end to end: a bad attack block exits 2 before anything starts, and a tiny real attack through
the Ray actors and tasks writes attack.json and its plots."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from privsilo.simulator.cli import main
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario
from tests.support.cli import IMPORT_PROBE, one_error_line, privsilo

SEED_KEYS = {"target_silo", "seed", "psnr", "ssim", "mse", "label_accuracy", "success", "restarts", "seconds", "final_loss", "labels", "images"}


def _scenario_file(tmp_path, **attack):
    scenario = small_scenario(
        model={"name": "lenet"},
        federation={"rounds": 2, "client_rate": 1.0, "local_steps": 1, "batch_size": 1, "lr": 0.1},
        attack={"method": "dlg", "target_silo": 1, "round": 2, "iterations": 10, "seeds": 2, **attack},
    )
    path = tmp_path / "attack.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return path


def test_attack_on_a_silo_that_does_not_exist_exits_2_naming_the_field(tmp_path):
    proc = privsilo("attack", str(_scenario_file(tmp_path)), "--set", "attack.target_silo=5", "--out", str(tmp_path / "out"))
    line = one_error_line(proc)
    assert line.startswith("privsilo: error: attack.target_silo: got 5; no such silo: data.silos = 3")
    assert not (tmp_path / "out").exists()


def test_attack_on_dprivacy_epochs_it_cannot_replay_exits_2_naming_the_field(tmp_path):
    mechanism = "mechanism={name: dprivacy, nu: 0.001, radius: 0.05, local_epochs: 2}"
    proc = privsilo("attack", str(_scenario_file(tmp_path)), "--set", mechanism, "--out", str(tmp_path / "out"))
    line = one_error_line(proc)
    assert line.startswith("privsilo: error: mechanism.local_epochs: got 2;") and "data.max_records_per_silo = 1" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["validate", "attack"])
def test_a_batch_beyond_the_target_silos_records_exits_2_before_ray_or_torch_load(command, tmp_path):
    """The partition the run would draw (silo 1 of 3 holds a third of digits' training records) is known from the
    data alone: validate refuses the batch, and attack before it starts Ray."""
    args = [command, str(_scenario_file(tmp_path)), "--set", "attack.batch_size=1000"]
    proc = subprocess.run([sys.executable, "-c", IMPORT_PROBE, *args], capture_output=True, text=True, cwd=REPO, timeout=120)
    result = json.loads(proc.stdout.strip().splitlines()[-1])  # the probe prints main's exit code and the imports
    (line,) = proc.stderr.strip().splitlines()
    assert result["code"] == 2 and line.startswith("privsilo: error: attack.batch_size: got 1000; larger than silo 1's ")
    assert line.endswith(" records") and not set(result["modules"]) & {"ray", "torch"}


def test_a_tiny_attack_writes_its_report_and_plots(ray_local, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["attack", str(_scenario_file(tmp_path)), "--out", str(out), "--no-progress"]) == 0
    assert "2/2 successful at 30 dB" in capsys.readouterr().out
    report = json.loads((out / "attack.json").read_text())
    assert report["round"] == 2 and report["participants"] == [0, 1, 2] and report["success_rate"] == 1.0
    assert [s["seed"] for s in report["seeds"]] == [0, 1] and all(SEED_KEYS <= set(s) for s in report["seeds"])
    assert all(s["psnr"] > 30 and s["label_accuracy"] == 1.0 for s in report["seeds"])
    assert len(report["targets"]["1"]["record_ids"]) == 1 and report["config"]["attack"]["iterations"] == 10
    for name in ("attack.png", "loss.png"):
        assert (out / name).stat().st_size > 0


def test_an_attack_starts_its_tasks_when_the_captured_runs_actors_took_most_cpus(tmp_path):
    """The run's warm actors (3 x 0.6 CPU here) are stopped before the 1-CPU attack tasks wait for a core."""
    path = _scenario_file(tmp_path)
    proc = privsilo("attack", str(path), "--set", "resources.silo.num_cpus=0.6", "--set", "attack.seeds=1",
                    "--out", str(tmp_path / "out"), "--no-progress", timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "out" / "attack.json").read_text())["seeds"][0]["psnr"] > 30
