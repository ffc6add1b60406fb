"""Typed, immutable messages exchanged by the server and silo actors.

Protocol payloads (key advertisements, masked vectors, ...) are the protocol's own frozen dataclasses; these
envelopes carry them without looking inside.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from privsilo.mechanisms.events import PrivacyEvent


def _frozen_array(array: np.ndarray) -> np.ndarray:
    array = np.array(array, copy=True)
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class RoundBroadcast:
    """Server -> sampled silos: the global state and who takes part in this round."""

    round_index: int
    participants: tuple[int, ...]
    state: tuple[np.ndarray, ...]
    plan: Any = None  # the server mechanism's round plan (a frozen payload), see ServerMechanism.round_plan

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", tuple(_frozen_array(v) for v in self.state))


@dataclass(frozen=True)
class SiloUpdate:
    """Silo -> server: the protocol message carrying the contribution, plus public metadata."""

    sender: int
    round_index: int
    payload: Any
    events: tuple[PrivacyEvent, ...] = ()
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SiloInfo:
    """Where and how a silo actor runs, and the privacy events it announces before training (reported once)."""

    silo_id: int
    num_records: int
    node_id: str
    gpu_ids: tuple[str, ...]
    device: str
    gpu_fallback: bool
    events: tuple[PrivacyEvent, ...] = ()


@dataclass(frozen=True)
class Refusal:
    """Silo -> server, in place of a protocol reply: the silo refused the step (the protocol's message says why,
    naming the silo it blames) and sits the rest of the round out."""

    reason: str


@dataclass(frozen=True)
class RoundReport:
    """Server -> driver: what happened in one round.

    ``participants`` are the silos sampled to train; none means the round was skipped (fewer silos sampled than
    ``protocol.min_participants``): no broadcast, no training, no privacy events, the model unchanged.
    ``dropped``: participants whose worker process died during the round (``crashed_workers``: those workers'
    indices); ``abandoned``: the survivors could not recover the sum, so the model is unchanged (the uploads
    that arrived still carry their privacy events); ``left_out``: participants whose worker lives but that the
    protocol left out (a refused step or a malformed message), with why.
    """

    round_index: int
    participants: tuple[int, ...]
    loss: float
    accuracy: float
    events: Mapping[int, tuple[PrivacyEvent, ...]]
    train_loss: float
    seconds: float
    # seconds of the aggregation protocol: "silo" (the slowest participant's protect), "server" (combine)
    protocol_seconds: Mapping[str, float] = field(default_factory=dict)
    dropped: tuple[int, ...] = ()
    crashed_workers: tuple[int, ...] = ()
    abandoned: bool = False
    # participants the protocol left out of the round, each with why: a silo that refused a step (it sits the rest
    # of the round out) or one whose message the server could not use (it counts as dropped)
    left_out: Mapping[int, str] = field(default_factory=dict)
    # why an abandoned round was abandoned (the protocol's message, naming the silos concerned)
    abandoned_reason: str = ""

    @property
    def skipped(self) -> bool:
        """True when the round left the model unchanged: fewer silos were sampled than
        ``protocol.min_participants``, or the round was abandoned after dropouts."""
        return not self.participants or self.abandoned
