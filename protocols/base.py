"""The plug-in interface between the simulator's actors and an aggregation protocol.

An aggregation protocol carries one flat float64 vector per participating silo to the server, which learns
only their sum. The actors relay the protocol's messages and never look inside them. The engine drives a
protocol in two phases:

Setup, once::

    inbound = {}
    for stage in server.setup_stages:
        replies = {i: silos[i].setup_reply(stage, inbound.get(i)) for i in silos}
        inbound = server.relay(stage, replies)

Then every round, with the participants ``P`` sampled by the server *before* local training::

    messages = {i: silos[i].protect(vector_i, round_index=r, participants=P) for i in P}
    total = server.combine(messages, round_index=r, participants=P)

Protocol objects are stateful per silo (or per server) but hold no global state, and draw every random value
from a cryptographic source of their own; they import no Ray.
"""
from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import ClassVar, Mapping, Protocol, TypeVar

import numpy as np


class ProtocolStateError(RuntimeError):
    """A protocol step was called out of order or with messages/participants it cannot accept."""


class SiloProtocol(ABC):
    """Silo side of an aggregation protocol."""

    @abstractmethod
    def setup_reply(self, stage: enum.Enum, inbound: object | None) -> object | None:
        """Handle one setup stage.

        ``inbound`` is what the server relayed to this silo after the previous stage (``None`` for the first
        stage); return this silo's message for ``stage`` (or ``None``).
        """

    @abstractmethod
    def protect(self, vector: np.ndarray, *, round_index: int, participants: tuple[int, ...]) -> object:
        """Return the message that carries this silo's float64 vector to the server for summation."""


class ServerProtocol(ABC):
    """Server side of an aggregation protocol."""

    setup_stages: ClassVar[tuple[enum.Enum, ...]]

    @abstractmethod
    def relay(self, stage: enum.Enum, inbound: Mapping[int, object]) -> Mapping[int, object]:
        """Given every silo's reply to ``stage``, return the message to deliver to each silo for the next stage."""

    @abstractmethod
    def combine(
        self, messages: Mapping[int, object], *, round_index: int, participants: tuple[int, ...]
    ) -> np.ndarray:
        """Return the float64 sum of the participants' vectors."""


class RoundMessage(Protocol):
    """What every per-round protocol message carries besides its payload."""

    sender: int
    round_index: int


MessageT = TypeVar("MessageT", bound=RoundMessage)


def check_participants(participants: tuple[int, ...]) -> frozenset[int]:
    """Return ``participants`` as a set after checking that it is non-empty and has no repeated silo."""
    members = frozenset(participants)
    if not participants:
        raise ProtocolStateError("a round needs at least one participant")
    if len(members) != len(participants):
        raise ProtocolStateError(f"participants {participants!r} name a silo more than once")
    return members


def check_round_index(round_index: int) -> None:
    """Reject a round index that is not a non-negative integer."""
    if isinstance(round_index, bool) or not isinstance(round_index, int) or round_index < 0:
        raise ProtocolStateError(f"round_index must be a non-negative int, got {round_index!r}")


def collect_round_messages(
    messages: Mapping[int, object],
    *,
    message_type: type[MessageT],
    round_index: int,
    participants: tuple[int, ...],
) -> tuple[MessageT, ...]:
    """Check one round's messages on the server side and return them in ``participants`` order.

    Every participant must have sent exactly one ``message_type`` for ``round_index`` under its own id, and no
    one else may have sent anything.
    """
    check_round_index(round_index)
    members = check_participants(participants)
    missing = sorted(members - messages.keys())
    unexpected = sorted(messages.keys() - members)
    if missing or unexpected:
        raise ProtocolStateError(f"round {round_index}: missing messages from {missing}, unexpected from {unexpected}")
    collected = []
    for silo_id in participants:
        message = messages[silo_id]
        if not isinstance(message, message_type):
            raise ProtocolStateError(
                f"round {round_index}: silo {silo_id} sent {type(message).__name__}, expected {message_type.__name__}"
            )
        if message.sender != silo_id or message.round_index != round_index:
            raise ProtocolStateError(
                f"round {round_index}: message delivered for silo {silo_id} claims sender {message.sender} "
                f"and round {message.round_index}"
            )
        collected.append(message)
    return tuple(collected)


def read_only(array: np.ndarray) -> np.ndarray:
    """Return ``array`` with its write flag cleared, so a frozen message cannot be changed through it."""
    array.flags.writeable = False
    return array
