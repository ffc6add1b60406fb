"""The command line as a new user meets it, each case run as a real ``privsilo`` process.

Start-up (no torch, Ray or matplotlib for ``list`` and ``validate``; ``--version``), scenario files that are not
UTF-8, not YAML or empty, a wrong ``--address``, a cluster too small for the scenario, and ``data fetch --from``.
"""
from __future__ import annotations

import http.server
import importlib.metadata
import json
import re
import shutil
import socket
import subprocess
import sys
import threading

import pytest
import yaml

from privsilo.simulator.data.heart_disease import CENTERS, center_file
from tests.support.cli import IMPORT_PROBE, one_error_line, privsilo
from tests.support.paths import HEART_DISEASE_DIR, REPO
from tests.support.processes import free_ports
from tests.support.scenarios import small_scenario

QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
HEART_DPSGD = REPO / "scenarios" / "heart_disease_dpsgd.yaml"
HEAVY_MODULES = ("torch", "ray", "matplotlib", "opacus")


# --- start-up ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("args", "also_absent"),
    [
        (["list"], ("sklearn",)),
        (["list", "mechanism.rpdp"], ("sklearn",)),
        (["validate", str(QUICKSTART)], ()),
        (["validate", str(HEART_DPSGD), "--set", f"data.path={HEART_DISEASE_DIR}"], ()),
        (["validate", str(REPO / "scenarios" / "rpdp" / "heart_disease_three_levels.yaml"), "--set", f"data.path={HEART_DISEASE_DIR}"], ()),
        (["validate", str(REPO / "scenarios" / "rpdp" / "heart_disease_grid.yaml"), "--set", f"data.path={HEART_DISEASE_DIR}"], ()),
        (["validate", str(QUICKSTART), "--set", "mechanism={name: pldp, ranges: tau1, coordinates: 10}"], ()),
        (["validate", str(REPO / "scenarios" / "attacks" / "lfw_dlg.yaml")], ("skimage",)),
    ],
    ids=["list", "list-keys", "validate-none", "validate-dp_sgd", "validate-rpdp", "validate-grid", "validate-pldp", "validate-attack"],
)
def test_list_and_validate_load_neither_torch_nor_ray_nor_matplotlib(args, also_absent, request):
    if any("heart_disease" in arg for arg in args):
        request.getfixturevalue("heart_disease_dir")  # fetches the UCI files into the cache where absent
    proc = subprocess.run([sys.executable, "-c", IMPORT_PROBE, *args], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 0
    loaded = set(result["modules"]) & {*HEAVY_MODULES, *also_absent}
    assert not loaded, f"privsilo {args[0]} imported {sorted(loaded)}"


def test_version_comes_from_the_package_metadata():
    proc = privsilo("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"privsilo {importlib.metadata.version('privsilo')}"


# --- scenario and grid files that cannot be read -------------------------------------------------------------

FILE_CASES = {
    # name: (file bytes, text the one error line must contain besides the file name)
    "not-utf8": ("name: quickstart\ndata: {dataset: digits}\nmodel: {name: caf\xe9}\n".encode("latin-1"), "line 3, column 18"),
    "bad-yaml": (b"name: quickstart\ndata: {dataset: digits, silos: 3\nmodel: {name: mlp}\n", "line 3, column 6"),
    "empty": (b"", "empty"),
    "list": (b"- name: quickstart\n", "mapping"),
}


@pytest.mark.parametrize("command", ["run", "validate"])
@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_unreadable_scenario_file_is_one_line_naming_the_file(tmp_path, command, case):
    content, needle = FILE_CASES[case]
    path = tmp_path / "scenario.yaml"
    path.write_bytes(content)
    extra = ["--out", str(tmp_path / "out")] if command == "run" else []
    line = one_error_line(privsilo(command, str(path), *extra))
    assert str(path) in line and needle in line
    assert "<unicode string>" not in line and "codec" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scenario.yaml"]


def test_yaml_error_gives_line_and_column(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text("name: quickstart\nfederation: {rounds: 3,, lr: 0.1}\n")
    line = one_error_line(privsilo("validate", str(path)))
    assert f"{path}, line 2, column " in line


def test_a_key_given_twice_is_refused_naming_it_and_both_lines(tmp_path):
    """In a scenario, in a nested block, in a grid (axes) and in a --set value: YAML forbids it, and PyYAML's
    silent last-one-wins once changed a run's seed."""
    path = tmp_path / "scenario.yaml"
    path.write_text("name: q\nseed: 0\ndata: {dataset: digits}\nseed: 1\n")
    line = one_error_line(privsilo("validate", str(path)))
    assert f"{path}, line 4, column 1: invalid YAML: the key 'seed' is given twice, on line 2 and on line 4" in line
    path.write_text("name: q\ndata:\n  dataset: digits\n  silos: 2\n  silos: 3\n")
    assert "the key 'silos' is given twice, on line 4 and on line 5" in one_error_line(privsilo("run", str(path)))
    grid = tmp_path / "grid.yaml"
    grid.write_text("name: g\nbase: scenario.yaml\naxes:\n  seed:\n    a: {seed: 1}\n    a: {seed: 2}\n")
    assert "the key 'a' is given twice, on line 5 and on line 6" in one_error_line(privsilo("validate", str(grid)))
    line = one_error_line(privsilo("validate", str(QUICKSTART), "--set", "data={silos: 2, silos: 3}"))
    assert "--set" in line and "the key 'silos' is given twice" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.yaml", "scenario.yaml"]


def test_grid_and_its_base_are_read_with_the_same_checks(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("name: g\nbase: base.yaml\naxes: {federation.lr: {a: 0.1, b: [0.2}\n")
    assert f"{grid}, line 3" in one_error_line(privsilo("validate", str(grid)))
    grid.write_text("name: g\nbase: base.yaml\naxes: {federation.lr: {a: 0.1}}\n")
    (tmp_path / "base.yaml").write_bytes(b"")
    line = one_error_line(privsilo("validate", str(grid)))
    assert str(tmp_path / "base.yaml") in line and "empty" in line


def test_malformed_set_value_is_one_line(tmp_path):
    line = one_error_line(privsilo("validate", str(QUICKSTART), "--set", "data.silos=[3"))
    assert "--set" in line and "data.silos=[3" in line


def test_missing_budgets_csv_names_the_key_and_the_file(tmp_path):
    missing = tmp_path / "budgets.csv"
    scenario = small_scenario(mechanism={"name": "rpdp", "budgets": {"distribution": "column", "path": str(missing), "column": "eps"}})
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    line = one_error_line(privsilo("validate", str(path)))
    assert line.startswith(f"privsilo: error: mechanism.budgets.path: got '{missing}'; ")
    assert "value error" not in line.lower()


def test_budgets_csv_without_the_column_names_the_key_and_the_columns(tmp_path):
    csv = tmp_path / "budgets.csv"
    csv.write_text("budget\n1.0\n2.0\n")
    scenario = small_scenario(mechanism={"name": "rpdp", "budgets": {"distribution": "column", "path": str(csv), "column": "eps"}})
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    line = one_error_line(privsilo("validate", str(path)))
    assert line.startswith("privsilo: error: mechanism.budgets.column: got 'eps'; ") and "budget" in line


# --- joining a cluster -------------------------------------------------------------------------------------

class _NotRay(http.server.BaseHTTPRequestHandler):
    """An HTTP/1.1 server, like Ray's dashboard on 8265: listening, but not a Ray head's GCS."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.timeout(120)
@pytest.mark.parametrize("listener", ["nothing", "http", "silent"])
def test_wrong_address_exits_2_within_the_connect_timeout(tmp_path, listener):
    """Nothing listening; an HTTP/1.1 server (like the dashboard's port); a socket that accepts but never answers."""
    server = silent = None
    if listener == "http":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotRay)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        address = f"127.0.0.1:{server.server_address[1]}"
    elif listener == "silent":
        silent = socket.create_server(("127.0.0.1", 0))  # the kernel completes the handshake; nobody replies
        address = f"127.0.0.1:{silent.getsockname()[1]}"
    else:
        address = f"127.0.0.1:{free_ports(1)[0]}"
    try:
        proc = privsilo("run", str(QUICKSTART), "--address", address, "--set", "ray.connect_timeout=5",
                        "--out", str(tmp_path / "out"), "--no-progress", timeout=100)
    finally:
        if server is not None:
            server.shutdown()
        if silent is not None:
            silent.close()
    line = one_error_line(proc)
    assert "ray.address" in line and address in line and "5 s" in line
    assert not (tmp_path / "out").exists()


def test_connect_timeout_is_validated():
    line = one_error_line(privsilo("validate", str(QUICKSTART), "--set", "ray.connect_timeout=0"))
    assert "ray.connect_timeout" in line and "greater than 0" in line


@pytest.mark.timeout(300)
def test_too_small_cluster_names_the_numbers_and_a_set_that_fits(tmp_path):
    from ray.cluster_utils import Cluster

    scenario = small_scenario(resources={"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 1, "num_gpus": 0}, "silos_per_actor": 1})
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(scenario))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "node_ip_address": "127.0.0.1"})
    try:
        proc = privsilo("run", str(path), "--address", cluster.address, "--out", str(tmp_path / "out"), "--no-progress", timeout=240)
    finally:
        cluster.shutdown()
    line = one_error_line(proc)
    silos = scenario["data"]["silos"]
    assert "3.5 CPU" in line and "2 CPU" in line  # 0.5 + 3 x 1 asked, 2 offered
    settings = dict(re.findall(r"--set resources\.(server|silo)\.num_cpus=([0-9.]+)", line))
    assert "silo" in settings, line
    server = float(settings.get("server", scenario["resources"]["server"]["num_cpus"]))
    assert 0 < float(settings["silo"]) and server + silos * float(settings["silo"]) <= 2
    assert "--set resources.silos_per_actor=3 (1 workers)" in line  # one 1-CPU worker fits beside the server
    assert not (tmp_path / "out").exists()


# --- data fetch --from -----------------------------------------------------------------------------------------

def test_fetch_from_a_local_copy_then_commands_find_the_data(tmp_path, heart_disease_dir):
    cache = tmp_path / "cache"
    proc = privsilo("data", "fetch", "heart_disease", "--from", str(heart_disease_dir), env={"PRIVSILO_DATA_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr
    target = cache / "heart_disease"
    assert sorted(p.name for p in target.iterdir()) == sorted(center_file(c) for c in CENTERS)
    proc = privsilo("validate", str(HEART_DPSGD), env={"PRIVSILO_DATA_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout


@pytest.mark.parametrize("damage", ["missing", "altered"])
def test_fetch_from_an_incomplete_copy_names_the_file_and_writes_nothing(tmp_path, heart_disease_dir, damage):
    source = tmp_path / "copy"
    shutil.copytree(heart_disease_dir, source)
    broken = source / center_file("va")
    if damage == "missing":
        broken.unlink()
    else:
        broken.write_text(broken.read_text().replace("1", "2", 1))
    cache = tmp_path / "cache"
    line = one_error_line(privsilo("data", "fetch", "heart_disease", "--from", str(source), env={"PRIVSILO_DATA_DIR": str(cache)}))
    assert center_file("va") in line and str(source) in line
    assert not cache.exists()


def test_missing_heart_disease_names_fetch_and_data_path(tmp_path):
    line = one_error_line(privsilo("validate", str(HEART_DPSGD), env={"PRIVSILO_DATA_DIR": str(tmp_path)}))
    assert "privsilo data fetch heart_disease" in line and "--from" in line and "data.path" in line


@pytest.mark.parametrize("field", ["num_cpus", "num_gpus"])
def test_suggested_shares_fit_whenever_a_hundredth_each_does(field):
    from privsilo.simulator.runtime.cluster import fitting_settings

    for silos in (1, 3, 10, 57):
        for server in (0.0, 0.25, 0.5, 1.0, 3.0):
            for silo in (0.0, 0.3, 0.5, 1.0):
                for have in (0.0, 0.5, 1.0, 2.0, 7.0, 12.5):
                    if server + silos * silo <= have:
                        continue  # fits already: no suggestion is asked for
                    settings = dict(s.split("=") for s in fitting_settings(field=field, server=server, silo=silo, workers=silos, have=have))
                    if not settings:
                        assert field == "num_cpus" and have < 0.01 * (silos + 1 if silo else 1)
                        continue
                    new_server = float(settings.get(f"resources.server.{field}", server))
                    new_silo = float(settings.get(f"resources.silo.{field}", silo))
                    assert new_server + silos * new_silo <= have + 1e-9
                    assert new_server <= server and new_silo <= silo  # only ever lowered
