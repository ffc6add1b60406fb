"""Faults in real processes: a Ray worker stopped with SIGSTOP becomes a dropout after the round timeout, and silos
that misbehave inside Ray workers of their own (tests/support/misbehaving_silos.py) drop out of their round (the
crashes injected on the shared session: tests/system/test_failures_crashes.py)."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import ray

from privsilo.simulator.engine import Federation, run
from tests.support.scenarios import DP_SGD, faults_scenario as _scenario


def test_a_stopped_worker_becomes_a_dropout_after_the_round_timeout_and_rejoins(ray_local):
    """Silo 1's worker is SIGSTOPped before round 2 (index 1): after ``federation.round_timeout`` the server drops
    it from the round, kills the process (Ray restarts it) and sums the survivors under secure aggregation; the
    silo comes back from its snapshot and uploads again in round 3. The model equals that of a run in which silo
    1's process crashes at the same step (the injected crash plan), so a fixed straggle plan gives fixed results."""
    protocol = {"secure_aggregation": True}
    crashed = run(_scenario(DP_SGD, [{"silo": 1, "round": 2, "at": "setup"}], rounds=3, protocol=protocol))
    scenario = _scenario(DP_SGD, [], rounds=3, protocol=protocol)
    scenario["federation"]["round_timeout"] = 20
    reports = []
    with Federation(scenario, snapshots=True) as federation:
        reports.append(federation.run_round(0))
        pid = ray.get(federation.workers[1].__ray_call__.remote(lambda worker: os.getpid()))
        os.kill(pid, signal.SIGSTOP)
        try:
            reports.append(federation.run_round(1))
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        federation.recover(reports[1].crashed_workers)
        assert ray.get(federation.workers[1].__ray_call__.remote(lambda worker: os.getpid())) != pid  # restarted
        reports.append(federation.run_round(2))
        model = federation.model_state()
    assert [r.dropped for r in reports] == [r.report.dropped for r in crashed.rounds] == [(), (1,), ()]
    assert reports[1].crashed_workers == (1,) and not reports[1].abandoned
    assert sorted(reports[1].events) == [0, 2, 3] and sorted(reports[2].events) == [0, 1, 2, 3]
    for name, value in crashed.model_state.items():
        np.testing.assert_allclose(model[name].numpy(), value.numpy(), atol=1e-6)


def test_a_silo_that_misbehaves_drops_out_of_its_round_and_the_run_goes_on() -> None:
    """Real Ray worker processes (a Ray of the test's own, whose workers run ``tests/support/misbehaving_silos.py``'s
    hook): silo 1 uploads a vector one word short in round 2, silo 2 seals shares for silo 0 that do not
    authenticate in round 3. Under both server models every round finishes, never the run: round 2 sums the
    other three (the model equals the plain run's where silo 1 crashed before uploading) and names silo 1; in
    round 3 silo 0 refuses the shares (``honest_but_curious``: it sits the round out before masking) or the claim
    naming silo 2 (``may_lie``: it does not sign, so its upload is left out), named with silo 2 as the cause."""
    secure = {server: _scenario(DP_SGD, [], rounds=3, protocol={"secure_aggregation": True, "server": server})
              for server in ("honest_but_curious", "may_lie")}
    plain = _scenario(DP_SGD, [{"silo": 1, "round": 2, "at": "before_upload"}], rounds=3)
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "RAY_AUTH_MODE": "disabled"}
    finished = subprocess.run([sys.executable, "-m", "tests.support.misbehaving_silos", json.dumps({**secure, "plain": plain})],
                              capture_output=True, text=True, env=env, timeout=600, check=False)
    assert finished.returncode == 0, finished.stderr[-3000:]
    reports = json.loads(finished.stdout.strip().splitlines()[-1])
    plain_rounds = reports["plain"]["rounds"]
    for server in secure:
        rounds = reports[server]["rounds"]
        assert not any(r["abandoned"] for r in rounds), server
        assert [r["loss"] for r in rounds[:2]] == pytest.approx([r["loss"] for r in plain_rounds[:2]], abs=1e-5)
        assert rounds[0]["left_out"] == {}
        assert list(rounds[1]["left_out"]) == ["1"]
        words = re.search(r"silo 1 uploaded (\d+) words where the others uploaded (\d+); it counts as dropped",
                          rounds[1]["left_out"]["1"])
        assert words and int(words[1]) == int(words[2]) - 1
        assert rounds[1]["events"] == [0, 1, 2, 3]  # its update reached the server: charged, though left out
        assert list(rounds[2]["left_out"]) == ["0"], server
        why = rounds[2]["left_out"]["0"]
        if server == "honest_but_curious":
            assert "shares relayed from silo 2 do not authenticate" in why and rounds[2]["events"] == [1, 2, 3]
        else:
            assert "name neighbours [2] whose shares it never received" in why and rounds[2]["events"] == [0, 1, 2, 3]
        failures = reports[server]["failures"]
        assert [(f["round"], f["silo"]) for f in failures["left_out"]] == [(2, 1), (3, 0)]
        assert failures["rounds_abandoned"] == 0 and failures["crashes"] == 0
