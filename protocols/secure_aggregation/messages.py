"""Messages of one round of secure aggregation with dropout recovery (Bonawitz et al., CCS 2017, Fig. 4, rounds
0-2 and 4; SecAgg+, Bell et al., CCS 2020, Sec. 3: every silo talks only to its graph neighbours).

Every message is a frozen dataclass whose mappings are read-only; all of them pickle, so actors can carry them
and an engine can record them as the server's view.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from privsilo.protocols.base import ReadOnlyMappings


class SecAggStage(enum.Enum):
    """The per-round stages (``SecAggServer.round_stages``), in order. Masked input is ``SecAggSilo.protect``;
    unmasking is ``unmask_requests`` / ``unmask_reply`` / ``combine``."""

    COMMIT_KEYS = enum.auto()
    """Only when the server may lie: each silo draws its round keys and sends a signed hash of them
    (``KeyCommitment``); the server answers with every commitment (``CommitmentList``). The graph seed then
    depends on keys revealed only after the set of committed silos is fixed, so the server cannot grind it."""
    ADVERTISE_KEYS = enum.auto()
    """Bonawitz et al. round 0: each silo sends two fresh public keys; the server answers with its neighbours'."""
    SHARE_KEYS = enum.auto()
    """Round 1: each silo sends every neighbour, encrypted, its Shamir shares of its mask seed and self-mask seed."""
    COLLECT_SHARES = enum.auto()
    """Start of round 2: each silo receives the shares addressed to it (it answers ``None``)."""


class SecAggSetupStage(enum.Enum):
    """Set-up stages, only when the server may lie (``SecAggServer.setup_stages``)."""

    REGISTER = enum.auto()
    """Each silo sends the public half of its long-term Ed25519 identity key (``IdentityKey``)."""
    LEARN_IDENTITIES = enum.auto()
    """Each silo keeps the registry of every silo's identity key (``IdentityRegistry``; it answers ``None``)."""


@dataclass(frozen=True)
class IdentityKey:
    """A silo's long-term Ed25519 public key (32 raw bytes), registered once at set-up."""

    sender: int
    public_key: bytes


@dataclass(frozen=True)
class IdentityRegistry(ReadOnlyMappings):
    """Every silo's identity key, by silo id (assumed authentic: see ``signatures.py``)."""

    keys: Mapping[int, bytes]


@dataclass(frozen=True)
class KeyCommitment:
    """When the server may lie: a silo's signed SHA-256 of its round keys (``signatures.key_digest``), sent before
    any key of the round is seen (``COMMIT_KEYS``)."""

    sender: int
    round_index: int
    digest: bytes
    signature: bytes


@dataclass(frozen=True)
class CommitmentList(ReadOnlyMappings):
    """When the server may lie: the round's sampled silos and every commitment (``commitments[id] = (digest,
    signature)``), one object for every silo. Each silo signs its hash (``signatures.list_digest``) with its keys,
    so the silos in one roster all saw one list; every committed silo must reveal its keys or the round ends."""

    round_index: int
    participants: tuple[int, ...]
    commitments: Mapping[int, tuple[bytes, bytes]]


@dataclass(frozen=True)
class RoundKeyAdvertisement:
    """A silo's two fresh X25519 public keys for one round (32 raw bytes each): for pairwise masks and for the
    channel that carries its shares (``ADVERTISE_KEYS``); signed with its identity key, together with the hash of
    the commitment list it was sent, when the server may lie (``signature``, else empty)."""

    sender: int
    round_index: int
    mask_public_key: bytes
    channel_public_key: bytes
    signature: bytes = b""


@dataclass(frozen=True)
class NeighbourKeys(ReadOnlyMappings):
    """The server's answer to ``ADVERTISE_KEYS``: the round's parameters and the key pairs of the silo's
    neighbours that advertised, and its own (``keys[id] = (mask_public_key, channel_public_key)``).

    ``participants`` is the round's number of sampled silos, from which the silo re-derives the graph degree
    and threshold it expects (``round_parameters``).

    When the server may lie it also relays the ``roster`` (every signed key of the round), from which the silo
    recomputes the round's graph and checks that ``keys`` holds exactly its neighbours."""

    round_index: int
    participants: int
    threshold: int
    keys: Mapping[int, tuple[bytes, bytes]]
    roster: "RoundRoster | None" = None


@dataclass(frozen=True)
class RoundRoster(ReadOnlyMappings):
    """When the server may lie: the round's sampled silos (``participants``, sorted) and every advertiser's signed
    keys (``advertised[id] = (mask, channel, signature)``), one object shared by every silo's ``NeighbourKeys``.
    Every silo checks every entry: registered, signed over the commitment list it saw, matching its commitment,
    and every committed silo present."""

    round_index: int
    participants: tuple[int, ...]
    advertised: Mapping[int, tuple[bytes, bytes, bytes]]


@dataclass(frozen=True)
class EncryptedShares(ReadOnlyMappings):
    """A silo's shares for each neighbour, AES-GCM-encrypted under their channel key (``SHARE_KEYS``)."""

    sender: int
    round_index: int
    ciphertexts: Mapping[int, bytes]


@dataclass(frozen=True)
class ShareBundle(ReadOnlyMappings):
    """The ciphertexts addressed to one silo, by sender, relayed after ``SHARE_KEYS``; the silo masks with exactly
    these senders."""

    round_index: int
    ciphertexts: Mapping[int, bytes]


@dataclass(frozen=True)
class MaskedVector:
    """A silo's masked, encoded vector for one round (read-only ``uint64`` residues modulo 2^64)."""

    sender: int
    round_index: int
    data: np.ndarray


@dataclass(frozen=True)
class UnmaskRequest:
    """The server's unmasking request to a silo that uploaded: which silos of its share set uploaded too
    (``uploaded``, the silo itself included), and how many uploaded in all (``uploaders``). The silo reveals its
    self-mask shares of ``uploaded`` and its mask-seed shares of the rest of its share set."""

    round_index: int
    uploaded: tuple[int, ...]
    uploaders: int


@dataclass(frozen=True)
class UnmaskReply(ReadOnlyMappings):
    """A silo's answer to ``UnmaskRequest``: Shamir shares ``(index, 17 bytes)`` of self-mask seeds (of silos
    that uploaded) and of mask seeds (of silos that did not), by owner."""

    sender: int
    round_index: int
    self_mask_shares: Mapping[int, tuple[int, bytes]]
    mask_seed_shares: Mapping[int, tuple[int, bytes]]


@dataclass(frozen=True)
class ConsistencyRequest:
    """When the server may lie, its first message after the uploads to every uploader: the set ``U`` of silos it
    claims uploaded (Bonawitz et al.'s consistency check). The silo answers with its signature of that set, bound
    to the round's graph, if every neighbour ``U`` names is one whose shares it received and masked with."""

    round_index: int
    uploaded: tuple[int, ...]


@dataclass(frozen=True)
class ConsistencySignature:
    """A silo's Ed25519 signature of ``(round, graph seed, the set of uploaders it was told)`` (first exchange) or of
    the set of those uploaders that signed it (second exchange, ``signatures.uploaders_message``)."""

    sender: int
    round_index: int
    signature: bytes


@dataclass(frozen=True)
class SignedUploaders(ReadOnlyMappings):
    """The server's second message when it may lie: every signature of ``U`` it received, by signer (one object
    for every silo). The signers are the round's uploaders ``U'``; a silo that uploaded and did not sign counts as
    dropped. The silo signs ``U'`` if it misses at most ``d`` of the round's silos and the graph connects it."""

    round_index: int
    signatures: Mapping[int, bytes]


@dataclass(frozen=True)
class ConfirmedUploaders(ReadOnlyMappings):
    """The server's unmasking request when it may lie: the signatures of ``U'`` (``SignedUploaders``), by signer.
    A silo reveals its share of ``b_w`` for the ``w`` in ``U'`` and of ``s_w`` for the others, and only once
    ``threshold`` of every such ``w``'s share holders signed the same ``U'``."""

    round_index: int
    signatures: Mapping[int, bytes]
