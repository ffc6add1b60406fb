"""Every mechanism family, an attack, an audit and a user's own model and dataset through ``privsilo ... --address``
against a head that ``ray start --head`` started from another directory, as a user runs them (issue 29): one short
round each, exit code 0 and sane outputs. Then the warm pool on that head: a user's module reaches leased workers
(and where it cannot, one line and exit 2), and idle actors give up the GPU share a run of another shape needs.
Last, a node lost mid-run (a cluster of its own: a head and ``ray start --address`` nodes, killed by process group).

The head is one process tree of this module's, on free ports, with 4 CPUs and 1 logical GPU (no device: actors
with a GPU share train on the CPU); at the end only that process group is signalled
(``os.killpg`` on the group ``ray start`` leads): no command that stops every Ray node on the machine is run."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.support.cli import privsilo
from tests.support.paths import REPO
from tests.support.processes import free_ports
from tests.support.scenarios import small_scenario

START_ATTEMPTS = 5
FAST = {"rounds": 1, "client_rate": 1.0, "local_steps": 2, "batch_size": 16, "lr": 0.1}
USERS = {"dataset": "digits", "partition": "iid", "silos": 3, "users": {"count": 30}}
ULDP = {"name": "uldp", "variant": "avg_w", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "global_lr": 2.0}
CASES = {  # name -> (command, scenario blocks)
    "none": ("run", {}),
    "dp_sgd": ("run", {"mechanism": {"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0}}),
    "rpdp": ("run", {"mechanism": {"name": "rpdp", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-3, "budgets": {
        "distribution": "three_levels", "levels": [0.1, 1.0, 5.0], "ratios": [0.7, 0.2, 0.1]}}}),
    "uldp": ("run", {"data": USERS, "mechanism": ULDP, "protocol": {"secure_aggregation": True}}),
    "uldp_private_weighting": ("run", {"data": USERS, "protocol": {"secure_aggregation": True}, "mechanism": {
        **ULDP, "weighting": "private", "paillier_key_bits": 2048, "max_records_per_user": 1000}}),
    "pldp": ("run", {"mechanism": {"name": "pldp", "ranges": "tau1", "budgets": [0.2, 0.5, 1.0], "centers": [0.0, 0.1, -0.1]}}),
    "dprivacy": ("run", {"data": {"dataset": "digits", "partition": "iid", "silos": 2, "rotations": [0, 180]},
                         "mechanism": {"name": "dprivacy", "hypotheses": 2, "nu": 5.0, "radius": 1.0, "local_epochs": 1}}),
    "attack": ("attack", {"model": {"name": "lenet"}, "federation": {**FAST, "local_steps": 1, "batch_size": 1},
                          "attack": {"method": "dlg", "target_silo": 1, "round": 1, "iterations": 3, "seeds": 1}}),
    "audit": ("audit", {"data": {"dataset": "digits", "partition": "iid", "silos": 3, "max_records_per_silo": 60},
                        "mechanism": {"name": "dp_sgd", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "sampling_rate": 0.5},
                        "audit": {"canaries": 20}}),
}
OWN_CODE = '''
import numpy as np
import torch


def build(*, feature_shape, num_classes, hidden=16):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(feature_shape)), hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, num_classes))


def load(*, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(240, 6)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    return (x[:200], y[:200]), (x[200:], y[200:])
'''


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """``ray start --head --block`` run from a directory of its own, in a process group of its own; yields its
    address; stops the group (the head's processes and workers) at the end."""
    started, address = start_node(tmp_path_factory.mktemp("head_dir"), num_cpus=4, num_gpus=1)
    try:
        yield address
    finally:
        _stop_group(started)


def start_node(where: Path, *, num_cpus: int, num_gpus: int = 0, head: str | None = None,
               joinable: bool = False) -> tuple[subprocess.Popen, str]:
    """``ray start --block``: a head (``joinable``: one that other nodes may join), or with ``head`` a node joining
    it (with a HOME of its own, as on another machine), run from ``where`` in a process group of its own, on free
    ports; the ``ray start`` process and the head's address."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if head is not None:
        (where / "home").mkdir(exist_ok=True)
        env["HOME"] = str(where / "home")
    if head is not None or joinable:  # conftest's "0" keeps the GCS on 127.0.0.1, where Ray refuses joining nodes
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"
    if joinable:  # the GCS marks a node dead after 3 failed health checks 1 s apart (Ray's default: 5, 3 s apart)
        env.update(RAY_health_check_period_ms="1000", RAY_health_check_failure_threshold="3")
    for attempt in range(START_ATTEMPTS):  # a loaded machine can miss Ray's fixed 30 s for the raylet to register
        gcs, client, agent, agent_grpc, metrics, runtime_env_agent, node_manager, object_manager = free_ports(8)
        role = [f"--address={head}"] if head else ["--head", f"--port={gcs}", "--include-dashboard=false",
                                                   f"--ray-client-server-port={client}"]
        command = [str(Path(sys.executable).with_name("ray")), "start", *role, "--block", "--node-ip-address=127.0.0.1",
                   f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}", "--disable-usage-stats",
                   f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
                   f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env_agent}",
                   f"--node-manager-port={node_manager}", f"--object-manager-port={object_manager}"]
        log_path = where / f"node-{attempt}.log"
        with log_path.open("w") as log:
            started = subprocess.Popen(command, cwd=where, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 300
        while started.poll() is None and "Ray runtime started" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(1)
        if started.poll() is None and "Ray runtime started" in log_path.read_text():
            return started, head or f"127.0.0.1:{gcs}"
        _stop_group(started)
    pytest.fail(f"ray start failed {START_ATTEMPTS} times: {log_path.read_text()[-3000:]}")


def _stop_group(started: subprocess.Popen) -> None:
    """Stop ``ray start`` and every process of its group (it started them all; Ray never moves them out)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 30)):
        try:
            os.killpg(started.pid, sig)
        except ProcessLookupError:
            return
        try:
            started.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + 30
    while _group_alive(started.pid) and time.monotonic() < deadline:
        time.sleep(0.5)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except ProcessLookupError:
        return False


def _scenario_file(directory: Path, name: str, **blocks) -> Path:
    blocks.setdefault("federation", FAST)
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(small_scenario(name=name, **blocks)))
    return path


def pool_names(address: str, cwd: Path, actor: str = "") -> list[str]:
    """The names of the warm pool's actors (``privsilo pool status``), of class ``actor`` where given."""
    status = privsilo("pool", "status", "--address", address, cwd=cwd)
    assert status.returncode == 0, status.stderr
    names = [line.split()[0] for line in status.stdout.splitlines()[1:] if line.strip()]
    return sorted(name for name in names if name.startswith(actor))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_family_runs_a_round_on_a_separately_started_head(case, head, tmp_path):
    command, blocks = CASES[case]
    proc = privsilo(command, str(_scenario_file(tmp_path, case, **blocks)), "--address", head, "--out", str(tmp_path / "out"),
                    "--no-progress", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    if command == "attack":
        report = json.loads((out / "attack.json").read_text())
        assert report["config"]["ray"]["address"] == head and report["round"] == 1
        assert len(report["seeds"]) == 1 and report["seeds"][0]["target_silo"] == 1 and report["seeds"][0]["images"]
        return
    if command == "audit":
        report = json.loads((out / "audit.json").read_text())
        assert report["claimed_epsilon"] > 0 and report["empirical_epsilon_lower_bound"] >= 0 and report["canaries"] == 20
        return
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["ray"]["address"] == head and 0 <= summary["final"]["accuracy"] <= 1
    (row,) = csv.DictReader((out / "metrics.csv").open())  # one round
    assert row["round"] == "1" and row["skipped"] == "false"
    guarantee = summary["privacy"].get("guarantee")
    assert (guarantee == "none") == (case == "none"), summary["privacy"]
    if case in ("dp_sgd", "uldp", "uldp_private_weighting"):
        assert 0 < summary["privacy"]["epsilon"] < float("inf")


def test_an_own_model_and_dataset_reach_workers_leased_from_runs_in_other_directories(head, tmp_path):
    """The issue's reproduction: warm actors of the same shape, started by a run from another directory, then a
    run of the user's model and loader from the directory that holds their module. Without shipping
    (``ray.ship_code: never``) the leased workers cannot import it: one line, exit 2, naming the field; with the
    default they can, and a second identical run leases the same actors."""
    elsewhere, mine = tmp_path / "elsewhere", tmp_path / "mine"
    elsewhere.mkdir(), mine.mkdir()
    warm = privsilo("run", str(_scenario_file(elsewhere, "warm")), "--address", head, "--no-progress",
                    "--out", str(elsewhere / "out"), cwd=elsewhere)
    assert warm.returncode == 0, warm.stderr[-3000:]
    (mine / "mymodel.py").write_text(OWN_CODE)
    own = {"model": {"name": "mymodel:build", "kwargs": {"hidden": 8}}, "data": {"dataset": "mymodel:load", "partition": "iid", "silos": 3}}
    unshipped = _scenario_file(mine, "unshipped", **own, ray={"ship_code": "never"})
    refused = privsilo("run", str(unshipped), "--address", head, "--no-progress", "--out", str(mine / "refused"), cwd=mine)
    assert refused.returncode == 2, refused.stderr[-3000:]
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("privsilo: error: model.name: got 'mymodel:build'; fails in a worker") and "ray.ship_code" in line
    scenario = _scenario_file(mine, "own", **own)
    ran = privsilo("run", str(scenario), "--address", head, "--no-progress", "--out", str(mine / "out"), cwd=mine)
    assert ran.returncode == 0, ran.stderr[-3000:]
    summary = json.loads((mine / "out" / "summary.json").read_text())
    assert summary["config"]["model"]["name"] == "mymodel:build" and 0 <= summary["final"]["accuracy"] <= 1
    leased = pool_names(head, mine)
    again = privsilo("run", str(scenario), "--address", head, "--no-progress", "--out", str(mine / "again"), cwd=mine)
    assert again.returncode == 0, again.stderr[-3000:]
    assert pool_names(head, mine) == leased  # the same code: the warm actors were leased again


def test_idle_actors_give_up_the_gpu_share_a_run_of_another_shape_needs(head, tmp_path):
    """Two silo workers with half the head's one GPU each go idle; a run whose three workers need 0.3 GPU each
    gets the GPU, and a second identical run leases the same actors."""
    def gpu_run(name: str, share: float, silos: int) -> list[str]:
        path = _scenario_file(tmp_path, name, data={"dataset": "digits", "partition": "iid", "silos": silos},
                              resources={"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": share},
                                         "silos_per_actor": 1})
        proc = privsilo("run", str(path), "--address", head, "--no-progress", "--out", str(tmp_path / name), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return pool_names(head, tmp_path, actor="SiloWorker")

    halves = gpu_run("halves", 0.5, 2)
    thirds = gpu_run("thirds", 0.3, 3)
    assert not set(halves) & set(thirds)
    assert gpu_run("thirds_again", 0.3, 3) == thirds


def test_the_silos_of_a_lost_node_come_back_on_a_new_one_or_the_run_stops_for_resume(tmp_path):
    """Issue 39, on a head whose one CPU holds only the server, so that the silo workers (1.5 CPUs each) run on a
    second node (``ray start --address``, a HOME of its own), whose process group gets SIGKILL after the first
    checkpoint. The driver names the node as soon as Ray marks it dead, and its silos drop out.

    First run: a new node joins after that line; the workers come back on it and the run ends (exit 0) with every
    round and the crash counted. Second run, with ``federation.round_timeout`` 20 s: the node hosting the workers
    is killed and none joins, so the run stops: exit 3 (not 2, the bad-input code), one error line naming the
    node and the resume command; a node joins, and ``privsilo resume`` finishes the run."""
    from privsilo.simulator.errors import EXIT_RUNTIME_FAULT

    nodes = []
    try:
        head_node, address = start_node(_directory(tmp_path / "head"), num_cpus=1, joinable=True)
        nodes.append(head_node)
        nodes.append(start_node(_directory(tmp_path / "node-1"), num_cpus=3, head=address)[0])
        comes_back = _lost_node_run(tmp_path / "comes_back", address, nodes, round_timeout=600, replace=True)
        assert comes_back.returncode == 0, comes_back.stderr[-3000:]
        summary = json.loads((tmp_path / "comes_back" / "out" / "summary.json").read_text())
        assert summary["failures"]["crashes"] >= 1 and summary["failures"]["rounds_with_dropouts"] >= 1, summary["failures"]
        stops = _lost_node_run(tmp_path / "stops", address, nodes, round_timeout=20, replace=False)
        assert stops.returncode == EXIT_RUNTIME_FAULT, stops.stderr[-3000:]
        out = tmp_path / "stops" / "out"
        error = stops.stderr.strip().splitlines()[-1]
        assert error.startswith("privsilo: error: silo worker ") and "Ray node " in error, stops.stderr[-3000:]
        assert "federation.round_timeout = 20 s" in error, error
        assert error.endswith(f"continue from the last checkpoint with: privsilo resume {out}"), error
        assert stops.stopped_s < 20 + 120, stops.stopped_s  # Ray's health checks take some 15-30 s to mark a node dead
        nodes.append(start_node(_directory(tmp_path / "node-3"), num_cpus=3, head=address)[0])
        resumed = privsilo("resume", str(out), "--no-progress", cwd=tmp_path)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert len(list(csv.DictReader((out / "metrics.csv").open()))) == LOST_NODE_ROUNDS
    finally:
        for node in reversed(nodes):
            _stop_group(node)


LOST_NODE_ROUNDS = 30  # the kill lands after round 1; each later round waits on the dead workers until Ray marks the node dead


def _lost_node_run(where: Path, address: str, nodes: list[subprocess.Popen], *, round_timeout: float,
                   replace: bool) -> subprocess.CompletedProcess:
    """A run whose two silo workers are on the last node of ``nodes``, which gets SIGKILL after the first
    checkpoint; the driver must name it, once, with both silos; with ``replace`` a new node joins then. The run's
    result, with ``stopped_s``: the seconds from the kill to the run's end."""
    where.mkdir()
    scenario = _scenario_file(where, "lost", data={"dataset": "digits", "partition": "iid", "silos": 2},
                              federation={**FAST, "rounds": LOST_NODE_ROUNDS, "round_timeout": round_timeout},
                              resources={"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 1.5, "num_gpus": 0}, "silos_per_actor": 1})
    out, lines = where / "out", []
    command = [sys.executable, "-m", "privsilo.simulator.cli", "run", str(scenario), "--address", address, "--out", str(out), "--no-progress"]
    run = subprocess.Popen(command, cwd=where, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reader = threading.Thread(target=lambda: lines.extend(run.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while not (out / "checkpoint.pkl").exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert run.poll() is None, "".join(lines)[-3000:]
    os.killpg(nodes[-1].pid, signal.SIGKILL)
    killed = time.monotonic()
    while not any("Ray node " in line and " died;" in line for line in lines) and run.poll() is None and time.monotonic() < killed + 300:
        time.sleep(0.2)
    if replace:
        nodes.append(start_node(_directory(where / "node"), num_cpus=3, head=address)[0])
    stdout = run.stdout.read()
    run.wait(timeout=900)
    reader.join(timeout=60)
    stderr = "".join(lines)
    died = [line for line in stderr.splitlines() if "Ray node " in line and "died; its silos [0, 1] drop out" in line]
    assert len(died) == 1, [line for line in stderr.splitlines() if "Ray node" in line] or stderr[-3000:]
    result = subprocess.CompletedProcess(command, run.returncode, stdout, stderr)
    result.stopped_s = time.monotonic() - killed
    return result


def _directory(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
