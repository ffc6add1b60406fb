"""Actor resources: fractional GPUs on a logical GPU, and a real two-node Ray cluster on this machine."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings

import yaml

from privsilo.simulator.engine import Federation
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario


def test_four_silos_share_one_gpu_and_fall_back_to_cpu_with_one_warning(ray_local):
    scenario = small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 4},
        resources={"server": {"num_cpus": 0.25}, "silo": {"num_cpus": 0.25, "num_gpus": 0.25}},
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Federation(scenario) as federation:
            # All four actors are alive at once and together hold the whole (logical) GPU.
            assert ray_local.available_resources().get("GPU", 0.0) == 0.0
            report = federation.run_round(0)
            placement = federation.placement
    assert [p.gpu_ids for p in placement] == [("0",)] * 4
    assert report.participants == (0, 1, 2, 3)
    gpu_warnings = [w for w in caught if issubclass(w.category, RuntimeWarning) and "GPU share" in str(w.message)]
    assert len(gpu_warnings) == 1
    assert all(p.device == "cpu" and p.gpu_fallback for p in placement)  # no CUDA on this machine


def test_scenario_runs_on_a_two_node_cluster(tmp_path):
    from ray.cluster_utils import Cluster

    scenario = small_scenario(
        name="cluster",
        resources={"server": {"num_cpus": 0}, "silo": {"num_cpus": 1, "num_gpus": 0}},
    )
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(scenario))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1"})
    address = cluster.address
    try:
        cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        proc = subprocess.run(
            [sys.executable, "-m", "privsilo.simulator.cli", "run", str(path), "--address", address,
             "--out", str(tmp_path / "out"), "--no-progress"],
            capture_output=True, text=True, cwd=REPO, timeout=300,
        )
    finally:
        cluster.shutdown()
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    nodes = {p["node_id"] for p in summary["placement"]}
    assert len(nodes) == 2  # three 1-CPU silos cannot fit on either node alone
    assert summary["config"]["ray"]["address"] == address
    assert summary["final"]["rounds"] == 3
