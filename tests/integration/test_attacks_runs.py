"""DLG through Ray on a d-privacy upload (the attack itself, without Ray:
tests/unit/simulator/attacks/test_attacks.py)."""
from __future__ import annotations

import pytest

from privsilo.simulator.attacks.runner import attack
from tests.support.scenarios import dprivacy_scenario


@pytest.mark.parametrize(("nu", "succeeds"), [(1e-3, True), (10.0, False)])
def test_dlg_through_ray_reconstructs_a_dprivacy_upload_at_small_nu_and_fails_at_large_nu(ray_local, nu, succeeds):
    scenario = dprivacy_scenario(radius=0.05, nu=nu, silos=1, attack={"iterations": 20, "seeds": [0]})
    report = attack(scenario.to_dict())
    (run,) = report.runs
    assert run.figures["success"] is succeeds and (run.figures["psnr"] >= 30) is succeeds, run.figures
