"""The parts of a run's result computed from its round records: ``summary.json``'s failures and timing, and the
warning when secure aggregation lost more silos than it assumed."""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from privsilo.simulator.engine.results import RoundRecord
from privsilo.simulator.scenario import Scenario


def warn_excess_dropouts(scenario: Scenario, records: Sequence[RoundRecord]) -> None:
    """One warning line when secure aggregation lost more silos in some round than ``protocol.dropout_rate``
    assumed (``summary.json`` lists those rounds)."""
    protocol = scenario.protocol
    if not protocol.secure_aggregation or scenario.mechanism.build().brings_protocol():
        return
    from privsilo.protocols.secure_aggregation import excess_dropouts, excess_warning

    rounds = ((r.report.round_index, len(r.report.participants), len(r.report.dropped)) for r in records)
    message = excess_warning(excess_dropouts(rounds, dropout_rate=protocol.dropout_rate), dropout_rate=protocol.dropout_rate)
    if message:
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def failures(scenario: Scenario, records: Sequence[RoundRecord]) -> dict[str, Any] | None:
    """``summary.json``'s ``failures``, from the round reports: crashed worker processes (each restarted before the
    next round, or the run stops), silos dropped and rounds abandoned (None for a run without injected crashes in
    which nothing failed). ``left_out`` (only when some round had one) lists every participant the protocol left
    out of a round without a crash (it refused a step or sent a malformed message), with why; ``abandoned``, each
    abandoned round's reason."""
    crashes = sum(len(r.report.crashed_workers) for r in records)
    abandoned = sum(1 for r in records if r.report.abandoned)
    left_out = [{"round": r.report.round_index + 1, "silo": silo, "reason": reason}
                for r in records for silo, reason in sorted(r.report.left_out.items())]
    if not scenario.faults.any and not (crashes or abandoned or left_out):
        return None
    failures = {"crashes": crashes, "restarts": crashes, "silos_dropped": sum(len(r.report.dropped) for r in records),
                "rounds_with_dropouts": sum(1 for r in records if r.report.dropped), "rounds_abandoned": abandoned}
    if left_out:
        failures["left_out"] = left_out
    reasons = [{"round": r.report.round_index + 1, "reason": r.report.abandoned_reason}
               for r in records if r.report.abandoned_reason]
    return {**failures, "abandoned": reasons} if reasons else failures


def timing(startup: Mapping[str, float], records: Sequence[RoundRecord], *, total_seconds: float) -> dict[str, float]:
    """``summary.json`` timing, in parts that add up: total = the start-up parts (data; workers: starting Ray and
    the worker actors and building the silos; protocol set-up) + rounds + other, and rounds = training +
    accounting (= the sum of ``metrics.csv``'s ``wall_seconds``). ``other_seconds`` is the rest: the start-up
    privacy accounting, fetching the final model, stopping the actors, the final report."""
    training = sum(r.training_seconds for r in records)
    accounting = sum(r.accounting_seconds for r in records)
    rounds = training + accounting
    return {
        **startup,
        "rounds_seconds": rounds,
        "training_seconds": training,
        "accounting_seconds": accounting,
        "seconds_per_round": rounds / len(records) if records else 0.0,
        "other_seconds": total_seconds - sum(startup.values()) - rounds,
        "total_seconds": total_seconds,
    }


def protocol_timing(setup: Mapping[str, float], records: Sequence[RoundRecord]) -> dict[str, float]:
    """The aggregation protocol's share of the run (not extra to the totals of ``timing``): its set-up seconds
    (part of ``protocol_setup_seconds``) and its mean seconds per round that ran (part of ``training_seconds``), silo side
    (the slowest participant) and server side."""
    ran = [r.report.protocol_seconds for r in records if not r.report.skipped]
    return {
        **setup,
        "protocol_round_silo_seconds": float(np.mean([p.get("silo", 0.0) for p in ran])) if ran else 0.0,
        "protocol_round_server_seconds": float(np.mean([p.get("server", 0.0) for p in ran])) if ran else 0.0,
    }
