"""The audited mechanism's own Gaussian-DP parameter mu* ([`mechanisms.gdp`][mechanisms.gdp]), from the run's privacy
events: what the Gaussian-DP bound on mu is set against.

* ``dp_sgd``: each silo's Poisson-subsampled Gaussian steps (its start-up and round events, merged as the
  accountant merges them), mu* of its PLD; the largest over the silos, as the claim is.
* ``uldp`` (not ``group``, which the audit refuses): the user-level rounds, counted once each, at their user rates.
* ``pldp``: pure epsilon-DP per client, from the largest per-client epsilon of the hosts (randomized response's mu).
* ``rpdp`` (rates that follow each record's remaining budget), ``dprivacy`` (no add/remove claim) and ``none``:
  no mu*; ``gdp_mu_star_basis`` says why.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mechanisms.events import PoissonGaussianEvent, UserLevelGaussianEvent
from mechanisms.gdp import GDP_DELTA_SLACK, pure_dp_mu, schedule_mu
from simulator.results import RunResult

UPPER_ESTIMATE = f"an upper estimate from the pessimistic PLD, up to delta {GDP_DELTA_SLACK:g}"
NO_MU = {
    "rpdp": "none: rPDP's record rates follow each record's remaining budget, and its levels' claims are budgets",
    "dprivacy": "none: d-privacy makes no add/remove (epsilon, delta) claim",
    "none": "none: no privacy claim",
}


def mechanism_mu(mechanism: str, result: RunResult, claims: Mapping[str, Any]) -> tuple[float | None, str]:
    """``(mu*, basis)``: the mechanism's mu* (None where there is none to compute) and what it was computed from."""
    if mechanism == "dp_sgd":
        schedules = [_merged(event for event in events if isinstance(event, PoissonGaussianEvent))
                     for events in _events_by_silo(result).values()]
        return max((schedule_mu(schedule) for schedule in schedules), default=0.0), (
            f"each silo's Poisson-subsampled Gaussian steps, the largest over silos; {UPPER_ESTIMATE} (exact at rate 1)")
    if mechanism == "uldp":
        rounds = {event.round_index: event for events in _events_by_silo(result).values() for event in events
                  if isinstance(event, UserLevelGaussianEvent)}
        schedule = _merged(PoissonGaussianEvent(event.user_rate, event.noise_multiplier, 1)
                           for _, event in sorted(rounds.items()))
        return schedule_mu(schedule), f"the user-level Gaussian rounds at their user rates; {UPPER_ESTIMATE} (exact at rate 1)"
    if mechanism == "pldp":
        epsilon = claims.get("claimed_epsilon_per_client")
        if epsilon is None:
            return None, "none: no per-client epsilon"
        return pure_dp_mu(epsilon), "pure epsilon-DP per client (the hosts' largest): randomized response's mu, exact"
    return None, NO_MU.get(mechanism, "none: not computed for this mechanism")


def _events_by_silo(result: RunResult) -> dict[int, list[Any]]:
    """Every privacy event of the run per silo: announced at start-up, then round by round."""
    events: dict[int, list[Any]] = {info.silo_id: list(info.events) for info in result.placement}
    for record in result.rounds:
        for silo, round_events in record.report.events.items():
            events.setdefault(silo, []).extend(round_events)
    return events


def _merged(events: Iterable[PoissonGaussianEvent]) -> tuple[tuple[float, float, int], ...]:
    """``(rate, sigma, steps)`` entries, consecutive events of one setting merged (the composition is the same)."""
    schedule: list[tuple[float, float, int]] = []
    for event in events:
        setting = (float(event.sampling_rate), float(event.noise_multiplier))
        if schedule and schedule[-1][:2] == setting:
            schedule[-1] = (*setting, schedule[-1][2] + int(event.steps))
        else:
            schedule.append((*setting, int(event.steps)))
    return tuple(schedule)
