"""Silo side of pairwise-masking secure aggregation (Bonawitz et al., CCS 2017)."""
from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Mapping

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from protocols.base import ProtocolStateError, SiloProtocol, check_participants, check_round_index, read_only
from protocols.fixed_point import FixedPointCodec
from protocols.secure_aggregation.limits import check_minimum, check_round_size, check_silo_id
from protocols.secure_aggregation.masks import MaskStreams, derive_pairwise_keys
from protocols.secure_aggregation.messages import KeyAdvertisement, KeyAgreementDone, KeyDirectory, MaskedVector, SecAggStage


class SecAggSilo(SiloProtocol):
    """Silo side of pairwise-masking secure aggregation.

    ``private_key`` defaults to a fresh X25519 key drawn from the operating system's CSPRNG; pass one only
    to make a test reproducible. After ``AGREE_KEYS`` the silo keeps only its pairwise keys. The silo masks
    only for rounds of at least ``min_participants`` (>= 2) and at most ``codec.max_summands`` participants.
    """

    def __init__(
        self,
        silo_id: int,
        *,
        codec: FixedPointCodec,
        min_participants: int = 2,
        private_key: X25519PrivateKey | None = None,
    ) -> None:
        check_silo_id(silo_id)
        check_minimum(min_participants, codec)
        self.silo_id = silo_id
        self.codec = codec
        self.min_participants = min_participants
        self._private_key: X25519PrivateKey | None = (
            X25519PrivateKey.generate() if private_key is None else private_key
        )
        self._public_key = self._private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._next_stage: SecAggStage | None = SecAggStage.ADVERTISE_KEYS
        self._pairwise_keys: Mapping[int, bytes] = MappingProxyType({})
        self._last_round: int | None = None

    def setup_reply(self, stage: enum.Enum, inbound: object | None) -> KeyAdvertisement | KeyAgreementDone:
        """Answer ``ADVERTISE_KEYS`` (no inbound) with the public key, then ``AGREE_KEYS`` (inbound: the
        ``KeyDirectory``) by deriving the pairwise keys."""
        if stage is not self._next_stage:
            raise ProtocolStateError(f"silo {self.silo_id}: got setup stage {stage!r}, expected {self._next_stage!r}")
        if stage is SecAggStage.ADVERTISE_KEYS:
            if inbound is not None:
                raise ProtocolStateError(f"silo {self.silo_id}: ADVERTISE_KEYS takes no inbound message")
            self._next_stage = SecAggStage.AGREE_KEYS
            return KeyAdvertisement(sender=self.silo_id, public_key=self._public_key)
        if not isinstance(inbound, KeyDirectory):
            raise ProtocolStateError(
                f"silo {self.silo_id}: AGREE_KEYS needs a KeyDirectory, got {type(inbound).__name__}"
            )
        self._pairwise_keys = derive_pairwise_keys(private_key=self._private_key, directory=inbound, own_id=self.silo_id)
        self._private_key = None
        self._next_stage = None
        return KeyAgreementDone(sender=self.silo_id)

    def protect(self, vector: np.ndarray, *, round_index: int, participants: tuple[int, ...]) -> MaskedVector:
        """Encode ``vector`` and add the pairwise masks shared with the other participants of ``round_index``.

        Raises ``EncodingOverflowError`` if a value lies outside the codec's range, and ``ProtocolStateError``
        before setup, for a round index not above the last one used, for fewer than ``min_participants`` or more
        than ``codec.max_summands`` participants, or for participants that omit this silo or name a silo
        without a key.
        """
        if self._next_stage is not None:
            raise ProtocolStateError(f"silo {self.silo_id}: protect called before setup finished")
        check_round_index(round_index)
        if self._last_round is not None and round_index <= self._last_round:
            raise ProtocolStateError(
                f"silo {self.silo_id}: round {round_index} is not after round {self._last_round}; "
                "masks cannot be reused"
            )
        members = check_participants(participants)
        if self.silo_id not in members:
            raise ProtocolStateError(f"silo {self.silo_id} is not among the participants {participants!r}")
        check_round_size(
            participants, min_participants=self.min_participants, codec=self.codec, who=f"silo {self.silo_id}"
        )
        unknown = sorted(members - self._pairwise_keys.keys() - {self.silo_id})
        if unknown:
            raise ProtocolStateError(f"silo {self.silo_id}: no pairwise key with participants {unknown}")
        values = np.asarray(vector, dtype=np.float64)
        if values.ndim != 1:
            raise ValueError(f"expected a flat vector, got shape {values.shape}")
        masked = self.codec.encode(values)
        # Every peer's stream is expanded into the same buffer and added in place (mod 2^64, so in any order).
        streams, mask = MaskStreams(masked.size), np.empty(masked.size, dtype=np.uint64)
        for peer_id in members - {self.silo_id}:
            streams.write(self._pairwise_keys[peer_id], round_index=round_index, out=mask)
            if self.silo_id < peer_id:
                masked += mask
            else:
                masked -= mask
        self._last_round = round_index
        return MaskedVector(sender=self.silo_id, round_index=round_index, data=read_only(masked))
