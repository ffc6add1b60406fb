"""TensorBoard is written live by a real privsilo run, and a run killed mid-way and resumed continues its events
(the outputs on the shared session: tests/integration/test_outputs_never_overwritten.py)."""
from __future__ import annotations

import time

from tests.support.cli import start_privsilo
from tests.support.outputs import assert_tensorboard_equals_metrics, logged_steps
from tests.support.paths import QUICKSTART
from tests.support.processes import kill_session


def test_tensorboard_is_live_and_a_resumed_run_continues_its_events(tmp_path):
    """Round 1's scalars can be read while the run goes on; the run is then killed (driver and Ray) after a round
    its last checkpoint does not cover, and ``privsilo resume`` continues the same event directory: each round
    ends with one value, that of metrics.csv."""
    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(QUICKSTART.read_text())
    out = tmp_path / "live"
    process = start_privsilo(scenario_file, out, "--log", "tensorboard", "--set", "federation.rounds=5", "--set", "checkpoint.every=2")
    try:
        deadline = time.monotonic() + 300
        while not logged_steps(out / "tensorboard"):
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "no TensorBoard event within 300 s"
            time.sleep(0.1)
        assert process.poll() is None and not (out / "summary.json").exists()  # read while the run still runs
        assert logged_steps(out / "tensorboard")[0] == 1
        while len(logged_steps(out / "tensorboard")) < 3:  # round 3: after the checkpoint of round 2
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
            time.sleep(0.05)
    finally:
        kill_session(process.pid)
        process.wait(timeout=60)
    assert not (out / "summary.json").exists()
    resumed = start_privsilo(None, out, command=("resume",))
    output = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, output
    assert_tensorboard_equals_metrics(out, event_files=2)
    assert logged_steps(out / "tensorboard") == list(range(1, 6))
