"""The attacked silos against their records, known before torch or Ray load (``privsilo validate`` and
``privsilo attack`` check them first): the local SGD steps a silo runs and whether its batch fits its records."""
from __future__ import annotations

from typing import TYPE_CHECKING

from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import attacked_epochs

if TYPE_CHECKING:
    from privsilo.simulator.data.types import Dataset
    from privsilo.simulator.scenario import Scenario


def local_steps_run(scenario: Scenario) -> int:
    """The SGD steps of a silo's local training: ``federation.local_steps``, or for a mechanism that trains epochs
    (d-privacy) with ``mechanism.local_epochs`` E one step per epoch (the scenario's checks confine it to silos of one batch)."""
    epochs = attacked_epochs(scenario)
    return scenario.federation.local_steps if epochs is None else epochs


def check_target(scenario: Scenario, *, silo: int, records: int) -> None:
    """Refuse (exit 2) a batch larger than the target's records, and iDLG on a round that trains several records."""
    batch, steps = scenario.federation.batch_size, local_steps_run(scenario)
    if batch > records:
        raise ScenarioError("attack.batch_size", batch, f"larger than silo {silo}'s {records} records")
    if scenario.attack.method == "idlg" and steps > 1 and records > 1:
        raise ScenarioError(
            "attack.method", "idlg",
            f"idlg reads the label of a single record, but silo {silo} trains {steps} local steps on its {records} "
            "records; use dlg, federation.local_steps = 1 or data.max_records_per_silo = 1",
        )


def check_targets_fit(scenario: Scenario, dataset: Dataset) -> None:
    """:func:`check_target` for every target silo of the scenario's attack block, from the partition the run
    will draw (:func:`privsilo.simulator.data.silos.silo_records`); nothing without an attack block."""
    from privsilo.simulator.data.silos import silo_records

    if scenario.attack is None:
        return
    parts, _ = silo_records(scenario, dataset)
    for silo in scenario.attack.targets:
        check_target(scenario, silo=silo, records=len(parts[silo]))
