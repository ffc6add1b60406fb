"""The round loop: the federation runs the scenario's rounds, each accounted, logged as it ends and, every
``checkpoint.every`` rounds, checkpointed; then the run's result is collected."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Mapping

from tqdm.auto import tqdm

from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.mechanisms.canaries import SiloCanaries
from privsilo.simulator.engine.accounting import account_round, start_accountant
from privsilo.simulator.engine.background import in_background
from privsilo.simulator.engine.checkpoints import read_run_checkpoint, resume_progress, save_checkpoint
from privsilo.simulator.engine.federation import Federation
from privsilo.simulator.engine.live import LiveOutput
from privsilo.simulator.engine.run_summary import failures, protocol_timing, timing, warn_excess_dropouts
from privsilo.simulator.personalisation.evaluation import PersonalisedEvaluator, personalised_evaluator
from privsilo.simulator.engine.results import RoundRecord, RunResult
from privsilo.simulator.scenario import Scenario


def run_rounds(scenario: Scenario, *, progress: bool, checkpoint_dir: Path | None = None, resume: bool = False,
               import_reports: bool = False, canaries: Mapping[int, SiloCanaries] | None = None,
               on_round: Callable[[Federation], None] | None = None, output: LiveOutput | None = None) -> RunResult:
    """The round loop; with ``checkpoint_dir`` a checkpoint every ``checkpoint.every`` rounds, and with ``resume``
    the run continues from the checkpoint there (see ``privsilo.simulator.run_dir.checkpoint``). ``import_reports``: import
    the report code (matplotlib) in a thread once the actors are ready, while the driver mostly waits for the
    rounds (during the start-up it would slow the driver's own work). ``output``: what the run writes as it goes."""
    checkpoint = read_run_checkpoint(checkpoint_dir, scenario) if resume else None
    every = scenario.checkpoint.every if checkpoint_dir is not None else 0
    output = output or LiveOutput()
    t0 = time.perf_counter()
    with (Federation(scenario, snapshots=every > 0, resume_from=checkpoint, canaries=canaries) as federation,
          output.open(first_round=0 if checkpoint is None else len(checkpoint["records"]))):
        if import_reports:
            in_background(_reports_module)
        evaluator = personalised_evaluator(scenario, federation.dataset, federation.parts)
        if checkpoint is None:
            accountant, records = start_accountant(scenario, federation.placement), []
        else:
            accountant, records = resume_progress(checkpoint, evaluator)
        first = len(records)
        bar = tqdm(range(first, scenario.federation.rounds), desc=scenario.name, unit="round", disable=not progress,
                   initial=first, total=scenario.federation.rounds)
        for round_index in bar:
            record = _play_round(scenario, federation, round_index, accountant=accountant, evaluator=evaluator,
                                 on_round=on_round)
            records.append(record)
            bar.set_postfix(acc=f"{record.report.accuracy:.3f}", eps="-" if record.epsilon is None else f"{record.epsilon:.2f}")
            output.round_done(record)
            if every and (round_index + 1) % every == 0:
                save_checkpoint(checkpoint_dir, scenario, federation, accountant=accountant, records=records,
                                evaluator=evaluator, resume_with=output.resume_with)
        model_state = federation.model_state()
        placement = federation.placement
        users = None if federation.users is None else federation.users.summary()
        personalisation = None if evaluator is None else evaluator.summary()
        startup = dict(federation.timing)
        construction = federation.silo_construction_seconds
        packing = federation.packing
        protocol_setup = dict(federation.protocol_timing)
    warn_excess_dropouts(scenario, records)
    privacy = accountant.report()
    ran = records[first:]
    return RunResult(
        scenario=scenario,
        rounds=tuple(records),
        privacy=privacy,
        timing={**timing(startup, ran, total_seconds=time.perf_counter() - t0), "silo_construction_seconds": construction,
                **protocol_timing(protocol_setup, ran)},
        placement=placement,
        model_state=model_state,
        users=users,
        packing=packing,
        personalisation=personalisation,
        failures=failures(scenario, records),
        resumed_from_round=first if checkpoint is not None else None,
    )


def _play_round(scenario: Scenario, federation: Federation, round_index: int, *, accountant: PrivacyAccountant,
                evaluator: PersonalisedEvaluator | None, on_round: Callable[[Federation], None] | None) -> RoundRecord:
    """One round: the federation runs it (bringing back the workers that crashed in it), ``on_round`` looks at the
    federation, a personalised run evaluates the hypothesis each client picks, and the accountant charges it."""
    started = time.perf_counter()
    report = federation.run_round(round_index)
    if report.crashed_workers:
        federation.recover(report.crashed_workers, round_index=round_index)
    if on_round is not None:
        on_round(federation)
    if evaluator is not None:  # personalised: loss and accuracy of the hypothesis each client picks
        report = evaluator.after_round(report, federation.global_state())
    trained = time.perf_counter()
    epsilon = account_round(accountant, scenario, round_index, report)
    return RoundRecord(report=report, epsilon=epsilon, training_seconds=trained - started,
                       accounting_seconds=time.perf_counter() - trained)


def _reports_module() -> None:
    """Import ``privsilo.simulator.run_dir.writers`` (and so matplotlib)."""
    from privsilo.simulator.run_dir import writers as reports  # noqa: F401
