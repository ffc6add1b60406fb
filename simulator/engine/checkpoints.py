"""The round loop's checkpoints: what a run's checkpoint holds, saving one after a round, and reading one back to
resume (the file format, its header and its checks are ``privsilo.simulator.run_dir.checkpoint``'s)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.simulator.run_dir.checkpoint import check_parts, read_checkpoint, write_checkpoint
from privsilo.simulator.engine.federation import Federation
from privsilo.simulator.personalisation.evaluation import PersonalisedEvaluator
from privsilo.simulator.engine.results import RoundRecord
from privsilo.simulator.scenario import Scenario

# What a run's checkpoint holds (besides the federation's snapshots), by name and type: a file of the right format
# and digest without them is not a run's checkpoint and is refused before anything is started from it.
CHECKPOINT_PARTS: dict[str, type | tuple[type, ...]] = {
    "accountant": PrivacyAccountant, "records": list, "packing": (tuple, list), "evaluator": (tuple, type(None)),
    "server": bytes, "silos": dict,
}


def read_run_checkpoint(directory: Path, scenario: Scenario) -> dict[str, Any]:
    """The checkpoint in ``directory``, refused unless it is one of ``scenario``'s runs with every part."""
    checkpoint = read_checkpoint(directory, scenario=scenario.to_dict(every_key=True))
    check_parts(checkpoint, CHECKPOINT_PARTS, directory=directory)
    return checkpoint


def resume_progress(checkpoint: Mapping[str, Any],
                    evaluator: PersonalisedEvaluator | None) -> tuple[PrivacyAccountant, list[RoundRecord]]:
    """The accountant and round records a checkpoint holds; a personalised run's ``evaluator`` takes its history."""
    if evaluator is not None:
        evaluator.history, evaluator.final_state = checkpoint["evaluator"]
    return checkpoint["accountant"], list(checkpoint["records"])


def save_checkpoint(directory: Path, scenario: Scenario, federation: Federation, *, accountant: PrivacyAccountant,
                    records: Sequence[RoundRecord], evaluator: PersonalisedEvaluator | None,
                    resume_with: Mapping[str, Any]) -> None:
    """Write the run's checkpoint after its latest round: the driver's state (accountant, records, packing, the
    personalised evaluator's history) and the federation's snapshots; ``resume_with`` goes into its header."""
    write_checkpoint(directory, {
        "accountant": accountant, "records": records, "packing": federation.packing,
        "evaluator": None if evaluator is None else (evaluator.history, evaluator.final_state),
        **federation.checkpoint_state(),
    }, scenario=scenario.to_dict(every_key=True), resume_with=resume_with)
