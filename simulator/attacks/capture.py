"""Capturing an attacked round: the uploads the server receives (for the attack) and, kept apart, the records the
target silos trained on (for the report).

:func:`capture_round` runs a scenario's federation up to ``attack.round`` and returns a :class:`RoundCapture`:
per target silo an :class:`~privsilo.simulator.attacks.observation.Observation` built only from the server inbox, the
broadcast global state (every hypothesis, for d-privacy) and public settings, among them the local training the
silo runs (:func:`local_steps_run`), and a :class:`GroundTruth` that the simulator notes inside the silo
(``Silo.watch_inputs``: which records its local training fed to the model) and hands to the report only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from privsilo.simulator.attacks.inversion import check_has_gradients
from privsilo.simulator.attacks.observation import Observation
from privsilo.simulator.attacks.targets import check_target, local_steps_run
from privsilo.simulator.data import Dataset
from privsilo.simulator.engine import Federation
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.models.builtin import build_model
from privsilo.simulator.scenario import Scenario


@dataclass(frozen=True)
class GroundTruth:
    """For the report only, never for the attack: the dataset records (ids, features, labels) a target silo
    trained on in the attacked round, one row per record the attacker reconstructs (one batch, or every step's
    batch when the steps used different records; empty when a DP step happened to sample none)."""

    record_ids: np.ndarray
    features: np.ndarray
    labels: np.ndarray


@dataclass(frozen=True)
class RoundCapture:
    """The attacked round (1-based), who took part, and per target silo its observation and ground truth."""

    round: int
    participants: tuple[int, ...]
    observations: Mapping[int, Observation]
    truths: Mapping[int, GroundTruth]


def make_observation(
    scenario: Scenario, *, payload: Any, hypotheses: tuple[np.ndarray, ...], silo_records: int, dataset: Dataset
) -> Observation:
    """An observation from a server-inbox message and what the server knows anyway (scenario, broadcast, placement)."""
    fed, name, params = scenario.federation, scenario.mechanism.name, scenario.mechanism.params
    return Observation(
        payload=payload,
        hypotheses=tuple(np.asarray(h, dtype=np.float64) for h in hypotheses),
        mechanism=name,
        upload_form=scenario.mechanism.plugin.upload_form,
        model=scenario.model.name,
        feature_shape=tuple(dataset.feature_shape),
        num_classes=dataset.num_classes,
        lr=fed.lr,
        local_steps=local_steps_run(scenario),
        batch_size=fed.batch_size,
        silo_records=silo_records,
        max_grad_norm=params.max_grad_norm if params.clips_record_gradients() else None,
        max_update_norm=params.update_clip_norm(),
        fractional_bits=scenario.protocol.fractional_bits,
    )


def ground_truth(watched: list[np.ndarray], *, dataset: Dataset, steps_share_batch: bool) -> GroundTruth:
    """The records behind the forward passes a silo's local training made: once each when every step used the
    same batch, else every step's batch in turn."""
    ids = np.concatenate([np.asarray(w, dtype=np.int64) for w in watched]) if watched else np.zeros(0, dtype=np.int64)
    if steps_share_batch:
        ids = ids[np.sort(np.unique(ids, return_index=True)[1])]
    return GroundTruth(record_ids=ids, features=dataset.x_train[ids], labels=dataset.y_train[ids])


def capture_round(scenario: Scenario) -> RoundCapture:
    """Run the federation (in the open Ray session) up to ``attack.round`` and capture that round for every target."""
    attack = scenario.attack
    with Federation(scenario) as federation:
        dataset = federation.dataset
        check_has_gradients(build_model(scenario.model.name, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes),
                            name=scenario.model.name)
        records = {info.silo_id: info.num_records for info in federation.placement}
        for silo in attack.targets:
            check_target(scenario, silo=silo, records=records[silo])
        for round_index in range(attack.round - 1):
            federation.run_round(round_index)
        hypotheses = federation.global_state()
        federation.watch_inputs(attack.targets)
        report = federation.run_round(attack.round - 1)
        watched = federation.watched_records(attack.targets)
        inbox = federation.server_inbox()
    check_sampled(scenario, participants=report.participants)
    observations = {s: make_observation(scenario, payload=inbox[s], hypotheses=hypotheses, silo_records=records[s], dataset=dataset) for s in attack.targets}
    truths = {s: ground_truth(watched[s], dataset=dataset, steps_share_batch=observations[s].steps_share_batch) for s in attack.targets}
    return RoundCapture(round=attack.round, participants=report.participants, observations=observations, truths=truths)


def check_sampled(scenario: Scenario, *, participants: tuple[int, ...]) -> None:
    """Refuse (exit 2) an attack on a silo that did not upload in the attacked round."""
    for silo in scenario.attack.targets:
        if silo not in participants:
            sampled = ", ".join(map(str, participants)) or "none: the round was skipped"
            raise ScenarioError("attack.target_silo", silo, f"silo {silo} was not sampled in round {scenario.attack.round} (participants: {sampled})")


__all__ = ["GroundTruth", "RoundCapture", "capture_round", "check_sampled", "check_target", "ground_truth", "local_steps_run", "make_observation"]
