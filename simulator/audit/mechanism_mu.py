"""The audited mechanism's own Gaussian-DP parameter mu* ([`privsilo.mechanisms.gdp`][privsilo.mechanisms.gdp]), from the run's privacy
events: what the Gaussian-DP bound on mu is set against.

* ``dp_sgd``: each silo's Poisson-subsampled Gaussian steps (its start-up and round events, merged as the
  accountant merges them), mu* of its PLD; the largest over the silos, as the claim is.
* ``uldp`` (not ``group``, which the audit refuses): the user-level rounds, counted once each, at their user rates.
* ``rpdp``, per privacy level: a canary of budget ``b`` is sampled at the rate its silo plans for ``b`` (the rate of
  its records of that budget, announced at start-up) in every local step of the rounds its host took part in, until
  its budget is spent (fixed in advance by the round count): that rate in every such step is an upper estimate
  (stopping only leaves steps out); the largest over the silos.
* ``dp_fedavg``: every round the server held (as its accountant counts them), one Poisson-subsampled Gaussian of
  multiplier z at the client rate the silos report (audits run at rate 1: exactly sqrt(T) / z).
* ``pldp``: pure epsilon-DP per client, from the largest per-client epsilon of the hosts (randomized response's mu).
* ``dprivacy`` (no add/remove claim) and ``none``: no mu*; ``gdp_mu_star_basis`` says why.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from privsilo.mechanisms.events import (
    ClientLevelGaussianEvent,
    PersonalizedPoissonGaussianEvent,
    PersonalizedTrainingPlan,
    PoissonGaussianEvent,
    UserLevelGaussianEvent,
)
from privsilo.mechanisms.gdp import GDP_DELTA_SLACK, pure_dp_mu, schedule_mu
from privsilo.simulator.engine.results import RunResult

UPPER_ESTIMATE = f"an upper estimate from the pessimistic PLD, up to delta {GDP_DELTA_SLACK:g}"
BASES = {
    "dp_sgd": f"each silo's Poisson-subsampled Gaussian steps, the largest over silos; {UPPER_ESTIMATE} (exact at rate 1)",
    "uldp": f"the user-level Gaussian rounds at their user rates; {UPPER_ESTIMATE} (exact at rate 1)",
    "rpdp": (f"per level, the rate each silo plans for its budget in every local step of the host's rounds, the largest "
             f"over silos; {UPPER_ESTIMATE}"),
    "dp_fedavg": f"every held round, a Poisson-subsampled Gaussian at the client rate; {UPPER_ESTIMATE} (exact at rate 1)",
    "pldp": "pure epsilon-DP per client (the hosts' largest): randomized response's mu, exact",
    "dprivacy": "none: d-privacy makes no add/remove (epsilon, delta) claim",
    "none": "none: no privacy claim",
}


def mu_star_basis(mechanism: str) -> str:
    """What `mechanism_mu` computes mu* from for ``mechanism`` (``gdp_mu_star_basis`` in audit.json)."""
    return BASES.get(mechanism, "none: not computed for this mechanism")


def mechanism_mu(mechanism: str, result: RunResult, claims: Mapping[str, Any], budget: float | None = None) -> float | None:
    """The mechanism's mu* for the canaries of a group (rPDP: of privacy level ``budget``); None where there is
    none to compute."""
    if mechanism == "dp_sgd":
        schedules = [_merged(event for event in events if isinstance(event, PoissonGaussianEvent))
                     for events in _events_by_silo(result).values()]
        return max((schedule_mu(schedule) for schedule in schedules), default=0.0)
    if mechanism == "uldp":
        rounds = {event.round_index: event for events in _events_by_silo(result).values() for event in events
                  if isinstance(event, UserLevelGaussianEvent)}
        return schedule_mu(_merged(PoissonGaussianEvent(event.user_rate, event.noise_multiplier, 1)
                                   for _, event in sorted(rounds.items())))
    if mechanism == "dp_fedavg":
        settings = {(event.sampling_rate, event.noise_multiplier) for events in _events_by_silo(result).values()
                    for event in events if isinstance(event, ClientLevelGaussianEvent)}
        if len(settings) != 1:
            return None
        ((rate, noise_multiplier),) = settings
        return schedule_mu(((rate, noise_multiplier, len(result.rounds)),))
    if mechanism == "rpdp" and budget is not None:
        return _level_mu(result, budget)
    if mechanism == "pldp":
        epsilon = claims.get("claimed_epsilon_per_client")
        return None if epsilon is None else pure_dp_mu(epsilon)
    return None


def _level_mu(result: RunResult, budget: float) -> float | None:
    """rPDP: the largest over silos of mu* of ``budget``'s planned rate in every local step of the silo's rounds
    (None where no silo plans a rate for that budget)."""
    mus = []
    for events in _events_by_silo(result).values():
        plans = [event for event in events if isinstance(event, PersonalizedTrainingPlan)]
        rates = [float(plan.planned_rates[plan.budgets == budget].max()) for plan in plans if (plan.budgets == budget).any()]
        if rates:
            schedule = plans[0].schedule
            rounds = sum(isinstance(event, PersonalizedPoissonGaussianEvent) for event in events)
            mus.append(schedule_mu(((max(rates), schedule.noise_multiplier, schedule.local_steps * rounds),)))
    return max(mus, default=None)


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
