"""Checks shared by both sides of secure aggregation: silo ids, the minimum round size and the codec's headroom."""
from __future__ import annotations

from privsilo.protocols.base import ProtocolStateError
from privsilo.protocols.fixed_point import FixedPointCodec


def check_silo_id(silo_id: int) -> None:
    if isinstance(silo_id, bool) or not isinstance(silo_id, int) or not 0 <= silo_id < 2**63:
        raise ValueError(f"silo ids must be non-negative ints below 2^63, got {silo_id!r}")


def check_minimum(min_participants: int, codec: FixedPointCodec) -> None:
    if isinstance(min_participants, bool) or not isinstance(min_participants, int) or min_participants < 2:
        raise ValueError(f"min_participants must be an int >= 2 (one vector is its own sum), got {min_participants!r}")
    if min_participants > codec.max_summands:
        raise ValueError(f"min_participants {min_participants} exceeds the codec's max_summands {codec.max_summands}")


def check_count(count: int, *, min_participants: int, codec: FixedPointCodec, who: str) -> None:
    """Refuse a sum of fewer than ``min_participants`` or more than ``codec.max_summands`` vectors."""
    if count < min_participants:
        raise ProtocolStateError(
            f"{who}: a round of {count} participant(s) is below the minimum of {min_participants}; "
            "a sum of so few vectors would reveal them"
        )
    if count > codec.max_summands:
        raise ProtocolStateError(f"{who}: {count} participants exceed the codec's headroom for {codec.max_summands} summands")
