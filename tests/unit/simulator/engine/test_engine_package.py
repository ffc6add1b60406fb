"""The engine package without Ray: its public names, what importing one of its modules imports, and the one place
that builds a run's protocols (both sides and summary.json's report built from the same settings)."""
from __future__ import annotations

import subprocess
import sys

import pytest

import privsilo.simulator.engine as engine
from privsilo.protocols.plain import PlainSumServer, PlainSumSilo
from privsilo.protocols.private_weighting.server import PwpServer
from privsilo.protocols.secure_aggregation import SecAggServer, SecAggSilo
from privsilo.simulator.engine.protocol_setup import secure_aggregation_settings, server_protocol, silo_protocol
from privsilo.simulator.scenario import validate_scenario
from tests.support.paths import REPO
from tests.support.scenarios import small_scenario, tiny_silo_context

# What modules, tests, benchmarks and docs import from privsilo.simulator.engine.
IMPORTED_FROM_THE_PACKAGE = {"run", "Federation", "RoundRecord", "RunResult", "record_events", "resolve_scenario",
                             "resources_needed", "pack_silos", "initial_state"}


def test_the_package_names_what_is_imported_from_it_and_each_is_its_module_object() -> None:
    from privsilo.simulator.engine import accounting, api, federation, placement
    from privsilo.simulator.engine.results import RoundRecord, RunResult
    from privsilo.simulator.scenario import resolve_scenario

    assert IMPORTED_FROM_THE_PACKAGE <= set(engine.__all__) <= set(dir(engine))
    assert engine.run is api.run and engine.Federation is federation.Federation
    assert engine.initial_state is federation.initial_state and engine.pack_silos is placement.pack_silos
    assert engine.resources_needed is placement.resources_needed and engine.record_events is accounting.record_events
    assert (engine.RoundRecord, engine.RunResult, engine.resolve_scenario) == (RoundRecord, RunResult, resolve_scenario)
    with pytest.raises(AttributeError, match="no attribute '_initial_state'"):
        engine._initial_state  # noqa: B018


def test_importing_the_protocol_setup_imports_neither_the_federation_nor_ray() -> None:
    """A silo worker's process imports privsilo.simulator.engine.silo, which imports protocol_setup: the package's names load on
    first use, so that import does not pull in Federation (and with it privsilo.simulator.engine.actors, half-imported then)."""
    code = ("import sys, privsilo.simulator.engine.protocol_setup\n"
            "print(sorted(m for m in ('ray', 'privsilo.simulator.engine.federation', 'privsilo.simulator.engine.actors') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("protocol", [
    {"secure_aggregation": True},
    {"secure_aggregation": True, "neighbours": 2, "corrupt_fraction": 0.1, "dropout_rate": 0.2, "server": "may_lie",
     "min_participants": 3, "fractional_bits": 20},
])
def test_both_sides_of_secure_aggregation_and_the_report_take_the_same_settings(protocol) -> None:
    scenario = validate_scenario(small_scenario(data={"dataset": "digits", "partition": "iid", "silos": 5},
                                                mechanism={"name": "dp_sgd", "noise_multiplier": 1.0,
                                                           "max_grad_norm": 1.0, "delta": 1e-5},
                                                protocol=protocol))
    mechanism = scenario.mechanism.build()
    server = server_protocol(scenario, mechanism, num_silos=5, num_users=None, length=10)
    silo = silo_protocol(scenario, mechanism, tiny_silo_context(3), 3)
    assert isinstance(server, SecAggServer) and isinstance(silo, SecAggSilo) and silo.silo_id == 3
    settings = secure_aggregation_settings(scenario.protocol, num_silos=5)
    assert server.settings == silo.settings == settings and settings.federation == 5
    codecs = [(c.fractional_bits, c.modulus_bits, c.max_summands) for c in (server.codec, silo.codec)]
    assert codecs[0] == codecs[1] == (scenario.protocol.fractional_bits, 64, 5)
    assert server.min_participants == silo.min_participants == scenario.protocol.min_participants
    assert (settings.neighbours, settings.corrupt_fraction, settings.dropout_rate, settings.server) == (
        scenario.protocol.neighbours, scenario.protocol.corrupt_fraction, scenario.protocol.dropout_rate,
        scenario.protocol.server)


def test_plain_summation_without_secure_aggregation_and_the_mechanisms_own_protocol_where_it_brings_one() -> None:
    plain = validate_scenario(small_scenario())
    none = plain.mechanism.build()
    assert isinstance(server_protocol(plain, none, num_silos=3, num_users=None, length=10), PlainSumServer)
    silo = silo_protocol(plain, none, tiny_silo_context(1), 1)
    assert isinstance(silo, PlainSumSilo) and silo.silo_id == 1
    weighted = validate_scenario(small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 3, "users": {"count": 20}},
        mechanism={"name": "uldp", "variant": "avg_w", "noise_multiplier": 1.0, "max_grad_norm": 1.0, "delta": 1e-5,
                   "weighting": "private"},
        protocol={"secure_aggregation": True}))
    uldp = weighted.mechanism.build()
    assert isinstance(server_protocol(weighted, uldp, num_silos=3, num_users=20, length=10), PwpServer)
