"""The cluster's warm pool (privsilo.simulator.runtime.pool.registry), on a real Ray head started for this module: a warm run's
results equal a cold run's, leases are exclusive across drivers, another code version is never reused, actors
keep nothing of a run once handed back, a driver that dies holding a lease loses it, and ``pool stop`` leaves no
actor behind.

Every driver is its own process (its own Ray job), as two ``privsilo run`` commands are."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from functools import partial

import pytest
import torch
import yaml

from privsilo.simulator.runtime.pool.registry import CHECK_EVERY_S
from tests.support import cli
from tests.support.outputs import metrics_without_wall_times
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario

privsilo = partial(cli.privsilo, timeout=300, code=0)  # ``privsilo ARGS`` in a fresh process; asserts it exited 0


@pytest.fixture(scope="module")
def cluster_address():
    """A Ray head on 127.0.0.1 (4 CPUs), stopped at the end with every process it started."""
    from ray.cluster_utils import Cluster

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), saved]))  # the actors import this checkout
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 4, "node_ip_address": "127.0.0.1",
                                                            "include_dashboard": False})
    try:
        yield cluster.address
    finally:
        cluster.shutdown()
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def driver(address: str, *args: str) -> object:
    """What a tests/support/pool_drivers.py command printed."""
    proc = subprocess.run([sys.executable, "-m", "tests.support.pool_drivers", address, *args], capture_output=True, text=True,
                          cwd=REPO, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def two_runs(cluster_address, tmp_path_factory):
    """The same scenario run twice against the cluster: first on fresh actors, then on the pool's; with the
    detached actors alive before and after the second run."""
    work = tmp_path_factory.mktemp("warm")
    path = work / "scenario.yaml"
    path.write_text(yaml.safe_dump(small_scenario(name="warm", federation={
        "rounds": 3, "client_rate": 0.7, "local_steps": 5, "batch_size": 32, "lr": 0.1})))
    run = ("run", str(path), "--address", cluster_address, "--no-progress", "--out")
    privsilo(*run, str(work / "cold"))
    before = driver(cluster_address, "alive")
    privsilo(*run, str(work / "warm"))
    return work, before, driver(cluster_address, "alive")


def test_a_run_on_warm_actors_gives_the_results_of_a_cold_run(two_runs):
    work, before, after = two_runs
    assert len(before) == 5 and before == after  # the registry, a server and 3 silo workers: all reused
    cold, warm = work / "cold", work / "warm"
    assert metrics_without_wall_times(warm / "metrics.csv") == metrics_without_wall_times(cold / "metrics.csv")
    cold_model, warm_model = torch.load(cold / "model.pt"), torch.load(warm / "model.pt")
    assert cold_model.keys() == warm_model.keys()
    assert all(torch.equal(cold_model[k], warm_model[k]) for k in cold_model)


def test_a_handed_back_actor_keeps_nothing_of_its_run(two_runs, cluster_address):
    _, before, _ = two_runs
    report = driver(cluster_address, "isolation")
    assert len(report["actor_ids"]) == 4
    for leftovers in report["leftovers"]:  # two runs used these processes; nothing of either is alive there
        assert leftovers == {"silos": 0, "torch_modules": 0, "server_protocols": 0, "mechanisms": 0, "hosted": 0,
                             "attributes_holding_a_run": 0}
    assert driver(cluster_address, "alive") == before  # the same actors were leased (and given back again)


def test_two_drivers_at_once_never_share_an_actor(cluster_address):
    idle = driver(cluster_address, "lease", "3")  # three idle actors in the pool, for both drivers to want
    holders = [subprocess.Popen([sys.executable, "-m", "tests.support.pool_drivers", cluster_address, "lease", "3", "--hold"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO) for _ in range(2)]
    try:
        first, second = (set(json.loads(holder.stdout.readline())) for holder in holders)
    finally:
        for holder in holders:
            holder.communicate("\n", timeout=120)
    assert len(first) == len(second) == 3 and not first & second
    assert set(idle) <= first | second  # the idle ones were leased, each by one driver


def test_actors_of_another_code_version_are_not_reused(cluster_address):
    stale = driver(cluster_address, "lease", "2", "--version", "0.0.1+stale")
    fresh = driver(cluster_address, "lease", "2")
    assert not set(stale) & set(fresh)
    assert driver(cluster_address, "lease", "2") == fresh  # the same version is reused


def test_the_actors_of_a_driver_that_died_holding_them_are_stopped(cluster_address):
    held = set(driver(cluster_address, "lease", "2", "--die"))  # exits without giving them back
    deadline = time.monotonic() + 120  # the registry looks for ended jobs every CHECK_EVERY_S seconds
    while held & {actor_id for _, actor_id in driver(cluster_address, "alive")}:
        assert time.monotonic() < deadline, "the dead driver's lease was never reclaimed"
        time.sleep(CHECK_EVERY_S)


def test_pool_stop_leaves_no_actor_behind(cluster_address):
    driver(cluster_address, "lease", "2")
    assert driver(cluster_address, "alive")
    privsilo("pool", "stop", "--address", cluster_address)
    assert driver(cluster_address, "alive") == []
    assert "no warm pool" in privsilo("pool", "status", "--address", cluster_address).stdout


def test_pool_commands_without_a_cluster_exit_2_with_one_line(unused_address):
    proc = subprocess.run([sys.executable, "-m", "privsilo.simulator.cli", "pool", "status", "--address", unused_address],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(f"privsilo: error: --address: got '{unused_address}'")


@pytest.fixture
def unused_address() -> str:
    """HOST:PORT where nothing listens."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"
