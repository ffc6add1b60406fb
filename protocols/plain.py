"""Plain summation: every silo sends its vector in the clear (used when secure aggregation is off).

Threat model: none. The server sees every participant's individual vector; only use this when the mechanism
does not rely on the server learning nothing but the sum.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar, Mapping

import numpy as np

from privsilo.protocols.base import (
    ProtocolStateError,
    ServerProtocol,
    SiloProtocol,
    check_participants,
    check_round_index,
    collect_round_messages,
    read_only,
)


@dataclass(frozen=True)
class PlainVector:
    """One silo's vector for one round, unprotected (``values`` is a read-only float64 array)."""

    sender: int
    round_index: int
    values: np.ndarray


class PlainSumSilo(SiloProtocol):
    """Silo side of plain summation: wraps the vector in a ``PlainVector``."""

    def __init__(self, silo_id: int) -> None:
        self.silo_id = silo_id

    def setup_reply(self, stage: enum.Enum, inbound: object | None) -> object | None:
        """Plain summation has no setup stages, so any call is out of order."""
        raise ProtocolStateError(f"plain summation has no setup stages, got {stage!r}")

    def protect(self, vector: np.ndarray, *, round_index: int, participants: tuple[int, ...]) -> PlainVector:
        """Return a read-only copy of ``vector`` addressed to the server."""
        check_round_index(round_index)
        if self.silo_id not in check_participants(participants):
            raise ProtocolStateError(f"silo {self.silo_id} is not among the participants {participants!r}")
        values = np.array(vector, dtype=np.float64)
        if values.ndim != 1:
            raise ValueError(f"expected a flat vector, got shape {values.shape}")
        return PlainVector(sender=self.silo_id, round_index=round_index, values=read_only(values))


class PlainSumServer(ServerProtocol):
    """Server side of plain summation: adds the participants' vectors in participant order."""

    setup_stages: ClassVar[tuple[enum.Enum, ...]] = ()
    survives_missing_uploads: ClassVar[bool] = True

    def relay(self, stage: enum.Enum, inbound: Mapping[int, object]) -> Mapping[int, object]:
        """Plain summation has no setup stages, so any call is out of order."""
        raise ProtocolStateError(f"plain summation has no setup stages, got {stage!r}")

    def combine(
        self,
        messages: Mapping[int, object],
        *,
        round_index: int,
        participants: tuple[int, ...],
        unmasking: Mapping[int, object] | None = None,
    ) -> np.ndarray:
        """Return the float64 sum of the participants' ``PlainVector`` messages (nothing to unmask)."""
        vectors = self.vectors(messages, round_index=round_index, participants=participants)
        lengths = {vector.shape for vector in vectors}
        if len(lengths) != 1:
            raise ProtocolStateError(f"round {round_index}: participants sent vectors of shapes {sorted(lengths)}")
        total = np.zeros_like(vectors[0])
        for vector in vectors:
            total += vector
        return total

    def vectors(
        self, messages: Mapping[int, object], *, round_index: int, participants: tuple[int, ...]
    ) -> tuple[np.ndarray, ...]:
        """Every participant's vector, in ``participants`` order (plain summation hides none of them); for
        mechanisms that need individual contributions, whose lengths may differ (e.g. a silo that sends its
        audit canary clients' uploads after its own)."""
        messages = collect_round_messages(
            messages, message_type=PlainVector, round_index=round_index, participants=participants
        )
        return tuple(message.values for message in messages)
