"""Bad scenario input through a real privsilo process: exit 2, one line, the previous output kept."""
from __future__ import annotations

import subprocess
import sys

import yaml

from tests.support.paths import REPO
from tests.support.scenarios import small_scenario


def test_cli_bad_input_exits_2_with_one_line_and_keeps_previous_output(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.csv").write_text("earlier good run\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(small_scenario(federation={"client_rate": -0.5})))
    proc = subprocess.run(
        [sys.executable, "-m", "privsilo.simulator.cli", "run", str(bad), "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "federation.client_rate" in lines[0] and "-0.5" in lines[0]
    assert "Traceback" not in proc.stderr
    assert (out / "metrics.csv").read_text() == "earlier good run\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "out"]
