"""Checkpoints and ``--resume``: a run continued from a checkpoint ends exactly as the run never interrupted.

One test kills ``privsilo run`` for real (SIGKILL to the driver and every Ray process it started, at a random
round) and resumes it from the command line; the others take the checkpoint a complete run wrote mid-way (what a
killed run leaves) and resume from it in this process, for every mechanism, with client sampling and crashes.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from privsilo.simulator.run_dir.checkpoint import CHECKPOINT_FILE, CheckpointError, read_checkpoint, write_checkpoint
from privsilo.simulator.engine import run
from privsilo.simulator.errors import ScenarioError
from tests.support.cli import start_privsilo
from tests.support.outputs import metrics_without_wall_times as _metrics
from tests.support.processes import command_line, kill_session
from privsilo.simulator.runtime.processes import descendants
from tests.support.scenarios import small_scenario

ROUNDS = 5
MECHANISMS = {
    "none": ({"name": "none"}, {}),
    "dp_sgd": ({"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5}, {}),
    "rpdp": ({"name": "rpdp", "budgets": {"distribution": "three_levels"}, "delta": 1e-3}, {}),
    "pldp": ({"name": "pldp", "ranges": "tau1", "budgets": [0.2, 0.5, 1.0, 2.0], "centers": [0.0, 0.1, -0.1, 0.05]}, {}),
    "dprivacy": ({"name": "dprivacy", "hypotheses": 2, "nu": 5.0, "radius": 1.0, "local_epochs": 1},
                 {"data": {"dataset": "digits", "partition": "iid", "silos": 4, "rotations": [0, 180]}}),
    "dp_sgd+secure_aggregation": ({"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5},
                                  {"protocol": {"secure_aggregation": True, "neighbours": 2}}),
    "uldp+secure_aggregation": ({"name": "uldp", "variant": "avg", "noise_multiplier": 5.0, "max_grad_norm": 0.5, "delta": 1e-5},
                                {"data": {"dataset": "digits", "partition": "iid", "silos": 4, "users": {"count": 40}},
                                 "protocol": {"secure_aggregation": True},
                                 "federation": {"rounds": ROUNDS, "client_rate": 1.0, "local_steps": 3, "batch_size": 32, "lr": 0.1}}),
}


def _scenario(mechanism: dict, **blocks) -> dict:
    scenario = small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 4},
        federation={"rounds": ROUNDS, "client_rate": 0.8, "local_steps": 3, "batch_size": 32, "lr": 0.1},
        mechanism=mechanism,
        faults={"crashes": [{"silo": 1, "round": 2, "at": "after_upload"}, {"silo": 3, "round": 4, "at": "before_upload"}]},
        # one silo per worker on any machine, so a `privsilo run` (its own Ray) packs as this process's session does
        resources={"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}, "silos_per_actor": 1},
    )
    scenario.update(blocks)
    return scenario


TIMES = ("seconds", "protocol_seconds")


def _rounds(result) -> list[dict]:
    """Every round's report and epsilon, without timings, as full reprs (NaN equals NaN; events may hold arrays)."""
    with np.printoptions(threshold=sys.maxsize):
        return [repr(({k: v for k, v in vars(r.report).items() if k not in TIMES}, r.epsilon)) for r in result.rounds]


def _same_results(a, b) -> None:
    assert _rounds(a) == _rounds(b)
    assert a.model_state.keys() == b.model_state.keys()
    assert all(torch.equal(a.model_state[k], b.model_state[k]) for k in a.model_state)
    assert a.privacy == b.privacy


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_resumed_run_equals_the_uninterrupted_one(ray_local, tmp_path, name):
    mechanism, blocks = MECHANISMS[name]
    scenario = _scenario(mechanism, checkpoint={"every": 3}, **blocks)
    whole = run(scenario, checkpoint_dir=tmp_path / "ck")  # its last checkpoint is after round 3
    assert len(read_checkpoint(tmp_path / "ck")["records"]) == 3
    resumed = run(scenario, checkpoint_dir=tmp_path / "ck", resume=True)
    assert resumed.resumed_from_round == 3
    _same_results(whole, resumed)


def _wait_for_checkpoint(process: subprocess.Popen, directory: Path, *, rounds: int) -> None:
    deadline = time.monotonic() + 300
    while True:
        try:
            if len(read_checkpoint(directory)["records"]) >= rounds:
                return
        except CheckpointError:
            pass
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.02)


def test_sigkill_then_resume_from_the_command_line(ray_local, tmp_path):
    """The driver and its Ray processes die together at a random round (after a crash, with client sampling);
    ``--resume`` then ends with the same metrics.csv (but wall times) and a bit-identical model.pt."""
    scenario = _scenario(MECHANISMS["dp_sgd"][0], seed=11, protocol={"secure_aggregation": True})
    scenario["federation"]["rounds"] = 6
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario))
    run(scenario_file, out_dir=tmp_path / "reference")
    kill_after = int(np.random.default_rng().integers(1, 6))  # any round before the last
    killed = tmp_path / "killed"
    process = start_privsilo(scenario_file, killed)
    _wait_for_checkpoint(process, killed, rounds=kill_after)
    kill_session(process.pid)
    process.wait(timeout=60)
    assert not (killed / "summary.json").exists()
    (killed / ".privsilo-output").unlink()  # as a privsilo without markers left it: its checkpoint says whose it is
    refused = start_privsilo(scenario_file, killed)
    output = refused.communicate(timeout=120)[0]
    assert refused.returncode == 2 and f"privsilo resume {killed}" in output
    resumed = start_privsilo(None, killed, "--resume")  # the scenario comes from the checkpoint
    output = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, output
    _assert_finished_as(killed, tmp_path / "reference")
    assert (killed / ".privsilo-output").is_file()


def test_resume_refuses_another_scenario(ray_local, tmp_path):
    scenario = _scenario({"name": "none"}, checkpoint={"every": 1}, faults={})
    scenario["federation"]["rounds"] = 1
    run(scenario, checkpoint_dir=tmp_path)
    for key, value, field in [("seed", 1, "seed"), ("federation", {**scenario["federation"], "rounds": 2}, "federation.rounds"),
                              ("mechanism", MECHANISMS["dp_sgd"][0], "mechanism.name"),
                              ("federation", {**scenario["federation"], "proximal_mu": 0.1}, "federation.proximal_mu")]:
        with pytest.raises(ScenarioError) as error:
            run({**scenario, key: value}, checkpoint_dir=tmp_path, resume=True)
        assert str(error.value).startswith(field) and "None" not in str(error.value)  # a default is named by its value
    data = (tmp_path / CHECKPOINT_FILE).read_bytes()
    (tmp_path / CHECKPOINT_FILE).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one bit flipped
    with pytest.raises(CheckpointError, match="corrupt or half-written.*not loaded"):
        run(scenario, checkpoint_dir=tmp_path, resume=True)
    (tmp_path / CHECKPOINT_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or half-written"):
        read_checkpoint(tmp_path)


def test_resume_refuses_another_version_before_unpickling(tmp_path, monkeypatch):
    import privsilo.simulator.run_dir.checkpoint as checkpoint

    write_checkpoint(tmp_path, {"state": 1}, scenario={"seed": 0})
    monkeypatch.setattr(checkpoint, "privsilo_version", lambda: "9.9.9")
    monkeypatch.setattr(checkpoint.pickle, "loads", lambda _: pytest.fail("unpickled before the version check"))
    with pytest.raises(ScenarioError, match="written by privsilo .* this is 9.9.9"):
        read_checkpoint(tmp_path, scenario={"seed": 0})


def test_a_checkpoint_that_does_not_unpickle_is_one_line(tmp_path, monkeypatch):
    import privsilo.simulator.run_dir.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint.pickle, "dumps", lambda *_, **__: b"\x80\x05cnowhere\nGone\n.")
    write_checkpoint(tmp_path, {}, scenario={})
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="could not be loaded"):
        read_checkpoint(tmp_path, scenario={})


def test_resume_needs_a_checkpoint(tmp_path):
    from privsilo.simulator.cli import main

    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(small_scenario()))
    assert main(["run", str(scenario_file), "--resume"]) == 2
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "empty"), "--resume"]) == 2
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        read_checkpoint(tmp_path / "empty")


def test_sweep_resumes_an_unfinished_run_from_its_checkpoint(ray_local, tmp_path, monkeypatch):
    """A grid's run interrupted after round 2 (its checkpoint in the sweep's journal) continues from round 3 when
    the sweep is run again, and the sweep's table equals that of a sweep never interrupted."""
    import privsilo.simulator.engine as engine
    from privsilo.simulator.experiments.journal import SweepJournal, scenario_key
    from privsilo.simulator.experiments.sweep import load_grid, sweep

    base = _scenario(MECHANISMS["dp_sgd"][0], faults={})
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    grid_path = tmp_path / "grid.yaml"
    grid_path.write_text(yaml.safe_dump({"name": "resumable", "base": "base.yaml", "seeds": [0],
                                         "axes": {"federation.lr": {"slow": 0.05, "fast": 0.1}}}))
    uninterrupted = sweep(grid_path, out_dir=tmp_path / "whole")
    grid = load_grid(grid_path)
    scenario = grid.scenario({"federation.lr": "fast"}, 0)
    run(scenario.to_dict() | {"checkpoint": {"every": 2}},
        checkpoint_dir=SweepJournal(tmp_path / "resumed").checkpoint_directory(scenario_key(scenario)))
    resumed_from = []
    original = engine.run

    def watched(*args, **kwargs):
        result = original(*args, **kwargs)
        resumed_from.append(result.resumed_from_round)
        return result

    monkeypatch.setattr(engine, "run", watched)
    resumed = sweep(grid_path, out_dir=tmp_path / "resumed")
    assert sorted(resumed_from, key=str) == [4, None]  # the interrupted run resumed after its last checkpoint
    assert [r.accuracy for r in resumed.runs] == [r.accuracy for r in uninterrupted.runs]
    assert not SweepJournal(tmp_path / "resumed").path.exists()


SESSION = re.compile(rb"session_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_\d+")


def _descendants(root: int) -> dict[int, bytes]:
    """``{pid: command line}`` of every process below ``root`` (those that still have one)."""
    return {pid: command for pid in descendants(root) if (command := command_line(pid))}


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_driver_sigkill_leaves_no_ray_and_resume_dir_ends_as_the_uninterrupted_run(ray_local, tmp_path):
    """SIGKILL to the driver alone (as the OOM killer sends it): within 30 s no process of the Ray it started is
    left (found by its pids and by its session's name, never touching another Ray on the machine). Then
    ``privsilo resume DIR``, with neither the scenario file nor the ``--set`` the run was started with, ends with
    the results of the run never interrupted."""
    from privsilo.simulator.runtime.watchdog import session_pattern, session_processes

    scenario = _scenario(MECHANISMS["dp_sgd"][0], seed=5, faults={})
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario))
    overrides = ["--set", "federation.rounds=8", "--set", "federation.lr=0.05"]
    run(scenario_file, overrides=["federation.rounds=8", "federation.lr=0.05"], out_dir=tmp_path / "reference")
    killed = tmp_path / "killed"
    process = start_privsilo(scenario_file, killed, *overrides)
    ray_processes, sessions = {}, set()
    try:
        _wait_for_checkpoint(process, killed, rounds=1)
        ray_processes = _descendants(process.pid)
        sessions = {match.decode() for command in ray_processes.values() for match in SESSION.findall(command)}
        assert len(sessions) == 1 and len(ray_processes) >= 3, ray_processes
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        deadline = time.monotonic() + 30
        while True:
            left = {pid for pid in ray_processes if _running(pid)} | set(session_processes(session_pattern(process.pid), since=0))
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert not left, {pid: ray_processes.get(pid) for pid in left}
    finally:
        for pid in {*ray_processes, *session_processes(session_pattern(process.pid), since=0)}:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
    assert not (killed / "summary.json").exists()
    resumed = start_privsilo(None, killed, command=("resume",))
    output = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, output
    _assert_finished_as(killed, tmp_path / "reference")


def _assert_finished_as(resumed: Path, reference: Path) -> None:
    """The resumed run finished with the uninterrupted run's metrics and model, and no checkpoint left."""
    assert _metrics(resumed / "metrics.csv") == _metrics(reference / "metrics.csv")
    model, expected = torch.load(resumed / "model.pt"), torch.load(reference / "model.pt")
    assert all(torch.equal(model[k], expected[k]) for k in expected)
    assert not (resumed / CHECKPOINT_FILE).exists()
