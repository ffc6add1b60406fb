"""Silos that misbehave inside real Ray worker processes, for ``tests/system/test_failures_processes.py``: run as a script, this
starts its own local Ray whose every worker process first runs :func:`misbehave` (Ray's
``worker_process_setup_hook``), which makes silo 1 upload a vector one word short in round 2 and silo 2 seal
shares for silo 0 that do not authenticate in round 3. It runs the scenarios given as one JSON object (name: scenario) on
the command line and prints what the test checks of each as one JSON line."""
from __future__ import annotations

import json
import sys

MALFORMED_UPLOAD = (1, 1)
"""(silo, 0-based round): the silo uploads a vector one word short."""
BAD_CIPHERTEXT = (2, 0, 2)
"""(sender, addressee, 0-based round): the sender's shares for the addressee do not authenticate."""


def misbehave() -> None:
    """Wrap the silo's upload and the share channel's sealing in this worker process (and only in this Ray)."""
    from privsilo.protocols.secure_aggregation import SecAggSilo
    from privsilo.protocols.secure_aggregation.messages import MaskedVector
    from privsilo.protocols.secure_aggregation.sharing import Channel

    protect, seal = SecAggSilo.protect, Channel.seal

    def short_upload(self, vector, *, round_index, participants):
        masked = protect(self, vector, round_index=round_index, participants=participants)
        if (self.silo_id, round_index) == MALFORMED_UPLOAD:
            return MaskedVector(masked.sender, masked.round_index, masked.data[:-1].copy())
        return masked

    def bad_seal(self, *args):
        sealed = seal(self, *args)
        if (self.own_id, self.peer_id, self.round_index) == BAD_CIPHERTEXT:
            return sealed[:-1] + bytes([sealed[-1] ^ 1])
        return sealed

    SecAggSilo.protect, Channel.seal = short_upload, bad_seal


def main(scenarios: dict[str, dict]) -> None:
    import ray

    from privsilo.simulator.engine import run

    ray.init(address="local", num_cpus=4, num_gpus=0, include_dashboard=False, logging_level="ERROR",
             runtime_env={"worker_process_setup_hook": "tests.support.misbehaving_silos.misbehave"})
    reports = {}
    for name, scenario in scenarios.items():
        result = run(scenario)
        reports[name] = {"failures": result.failures, "rounds": [
            {"loss": r.report.loss, "abandoned": r.report.abandoned, "events": sorted(r.report.events),
             "left_out": {str(k): v for k, v in r.report.left_out.items()}} for r in result.rounds]}
    ray.shutdown()
    print(json.dumps(reports))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
