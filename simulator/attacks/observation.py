"""What the attacking server holds for one silo's upload of one round, and how it reads it as a gradient.

An honest-but-curious server sees exactly one protocol message per participating silo (the server inbox), and
knows what it broadcast and the public settings of the federation. :class:`Observation` holds only those; the
records the silo actually trained on (the ground truth of an attack report) live elsewhere
(:class:`simulator.attacks.runner.GroundTruth`) and never enter an observation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from protocols.plain import PlainVector
from protocols.secure_aggregation import MaskedVector


@dataclass(frozen=True)
class Observation:
    """One upload as the server received it, with the public knowledge the attack may use.

    ``payload``: the server-inbox message (a ``PlainVector``, or a ``MaskedVector`` under secure aggregation);
    ``state``: the global model the server broadcast that round (flat float64, ``model_to_vector`` order);
    ``mechanism``, ``model``, ``feature_shape``, ``num_classes``: the scenario's public choices;
    ``lr``, ``local_steps``, ``batch_size``: the federation's local SGD settings; ``silo_records``: the silo's
    record count (``placement``; FedAvg's upload carries it as its weight): with at most ``batch_size`` records
    every local step uses all of them; ``max_grad_norm``: the public per-record clipping bound of a DP mechanism
    (None without clipping); ``fractional_bits``: the public precision of the secure-aggregation codec.
    """

    payload: Any
    state: np.ndarray
    mechanism: str
    model: str
    feature_shape: tuple[int, ...]
    num_classes: int
    lr: float
    local_steps: int
    batch_size: int
    silo_records: int
    max_grad_norm: float | None
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

    def observed_gradient(self) -> np.ndarray:
        """``-delta / lr`` from the upload ``[weight x delta, weight]``: the sum over the local steps of the
        (clipped, noisy) mean gradients, exactly the gradient of the batch for a single plain step."""
        vector = self.uploaded_vector()
        return -(vector[:-1] / vector[-1]) / self.lr


__all__ = ["Observation"]
