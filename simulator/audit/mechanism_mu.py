"""The audited mechanism's own Gaussian-DP parameter mu* ([`privsilo.mechanisms.gdp`][privsilo.mechanisms.gdp]), what
the Gaussian-DP bound on mu is set against: each mechanism computes it from the run's privacy events
(`Mechanism.gdp_mu_star`, e.g. DP-SGD's Poisson-subsampled Gaussian steps, rPDP's per-level planned rates, PLDP's
pure epsilon); this module hands it the events of a finished run."""
from __future__ import annotations

from typing import Any, Mapping

from privsilo.mechanisms.base import Mechanism
from privsilo.simulator.engine.results import RunResult


def mechanism_mu(mechanism: type[Mechanism], result: RunResult, claims: Mapping[str, Any],
                 budget: float | None = None) -> float | None:
    """``mechanism``'s mu* for the canaries of a group (with personal budgets: of privacy level ``budget``); None
    where it has none to compute."""
    return mechanism.gdp_mu_star(events_by_silo(result), rounds=len(result.rounds), claims=claims, budget=budget)


def events_by_silo(result: RunResult) -> dict[int, list[Any]]:
    """Every privacy event of the run per silo: announced at start-up, then round by round."""
    events: dict[int, list[Any]] = {info.silo_id: list(info.events) for info in result.placement}
    for record in result.rounds:
        for silo, round_events in record.report.events.items():
            events.setdefault(silo, []).extend(round_events)
    return events
