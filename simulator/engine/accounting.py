"""The round loop's privacy accounting: the run's accountant, fed the silos' privacy events in silo id order."""
from __future__ import annotations

from typing import Mapping, Sequence

from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.mechanisms.events import PrivacyEvent
from privsilo.simulator.engine.messages import RoundReport, SiloInfo
from privsilo.simulator.scenario import Scenario


def record_events(accountant: PrivacyAccountant, events_by_silo: Mapping[int, Sequence[PrivacyEvent]]) -> None:
    """Feed privacy events (a round's, or the silos' start-up announcements) to the accountant, in silo id order."""
    for silo_id, events in sorted(events_by_silo.items()):
        for event in events:
            accountant.record(silo_id, event)


def start_accountant(scenario: Scenario, placement: Sequence[SiloInfo]) -> PrivacyAccountant:
    """A fresh run's accountant: the mechanism's, with every silo enrolled and its start-up announcements recorded."""
    accountant = scenario.mechanism.build().accountant()
    accountant.enrol(info.silo_id for info in placement)
    record_events(accountant, {info.silo_id: info.events for info in placement})
    return accountant


def account_round(accountant: PrivacyAccountant, scenario: Scenario, round_index: int, report: RoundReport) -> float | None:
    """Charge round ``round_index`` (held with the scenario's client rate, then the events of its ``report``); the
    run's epsilon so far (None where the mechanism gives no DP guarantee)."""
    accountant.round_held(round_index, client_rate=scenario.federation.client_rate)
    record_events(accountant, report.events)
    return accountant.report()["epsilon"]
