"""Secure aggregation by pairwise masking (Bonawitz et al., "Practical Secure Aggregation for
Privacy-Preserving Machine Learning", CCS 2017), without dropout recovery.

Protocol. Setup runs once over the server, which only relays:

1. ``SecAggStage.ADVERTISE_KEYS``: every silo ``i`` draws an X25519 key pair and sends its public key
   (``KeyAdvertisement``); the server answers every silo with the ``KeyDirectory`` of all public keys.
2. ``SecAggStage.AGREE_KEYS``: every silo derives with every other silo ``j`` the 32-byte pairwise key
   ``k_ij = HKDF-SHA256(X25519(sk_i, pk_j), info = label || min(i, j) || max(i, j))`` (Bonawitz et al.,
   round 1 with ``KA.agree``), so ``k_ij == k_ji``, and acknowledges with ``KeyAgreementDone``.

Each round ``r`` with participants ``P`` then runs the paper's masked-input and unmasking steps:

3. masked input (``SecAggSilo.protect``): silo ``i`` sends ``y_i = encode(x_i) + sum_{j in P, j != i}
   s_ij * PRG(k_ij, r)  mod 2^64`` with ``s_ij = +1`` if ``i < j`` else ``-1`` (``MaskedVector``). The PRG is
   the ChaCha20 keystream under ``k_ij`` with a nonce made from ``r``, read as little-endian uint64 words.
4. unmasking (``SecAggServer.combine``): the server adds the ``y_i`` modulo 2^64; every pairwise mask appears
   once with each sign and cancels, leaving ``sum_i encode(x_i)``, which it decodes (``FixedPointCodec``).

Minimum participants. A sum of one vector is that vector, and a sum of few reveals correspondingly much, so
both sides take ``min_participants`` (at least 2, the default): a silo refuses to mask for a smaller round,
and the server refuses to combine one. The simulator's server skips such rounds before anyone trains.

Range. Both sides share a ``FixedPointCodec`` built for sums of up to the federation's number of silos; it
reserves headroom bits, so a sum of in-range encodings never wraps and an out-of-range one (a silo that skipped
the codec's check) is caught when the server decodes (``EncodingOverflowError``).

Threat model: an honest-but-curious server and honest-but-curious silos that follow the protocol; no silo
drops out between sampling and upload. Each ``y_i`` is uniformly distributed modulo 2^64 to anyone who does
not know a pairwise key of ``i`` (ChaCha20 being a PRF), so the server, which holds only public keys and
masked vectors, learns nothing beyond the sum. A coalition of the server with silos learns at most the sum of
the other participants' vectors (with ``P`` minus one colluding silos, the last one's vector).

Limits of this simulator: the server samples the participants of a round *before* training and tells every
participant the list, and all of them must upload. The paper's double masking and Shamir sharing of mask
seeds, which let the server recover from dropouts, are left out, as is any authentication of public keys
(a malicious server could substitute keys; out of scope for honest-but-curious). A silo refuses to mask
two vectors in the same round, since masks are a function of ``(k_ij, r)`` and reuse would reveal the
difference of the two vectors.
"""
from __future__ import annotations

import enum
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Mapping

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from protocols.base import (
    ProtocolStateError,
    ServerProtocol,
    SiloProtocol,
    check_participants,
    check_round_index,
    collect_round_messages,
    read_only,
)
from protocols.fixed_point import FixedPointCodec

PAIRWISE_KEY_LABEL = b"privsilo secure aggregation pairwise mask key v1"
_WORD_BYTES = 8


class SecAggStage(enum.Enum):
    """Setup stages of secure aggregation, in order. The per-round masked-input and unmasking steps of
    Bonawitz et al. are ``SecAggSilo.protect`` and ``SecAggServer.combine``."""

    ADVERTISE_KEYS = enum.auto()
    AGREE_KEYS = enum.auto()


@dataclass(frozen=True)
class KeyAdvertisement:
    """A silo's X25519 public key (32 raw bytes), sent to the server in ``ADVERTISE_KEYS``."""

    sender: int
    public_key: bytes


@dataclass(frozen=True)
class KeyDirectory:
    """Every silo's public key, relayed by the server to every silo after ``ADVERTISE_KEYS`` (read-only)."""

    public_keys: Mapping[int, bytes]

    def __post_init__(self) -> None:
        object.__setattr__(self, "public_keys", MappingProxyType(dict(self.public_keys)))

    def __reduce__(self) -> tuple[type[KeyDirectory], tuple[dict[int, bytes]]]:
        # A mappingproxy cannot be pickled; rebuild from a plain dict so actors can send the directory.
        return KeyDirectory, (dict(self.public_keys),)


@dataclass(frozen=True)
class KeyAgreementDone:
    """A silo's acknowledgement that it derived its pairwise keys, sent in ``AGREE_KEYS``."""

    sender: int


@dataclass(frozen=True)
class MaskedVector:
    """A silo's masked, encoded vector for one round (read-only ``uint64`` residues modulo 2^64)."""

    sender: int
    round_index: int
    data: np.ndarray


def derive_pairwise_key(
    *, private_key: X25519PrivateKey, peer_public_key: bytes, own_id: int, peer_id: int
) -> bytes:
    """Return the 32-byte key shared by silos ``own_id`` and ``peer_id``: HKDF-SHA256 of their X25519 secret.

    The HKDF info binds both silo ids in ascending order, so both ends derive the same key.
    """
    shared_secret = private_key.exchange(X25519PublicKey.from_public_bytes(peer_public_key))
    low, high = sorted((own_id, peer_id))
    info = PAIRWISE_KEY_LABEL + low.to_bytes(8, "big") + high.to_bytes(8, "big")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared_secret)


def mask_stream(pairwise_key: bytes, *, round_index: int, length: int) -> np.ndarray:
    """Return ``PRG(pairwise_key, round_index)``: ``length`` uniform ``uint64`` words (a read-only array).

    The words are the ChaCha20 keystream (RFC 8439) under ``pairwise_key``, starting at block counter 0 with
    the 12-byte nonce ``round_index`` (little-endian), read as little-endian 64-bit integers. The 32-bit block
    counter allows up to 2^35 words per round.
    """
    out = np.empty(length, dtype=np.uint64)
    _MaskStreams(length).write(pairwise_key, round_index=round_index, out=out)
    return read_only(out)


class _MaskStreams:
    """Writes :func:`mask_stream` words into a caller's ``uint64`` array, with one zero block (the cipher's input)
    kept for every stream of one length: a silo masking for n peers expands n streams without allocating any."""

    def __init__(self, length: int) -> None:
        self.length = length
        self._zeros = bytes(length * _WORD_BYTES)

    def write(self, pairwise_key: bytes, *, round_index: int, out: np.ndarray) -> None:
        """Overwrite ``out`` (C-contiguous ``uint64`` of ``length`` words) with ``PRG(pairwise_key, round_index)``."""
        if not 0 <= round_index < 2**96:
            raise ValueError(f"round_index must be in [0, 2^96) to fit the ChaCha20 nonce, got {round_index!r}")
        if out.dtype != np.uint64 or out.shape != (self.length,) or not out.flags.c_contiguous:
            raise ValueError(f"expected a contiguous uint64 array of {self.length} words, got {out.dtype} {out.shape}")
        nonce = (0).to_bytes(4, "little") + round_index.to_bytes(12, "little")
        encryptor = Cipher(algorithms.ChaCha20(pairwise_key, nonce), mode=None).encryptor()
        encryptor.update_into(self._zeros, memoryview(out).cast("B"))
        if sys.byteorder != "little":  # the words are little-endian
            out.byteswap(inplace=True)


def derive_pairwise_keys(
    *, private_key: X25519PrivateKey, directory: KeyDirectory, own_id: int
) -> Mapping[int, bytes]:
    """Every pairwise key of silo ``own_id`` (see :func:`derive_pairwise_key`), by peer id, read-only.

    Raises ``ProtocolStateError`` if the directory does not hold this silo's own public key (a relay error).
    """
    own_public = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    if directory.public_keys.get(own_id) != own_public:
        raise ProtocolStateError(f"silo {own_id}: the key directory does not hold this silo's public key")
    return MappingProxyType(
        {
            peer_id: derive_pairwise_key(private_key=private_key, peer_public_key=peer_key, own_id=own_id, peer_id=peer_id)
            for peer_id, peer_key in directory.public_keys.items()
            if peer_id != own_id
        }
    )


def build_key_directory(inbound: Mapping[int, object]) -> KeyDirectory:
    """The server's ``KeyDirectory`` from every silo's ``KeyAdvertisement`` (checked: each silo advertised its
    own valid X25519 key, no two silos the same one, at least one silo)."""
    for silo_id, advertisement in inbound.items():
        if not isinstance(advertisement, KeyAdvertisement) or advertisement.sender != silo_id:
            raise ProtocolStateError(f"server: silo {silo_id} did not advertise its own key: {advertisement!r}")
        _check_silo_id(silo_id)
        try:
            X25519PublicKey.from_public_bytes(advertisement.public_key)
        except (TypeError, ValueError) as error:
            raise ProtocolStateError(f"server: silo {silo_id} advertised an invalid X25519 key") from error
    public_keys = {silo_id: advertisement.public_key for silo_id, advertisement in inbound.items()}
    if len(set(public_keys.values())) != len(public_keys):
        raise ProtocolStateError("server: two silos advertised the same public key")
    if not public_keys:
        raise ProtocolStateError("server: no silo advertised a key")
    return KeyDirectory(public_keys=public_keys)


def _check_silo_id(silo_id: int) -> None:
    if isinstance(silo_id, bool) or not isinstance(silo_id, int) or not 0 <= silo_id < 2**63:
        raise ValueError(f"silo ids must be non-negative ints below 2^63, got {silo_id!r}")


def _check_minimum(min_participants: int, codec: FixedPointCodec) -> None:
    if isinstance(min_participants, bool) or not isinstance(min_participants, int) or min_participants < 2:
        raise ValueError(f"min_participants must be an int >= 2 (one vector is its own sum), got {min_participants!r}")
    if min_participants > codec.max_summands:
        raise ValueError(f"min_participants {min_participants} exceeds the codec's max_summands {codec.max_summands}")


def _check_round_size(participants: tuple[int, ...], *, min_participants: int, codec: FixedPointCodec, who: str) -> None:
    """Refuse a round of fewer than ``min_participants`` or more than the codec has headroom for."""
    if len(participants) < min_participants:
        raise ProtocolStateError(
            f"{who}: a round of {len(participants)} participant(s) is below the minimum of {min_participants}; "
            "a sum of so few vectors would reveal them"
        )
    if len(participants) > codec.max_summands:
        raise ProtocolStateError(
            f"{who}: {len(participants)} participants exceed the codec's headroom for {codec.max_summands} summands"
        )


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
        _check_silo_id(silo_id)
        _check_minimum(min_participants, codec)
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
        _check_round_size(
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
        streams, mask = _MaskStreams(masked.size), np.empty(masked.size, dtype=np.uint64)
        for peer_id in members - {self.silo_id}:
            streams.write(self._pairwise_keys[peer_id], round_index=round_index, out=mask)
            if self.silo_id < peer_id:
                masked += mask
            else:
                masked -= mask
        self._last_round = round_index
        return MaskedVector(sender=self.silo_id, round_index=round_index, data=read_only(masked))


class SecAggServer(ServerProtocol):
    """Server side of pairwise-masking secure aggregation: relays public keys, adds masked vectors.

    It only ever holds public keys and masked vectors, and combines only rounds of at least
    ``min_participants`` (>= 2) and at most ``codec.max_summands`` participants.
    """

    setup_stages: ClassVar[tuple[enum.Enum, ...]] = tuple(SecAggStage)

    def __init__(self, *, codec: FixedPointCodec, min_participants: int = 2) -> None:
        _check_minimum(min_participants, codec)
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
        self, messages: Mapping[int, object], *, round_index: int, participants: tuple[int, ...]
    ) -> np.ndarray:
        """Add the participants' ``MaskedVector`` messages modulo 2^64 (masks cancel) and decode the sum.

        Raises ``ProtocolStateError`` for a round below ``min_participants`` (defence in depth: the engine skips
        such rounds) and ``EncodingOverflowError`` if the decoded sum is out of range (an unchecked encoding).
        """
        if self._next_stage is not None:
            raise ProtocolStateError("server: combine called before setup finished")
        _check_round_size(participants, min_participants=self.min_participants, codec=self.codec, who="server")
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
