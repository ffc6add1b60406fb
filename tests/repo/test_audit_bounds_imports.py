"""The audit's statistics import neither torch nor Ray (checked in a fresh interpreter)."""
from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO


def test_imports_no_torch_and_no_ray():
    code = "import sys, privsilo.simulator.audit.bounds; print(sorted({'torch', 'ray'} & set(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
