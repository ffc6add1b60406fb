"""The PLD accountant's refusals through the command line: exit 2, one line naming the field."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tests.support.paths import REPO
from tests.support.scenarios import small_scenario


@pytest.mark.parametrize(
    ("mechanism", "allowed"),
    [
        ({"name": "uldp", "variant": "group", "group_k": 2, "accountant": "pld"}, "allowed: rdp, or pld with variant"),
        ({"name": "rpdp", "accountant": "pld"}, "unknown key"),
        ({"name": "dp_sgd", "accountant": "prv"}, "'rdp' or 'pld'"),
        ({"name": "dp_sgd", "accountant": "pld", "delta": 1e-12}, "allowed: rdp, or pld with delta >= 1e-10"),
        ({"name": "uldp", "accountant": "pld", "delta": 5e-11}, "allowed: rdp, or pld with delta >= 1e-10"),
        ({"name": "dp_fedavg", "accountant": "pld", "delta": 1e-11}, "allowed: rdp, or pld with delta >= 1e-10"),
    ],
)
def test_refusals_exit_2_naming_the_field(tmp_path, mechanism, allowed):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(small_scenario(mechanism=mechanism)))
    proc = subprocess.run([sys.executable, "-m", "privsilo.simulator.cli", "validate", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("privsilo: error: mechanism.accountant: got ") and allowed in line
