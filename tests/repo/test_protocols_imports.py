"""The protocols import neither Ray nor torch (checked in a fresh interpreter)."""
from __future__ import annotations

import subprocess
import sys


def test_protocols_stay_free_of_ray() -> None:
    code = (
        "import sys, privsilo.protocols.plain, privsilo.protocols.secure_aggregation, privsilo.protocols.fixed_point; "
        "assert 'ray' not in sys.modules and 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
