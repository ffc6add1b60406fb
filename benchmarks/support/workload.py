"""The FedAvg workload of issue 13, shared by ``bench_vs_flower.py`` and ``bench_round_overhead.py``.

10 IID silos of scikit-learn digits (or another count), an MLP 64-128-10 (``mlp_128``), local SGD steps of batch
32 at lr 0.1, FedAvg (mechanism ``none``), 2 CPUs: two silo worker actors of one CPU each, hosting half the silos
apiece, and a server actor with no CPU share (like Flower's server, which runs in its driver process).
"""
from __future__ import annotations

import math

SILOS = 10
CPUS = 2


def fedavg_scenario(*, name: str, rounds: int, local_steps: int, silos: int = SILOS) -> dict:
    """The workload as a raw scenario mapping (validate with ``privsilo.simulator.scenario.validate_scenario``)."""
    return {
        "name": name,
        "seed": 0,
        "data": {"dataset": "digits", "partition": "iid", "silos": silos},
        "model": {"name": "mlp_128"},
        "federation": {"rounds": rounds, "client_rate": 1.0, "local_steps": local_steps, "batch_size": 32, "lr": 0.1},
        "mechanism": {"name": "none"},
        "resources": {"server": {"num_cpus": 0}, "silo": {"num_cpus": CPUS / 2}, "silos_per_actor": math.ceil(silos / CPUS)},
    }
