"""Server side of pairwise-masking secure aggregation (Bonawitz et al., CCS 2017): relays keys, adds masked vectors."""
from __future__ import annotations

import enum
from typing import ClassVar, Mapping

import numpy as np

from protocols.base import ProtocolStateError, ServerProtocol, collect_round_messages
from protocols.fixed_point import FixedPointCodec
from protocols.secure_aggregation.limits import check_minimum, check_round_size
from protocols.secure_aggregation.masks import build_key_directory
from protocols.secure_aggregation.messages import KeyAgreementDone, KeyDirectory, MaskedVector, SecAggStage


class SecAggServer(ServerProtocol):
    """Server side of pairwise-masking secure aggregation: relays public keys, adds masked vectors.

    It only ever holds public keys and masked vectors, and combines only rounds of at least
    ``min_participants`` (>= 2) and at most ``codec.max_summands`` participants.
    """

    setup_stages: ClassVar[tuple[enum.Enum, ...]] = tuple(SecAggStage)

    def __init__(self, *, codec: FixedPointCodec, min_participants: int = 2) -> None:
        check_minimum(min_participants, codec)
        self.codec = codec
        self.min_participants = min_participants
        self._next_stage: SecAggStage | None = SecAggStage.ADVERTISE_KEYS
        self._directory = KeyDirectory(public_keys={})

    def relay(self, stage: enum.Enum, inbound: Mapping[int, object]) -> Mapping[int, object]:
        """After ``ADVERTISE_KEYS`` send every silo the ``KeyDirectory``; after ``AGREE_KEYS`` check every silo
        acknowledged and send nothing (an empty mapping)."""
        if stage is not self._next_stage:
            raise ProtocolStateError(f"server: got setup stage {stage!r}, expected {self._next_stage!r}")
        if stage is SecAggStage.ADVERTISE_KEYS:
            self._directory = build_key_directory(inbound)
            self._next_stage = SecAggStage.AGREE_KEYS
            return {silo_id: self._directory for silo_id in self._directory.public_keys}
        if inbound.keys() != self._directory.public_keys.keys():
            raise ProtocolStateError(
                f"server: AGREE_KEYS replies from {sorted(inbound)}, expected {sorted(self._directory.public_keys)}"
            )
        for silo_id, reply in inbound.items():
            if reply != KeyAgreementDone(sender=silo_id):
                raise ProtocolStateError(f"server: silo {silo_id} answered AGREE_KEYS with {reply!r}")
        self._next_stage = None
        return {}

    def combine(
        self,
        messages: Mapping[int, object],
        *,
        round_index: int,
        participants: tuple[int, ...],
        unmasking: Mapping[int, object] | None = None,
    ) -> np.ndarray:
        """Add the participants' ``MaskedVector`` messages modulo 2^64 (masks cancel) and decode the sum.

        Raises ``ProtocolStateError`` for a round below ``min_participants`` (defence in depth: the engine skips
        such rounds) and ``EncodingOverflowError`` if the decoded sum is out of range (an unchecked encoding).
        """
        if self._next_stage is not None:
            raise ProtocolStateError("server: combine called before setup finished")
        check_round_size(participants, min_participants=self.min_participants, codec=self.codec, who="server")
        unknown = sorted(set(participants) - self._directory.public_keys.keys())
        if unknown:
            raise ProtocolStateError(f"server: participants {unknown} took no part in key agreement")
        masked_vectors = collect_round_messages(
            messages, message_type=MaskedVector, round_index=round_index, participants=participants
        )
        length = masked_vectors[0].data.shape
        for masked in masked_vectors:
            if masked.data.dtype != np.uint64 or masked.data.ndim != 1 or masked.data.shape != length:
                raise ProtocolStateError(
                    f"round {round_index}: silo {masked.sender} sent {masked.data.dtype} data of shape "
                    f"{masked.data.shape}; expected flat uint64 of shape {length}"
                )
        total = np.zeros(length, dtype=np.uint64)
        for masked in masked_vectors:
            total += masked.data
        return self.codec.decode(total, summands=len(masked_vectors))
