"""The plug-in interface between the simulator's actors and an aggregation protocol.

An aggregation protocol carries one flat float64 vector per participating silo to the server, which learns
only their sum. The actors relay the protocol's messages and never look inside them. The engine drives a
protocol in two phases:

Setup, once::

    inbound = {}
    for stage in server.setup_stages:
        replies = {i: silos[i].setup_reply(stage, inbound.get(i)) for i in silos}
        inbound = server.relay(stage, replies)

Then every round, with the participants ``P`` sampled by the server *before* local training (``alive``: the
silos that have not crashed yet; a silo may crash at any step, and the protocol must finish with the others)::

    server.begin_round(round_index=r, participants=P)
    for stage in server.round_stages:                      # e.g. per-round key agreement
        replies = {i: silos[i].round_reply(stage, inbound.get(i), round_index=r) for i in alive}
        inbound = server.round_relay(stage, replies, round_index=r)
    messages = {i: silos[i].protect(vector_i, round_index=r, participants=P) for i in alive}
    requests = server.unmask_requests(messages, round_index=r)          # {}: nothing to ask
    replies = {i: silos[i].unmask_reply(requests[i], round_index=r) for i in requests if i in alive}
    while requests := server.unmask_follow_up(replies, round_index=r):  # e.g. after a consistency round
        replies = {i: silos[i].unmask_reply(requests[i], round_index=r) for i in requests if i in alive}
    total = server.combine(messages, round_index=r, participants=tuple(sorted(messages)), unmasking=replies)

``combine`` returns the sum of the vectors of every silo whose upload arrived (``participants``), or raises
``RoundAbandoned`` when the survivors cannot recover it (e.g. fewer than a secret-sharing threshold); it never
returns a wrong sum.

Protocol objects are stateful per silo (or per server) but hold no global state, and draw every random value
from a cryptographic source of their own; they import no Ray.
"""
from __future__ import annotations

import dataclasses
import enum
from abc import ABC, abstractmethod
from types import MappingProxyType
from typing import ClassVar, Mapping, Protocol, TypeVar

import numpy as np


class ProtocolStateError(RuntimeError):
    """A protocol step was called out of order or with messages/participants it cannot accept."""


class RoundAbandoned(RuntimeError):
    """Too few silos survived a round for the server to recover the sum of the uploads; the round has no result."""


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

    def round_reply(self, stage: enum.Enum, inbound: object | None, *, round_index: int) -> object | None:
        """Handle one of the server's ``round_stages`` of round ``round_index`` (protocols without any never get
        this call)."""
        raise ProtocolStateError(f"{type(self).__name__} has no per-round stages, got {stage!r}")

    def unmask_reply(self, request: object, *, round_index: int) -> object | None:
        """Answer the server's request after the uploads of round ``round_index`` (protocols whose
        ``unmask_requests`` is always empty never get this call)."""
        raise ProtocolStateError(f"{type(self).__name__} has no unmasking step")


class ServerProtocol(ABC):
    """Server side of an aggregation protocol."""

    setup_stages: ClassVar[tuple[enum.Enum, ...]]
    round_stages: ClassVar[tuple[enum.Enum, ...]] = ()
    """Stages run at the start of every round, after ``begin_round`` and before the uploads."""
    survives_missing_uploads: ClassVar[bool] = False
    """Whether ``combine`` gives the right sum when some sampled participants never uploaded (they crashed);
    where not, the engine abandons such a round."""

    def begin_round(self, *, round_index: int, participants: tuple[int, ...]) -> None:
        """Start round ``round_index`` with the sampled ``participants`` (before any ``round_stages``)."""

    def round_relay(self, stage: enum.Enum, inbound: Mapping[int, object], *, round_index: int) -> Mapping[int, object]:
        """Given the replies of the participants still present to ``stage``, return the message for each silo."""
        raise ProtocolStateError(f"{type(self).__name__} has no per-round stages, got {stage!r}")

    def unmask_requests(self, messages: Mapping[int, object], *, round_index: int) -> Mapping[int, object]:
        """Given the uploads that arrived, what each silo must send back before ``combine`` (default: nothing)."""
        return {}

    def unmask_follow_up(self, replies: Mapping[int, object], *, round_index: int) -> Mapping[int, object]:
        """Given the answers to the last requests after the uploads, the next request to each silo, or ``{}``
        when ``combine`` can go on with these answers (default: one exchange)."""
        return {}

    @abstractmethod
    def relay(self, stage: enum.Enum, inbound: Mapping[int, object]) -> Mapping[int, object]:
        """Given every silo's reply to ``stage``, return the message to deliver to each silo for the next stage."""

    @abstractmethod
    def combine(
        self,
        messages: Mapping[int, object],
        *,
        round_index: int,
        participants: tuple[int, ...],
        unmasking: Mapping[int, object] | None = None,
    ) -> np.ndarray:
        """Return the float64 sum of the vectors of ``participants`` (the silos whose upload arrived), given the
        replies to ``unmask_requests``; raise ``RoundAbandoned`` if it cannot be recovered."""


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


class ReadOnlyMappings:
    """Base of frozen message dataclasses: freezes every mapping field (``MappingProxyType``) and pickles it back
    from plain dicts (pickle cannot write a mappingproxy), so actors can send the message."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if isinstance(value, Mapping):
                object.__setattr__(self, field.name, MappingProxyType(dict(value)))

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        values = (getattr(self, field.name) for field in dataclasses.fields(self))  # type: ignore[arg-type]
        return type(self), tuple(dict(value) if isinstance(value, MappingProxyType) else value for value in values)
