"""The one place that builds a run's aggregation protocol objects, server side and silo side: the mechanism's own
protocol where it brings one (ULDP's private weighting), else secure aggregation (SecAgg+, Bell et al., CCS 2020)
as the scenario's ``protocol`` block sets it, else plain summation.

Both sides take their secure-aggregation settings from [`secure_aggregation_settings`][privsilo.simulator.engine.protocol_setup.secure_aggregation_settings],
as does ``summary.json``'s report of them, so the server, every silo and the report agree by construction.
"""
from __future__ import annotations

from typing import Any

from privsilo.mechanisms.base import Mechanism, SiloContext
from privsilo.protocols.base import ServerProtocol, SiloProtocol
from privsilo.protocols.plain import PlainSumServer, PlainSumSilo
from privsilo.protocols.secure_aggregation import GraphSettings, SecAggServer, SecAggSilo
from privsilo.simulator.scenario import ProtocolConfig, Scenario, secure_aggregation_codec


def _graph_arguments(config: ProtocolConfig, *, num_silos: int) -> dict[str, Any]:
    """The graph, threshold and assumptions, by the names both sides of SecAgg+ and ``GraphSettings`` take them."""
    return {"neighbours": config.neighbours, "threshold": config.threshold, "corrupt_fraction": config.corrupt_fraction,
            "dropout_rate": config.dropout_rate, "federation": num_silos, "server": config.server}


def secure_aggregation_settings(config: ProtocolConfig, *, num_silos: int) -> GraphSettings:
    """Secure aggregation's graph, threshold and assumptions for rounds sampled from ``num_silos`` silos."""
    return GraphSettings(**_graph_arguments(config, num_silos=num_silos))


def _secure_aggregation_arguments(config: ProtocolConfig, *, num_silos: int) -> dict[str, Any]:
    """What both sides of SecAgg+ are built with: the fixed-point codec, the minimum round size and the settings."""
    return {"codec": secure_aggregation_codec(config, num_silos=num_silos), "min_participants": config.min_participants,
            **_graph_arguments(config, num_silos=num_silos)}


def server_protocol(scenario: Scenario, mechanism: Mechanism, *, num_silos: int, num_users: int | None,
                    length: int) -> ServerProtocol:
    """The server's protocol (``length``: the model's size, for a protocol the mechanism brings)."""
    config = scenario.protocol
    brought = mechanism.server_protocol(num_silos=num_silos, num_users=num_users, length=length,
                                        fractional_bits=config.fractional_bits, min_participants=config.min_participants)
    if brought is not None:
        return brought
    if config.secure_aggregation:
        return SecAggServer(**_secure_aggregation_arguments(config, num_silos=num_silos))
    return PlainSumServer()


def silo_protocol(scenario: Scenario, mechanism: Mechanism, context: SiloContext, silo_id: int) -> SiloProtocol:
    """Silo ``silo_id``'s protocol (``context``: the silo's, for a protocol the mechanism brings)."""
    config = scenario.protocol
    brought = mechanism.silo_protocol(context, fractional_bits=config.fractional_bits,
                                      min_participants=config.min_participants)
    if brought is not None:
        return brought
    if config.secure_aggregation:
        return SecAggSilo(silo_id, **_secure_aggregation_arguments(config, num_silos=scenario.data.silos))
    return PlainSumSilo(silo_id)
