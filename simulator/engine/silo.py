"""One logical silo: its records, model, mechanism state, generator and protocol keys, in a plain object.

A silo is not a process: a Ray worker actor (:class:`privsilo.simulator.engine.actors.SiloWorker`) hosts one or more of them and
calls them one after another. A silo holds references only to what it was given (its own slice of the records,
its own model, generator and protocol object) and to nothing of the worker or of the other silos it shares the
worker with; ``tests/system/test_packing.py`` walks the object graph to check that.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from privsilo.mechanisms.base import LocalTraining, PrivacyBudgetError, SiloContext
from privsilo.mechanisms.canaries import SiloCanaries
from privsilo.mechanisms.events import PrivacyEvent
from privsilo.simulator.engine.protocol_setup import silo_protocol
from privsilo.simulator.engine.messages import RoundBroadcast, SiloUpdate
from privsilo.simulator.models.builtin import build_scenario_model
from privsilo.simulator.scenario import Scenario
from privsilo.simulator.engine.secure_rng import reseed_from_os_entropy
from privsilo.simulator.engine.snapshots import dump_by_reference, load_by_reference


@dataclass(frozen=True)
class SiloSpec:
    """What makes one silo: its id, the indices of its records in the training set, its generator's seed,
    with ``data.users`` the owner of each of its records, and in an audit the canaries it hosts."""

    silo_id: int
    record_ids: np.ndarray
    seed: int
    user_ids: np.ndarray | None = None
    canaries: SiloCanaries | None = None


def deterministic_kernels(device: torch.device) -> None:
    """On CUDA, have cuDNN use deterministic convolution algorithms and no autotuning (a setting of the whole
    process), so that a seed repeats a run on the same kind of device; the CPU's kernels already are."""
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def draws_on_device(device: torch.device, *, secure_rng: bool) -> bool:
    """Whether a silo's local training draws on ``device`` (``SiloContext.training_generator``): on a GPU, unless
    secure mode keeps every draw on its CPU generator, whose whole state it re-keys from OS entropy."""
    return device.type != "cpu" and not secure_rng


class Silo:
    """One silo: trains locally through its mechanism and protects the upload with its protocol object.

    Its generator starts from ``spec.seed``; with ``scenario.secure_rng`` it is re-keyed from OS entropy once the
    mechanism is built, so sampling and noise cannot be replayed from the seed. A mechanism that refuses the
    silo's budgets leaves ``refusal`` set (the worker raises it when asked for the silo's info).
    """

    def __init__(
        self,
        spec: SiloSpec,
        *,
        features: np.ndarray,
        labels: np.ndarray,
        scenario: Scenario,
        feature_shape: tuple[int, ...],
        num_classes: int,
        device: torch.device,
        user_histogram: np.ndarray | None = None,
    ) -> None:
        deterministic_kernels(device)
        self.silo_id = spec.silo_id
        self.num_records = int(labels.shape[0])
        self.record_ids = np.array(spec.record_ids)
        fed = scenario.federation
        context = SiloContext(
            silo_id=spec.silo_id,
            record_ids=np.array(spec.record_ids),
            features=torch.tensor(features, device=device),
            labels=torch.tensor(labels, device=device),
            model=build_scenario_model(scenario.model, feature_shape=feature_shape, num_classes=num_classes).to(device),
            training=LocalTraining(
                local_steps=fed.local_steps, batch_size=fed.batch_size, lr=fed.lr, rounds=fed.rounds, client_rate=fed.client_rate,
                proximal_mu=fed.proximal_mu, num_silos=scenario.data.silos,
            ),
            generator=torch.Generator().manual_seed(spec.seed),
            device=device,
            user_ids=None if spec.user_ids is None else np.array(spec.user_ids),
            user_histogram=user_histogram,
            canaries=None if spec.canaries is None or spec.canaries.are_inputs else spec.canaries,
            draws_on_device=draws_on_device(device, secure_rng=scenario.secure_rng),
        )
        mechanism = scenario.mechanism.build()
        self.refusal: PrivacyBudgetError | None = None
        try:
            self.mechanism = mechanism.silo(context)
        except PrivacyBudgetError as exc:
            self.refusal = exc
        if scenario.secure_rng:
            # Draws made while the mechanism was built (rPDP's budgets) are public and stay seeded; every later
            # draw (sampling, noise) comes from OS entropy that is never recorded.
            reseed_from_os_entropy(context.generator)
        self.protocol = silo_protocol(scenario, mechanism, context, spec.silo_id)
        self._model, self._features = context.model, context.features
        self._records = {"features": context.features, "labels": context.labels}
        self._watched: list[np.ndarray] = []
        self._watch: Any = None

    def watch_inputs(self) -> None:
        """Measurement only (attack reports, never the server): from now on note which of this silo's records local
        training feeds to the model, one array of dataset record ids per forward pass in training mode (see
        ``watched_records``; evaluation passes, such as d-privacy's choice of hypothesis, are not noted)."""
        self._watched = []
        self._watch = self._watch or self._model.register_forward_pre_hook(self._note_inputs)

    def _note_inputs(self, module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        if not module.training:
            return
        records = self._features.reshape(self.num_records, -1)
        rows = inputs[0].detach().reshape(inputs[0].shape[0], -1)
        self._watched.append(self.record_ids[[int(torch.nonzero((records == row).all(dim=1))[0, 0]) for row in rows]])

    def watched_records(self) -> list[np.ndarray]:
        """Stop watching and return the record ids noted since ``watch_inputs`` (an identical copy of a record
        counts as the first one)."""
        if self._watch is not None:
            self._watch.remove()
            self._watch = None
        return self._watched

    def snapshot(self) -> bytes:
        """This silo's whole state without its records and its model's parameters (see :mod:`privsilo.simulator.engine.snapshots`):
        every round loads the broadcast global state into the parameters before using them, so their values
        between rounds are never read (buffers, such as a normalisation's running statistics, are kept)."""
        return dump_by_reference(self, self._references())

    def restored(self, blob: bytes) -> "Silo":
        """The silo a :meth:`snapshot` describes, holding this (freshly built) silo's records and parameters."""
        return load_by_reference(blob, self._references())

    def _references(self) -> dict[str, Any]:
        """What a snapshot writes as references: the records, and the model's parameters by name."""
        return {**self._records, **{f"parameter {name}": value for name, value in self._model.named_parameters()}}

    def setup_events(self) -> tuple[PrivacyEvent, ...]:
        if self.refusal is not None:
            raise self.refusal
        return self.mechanism.setup_events()

    def train(self, broadcast: RoundBroadcast) -> SiloUpdate:
        contribution = self.mechanism.contribute_with_plan(broadcast.state, round_index=broadcast.round_index, plan=broadcast.plan)
        started = time.perf_counter()
        payload = self.protocol.protect(contribution.payload(), round_index=broadcast.round_index, participants=broadcast.participants)
        return SiloUpdate(
            sender=self.silo_id,
            round_index=broadcast.round_index,
            payload=payload,
            events=contribution.events,
            metrics={**contribution.metrics, "protocol_seconds": time.perf_counter() - started},
        )
