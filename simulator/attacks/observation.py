"""What the attacking server holds for one silo's upload of one round, and how it reads it as a gradient.

An honest-but-curious server sees exactly one protocol message per participating silo (the server inbox), and
knows what it broadcast and the public settings of the federation. :class:`Observation` holds only those; the
records the silo actually trained on (the ground truth of an attack report) live elsewhere
(:class:`privsilo.simulator.attacks.runner.GroundTruth`) and never enter an observation.

The upload is read by its mechanism's form (``Mechanism.upload_form``, `privsilo.mechanisms.base`) into a
:class:`ModelChange`: which broadcast hypothesis the silo trained and the model change ``delta``. FedAvg's
``[weight x delta, weight]`` (McMahan et al. 2017) has one hypothesis and gives ``delta`` after division by the
weight; d-privacy's parameters ``theta_j + delta' + noise`` (Galli et al., ICISSP 2023) do not say j, so the
attacker takes the hypothesis nearest to the upload in Euclidean distance (exact for k = 1) and subtracts it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from privsilo.protocols.plain import PlainVector
from privsilo.protocols.secure_aggregation import MaskedVector
from privsilo.mechanisms.base import TRAINED_PARAMETERS, WEIGHTED_DELTA
from privsilo.simulator.errors import ScenarioError


@dataclass(frozen=True)
class ModelChange:
    """An upload read as the model change of a silo's local training: the index of the broadcast hypothesis it
    started from (as the attacker infers it) and ``delta`` (flat float64, ``model_to_vector`` order)."""

    hypothesis: int
    delta: np.ndarray


def delta_of_weighted_upload(vector: np.ndarray, hypotheses: tuple[np.ndarray, ...]) -> ModelChange:
    """``[weight x delta, weight]`` -> delta, from the single broadcast model."""
    return ModelChange(hypothesis=0, delta=vector[:-1] / vector[-1])


def delta_of_uploaded_parameters(vector: np.ndarray, hypotheses: tuple[np.ndarray, ...]) -> ModelChange:
    """Parameters ``theta_j + delta' + noise`` -> ``upload - theta_j`` for the hypothesis j nearest the upload."""
    distances = [float(np.linalg.norm(vector - theta)) for theta in hypotheses]
    nearest = int(np.argmin(distances))
    return ModelChange(hypothesis=nearest, delta=vector - hypotheses[nearest])


@dataclass(frozen=True)
class UploadReading:
    """How to read one upload form: its length beyond the model's n parameters, and the reading itself."""

    extra_values: int
    description: str
    read: Callable[[np.ndarray, tuple[np.ndarray, ...]], ModelChange]


UPLOAD_READINGS: dict[str, UploadReading] = {
    WEIGHTED_DELTA: UploadReading(1, "a model delta with its weight", delta_of_weighted_upload),
    TRAINED_PARAMETERS: UploadReading(0, "the model's parameters", delta_of_uploaded_parameters),
}


@dataclass(frozen=True)
class Observation:
    """One upload as the server received it, with the public knowledge the attack may use.

    ``payload``: the server-inbox message (a ``PlainVector``, or a ``MaskedVector`` under secure aggregation);
    ``hypotheses``: the global state the server broadcast that round, one flat float64 vector per hypothesis
    (``model_to_vector`` order; one for every mechanism but d-privacy with k > 1);
    ``mechanism``, ``model``, ``feature_shape``, ``num_classes``: the scenario's public choices; ``upload_form``:
    the mechanism's (``Mechanism.upload_form``);
    ``lr``, ``local_steps``, ``batch_size``: the silo's local SGD settings (``local_steps``: the steps it runs,
    one per epoch for d-privacy's ``local_epochs`` on a silo of one batch); ``silo_records``: the silo's record
    count (``placement``; FedAvg's upload carries it as its weight): with at most ``batch_size`` records every
    local step uses all of them; ``max_grad_norm``: the public per-record clipping bound of a DP mechanism (None
    without clipping); ``max_update_norm``: the public radius to which the silo clips its whole delta
    (d-privacy's ``radius``; None without clipping); ``fractional_bits``: the public precision of the
    secure-aggregation codec.
    """

    payload: Any
    hypotheses: tuple[np.ndarray, ...]
    mechanism: str
    upload_form: str
    model: str
    feature_shape: tuple[int, ...]
    num_classes: int
    lr: float
    local_steps: int
    batch_size: int
    silo_records: int
    max_grad_norm: float | None
    max_update_norm: float | None
    fractional_bits: int

    @property
    def steps_share_batch(self) -> bool:
        """True when every local step trains on the same records (the silo holds no more than one batch)."""
        return self.silo_records <= self.batch_size

    @property
    def records_in_round(self) -> int:
        """How many records the attacker reconstructs: one batch, or one per step when batches differ."""
        return self.batch_size if self.steps_share_batch else self.batch_size * self.local_steps

    def uploaded_vector(self) -> np.ndarray:
        """The payload as float64 values: a plain vector as it is; a masked one read as the server would read an
        encoding (signed 64-bit words times 2^-fractional_bits), which without the masks' keys is noise."""
        if isinstance(self.payload, PlainVector):
            return np.asarray(self.payload.values, dtype=np.float64)
        if isinstance(self.payload, MaskedVector):
            return self.payload.data.view(np.int64).astype(np.float64) * 2.0 ** -self.fractional_bits
        raise TypeError(f"cannot read a {type(self.payload).__name__} as an upload")

    def model_change(self) -> ModelChange:
        """The upload read by its mechanism's form; refuses (exit 2) an upload of another length."""
        reading = UPLOAD_READINGS[self.upload_form]
        vector, size = self.uploaded_vector(), self.hypotheses[0].size
        if vector.size != size + reading.extra_values:
            raise ScenarioError(
                "mechanism.name", self.mechanism,
                f"its upload has {vector.size} values where {reading.description} has {size + reading.extra_values}: not gradient-like",
            )
        return reading.read(vector, self.hypotheses)

    def start(self) -> np.ndarray:
        """The broadcast hypothesis the attacker takes the silo to have trained."""
        return self.hypotheses[self.model_change().hypothesis]

    def observed_gradient(self) -> np.ndarray:
        """``-delta / lr``: the sum over the local steps of the (clipped, noisy) mean gradients, exactly the
        gradient of the batch for a single plain step."""
        return -self.model_change().delta / self.lr


__all__ = ["ModelChange", "Observation", "UPLOAD_READINGS", "UploadReading"]
