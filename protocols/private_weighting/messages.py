"""Messages of the private weighting protocol (frozen dataclasses; ciphertexts and residues as Python ints).

What the server receives: ``KeyAdvertisement``, ``SealedSeeds`` (AEAD ciphertexts), ``KeyAgreementDone``,
``BlindedCounts`` (uniform residues modulo n), ``MaskedWeights`` and ``PackedCiphertexts`` (Paillier
ciphertexts whose plaintexts are masked), ``SetupDone``. What the silos receive: ``PwpDirectory``,
``SeedDelivery``, ``EncryptedInverses``, ``ConvertedWeights`` (ciphertexts under the server's key).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from privsilo.protocols.base import ReadOnlyMappings, read_only
from privsilo.protocols.secure_aggregation import KeyDirectory


@dataclass(frozen=True)
class PwpDirectory:
    """Server -> every silo after ``ADVERTISE_KEYS``: the Paillier modulus and the silos' X25519 public keys."""

    modulus: int
    keys: KeyDirectory


@dataclass(frozen=True)
class SealedSeeds(ReadOnlyMappings):
    """The lead silo's ``AGREE_KEYS`` reply: the shared seed R sealed (ChaCha20-Poly1305) for each other silo."""

    sender: int
    sealed: Mapping[int, bytes]


@dataclass(frozen=True)
class SeedDelivery:
    """Server -> one silo after ``AGREE_KEYS``: its sealed seed (``None`` for the lead silo, which drew it)."""

    sealed: bytes | None


@dataclass(frozen=True)
class BlindedCounts:
    """A silo's ``BLIND_COUNTS`` reply: ``r_u n_{s,u} + pairwise masks (mod n)`` for every user u."""

    sender: int
    values: tuple[int, ...]


@dataclass(frozen=True)
class EncryptedInverses:
    """Server -> every silo after ``BLIND_COUNTS``: ``Enc((r_u N_u)^-1 mod n)`` per user, ``None`` for users with
    ``N_u = 0`` (excluded: no inverse exists)."""

    ciphertexts: tuple[int | None, ...]


@dataclass(frozen=True)
class MaskedWeights:
    """A silo's ``CONVERT_WEIGHTS`` reply: ``Enc(C_LCM n_{s,u} / N_u + rho_{s,u})`` (fresh randomness) for every
    user that is not excluded, in user order, including the users without records in this silo."""

    sender: int
    ciphertexts: tuple[int, ...]


@dataclass(frozen=True)
class ConvertedWeights:
    """Server -> one silo after ``CONVERT_WEIGHTS``: ``Enc(floor((C_LCM n/N + rho) (2^F - |S|) / C_LCM))`` per
    user that is not excluded, in user order."""

    ciphertexts: tuple[int, ...]


@dataclass(frozen=True)
class SetupDone:
    """A silo's ``BUILD_TABLES`` reply: its encrypted weights and exponent tables are ready."""

    sender: int


@dataclass(frozen=True, eq=False)
class UserDeltas:
    """A silo's input for one round (never sent): the clipped deltas of its users taking part (rows, in the order
    of ``users``) and its Gaussian noise share, all float64, read-only."""

    users: np.ndarray
    deltas: np.ndarray
    noise: np.ndarray

    def __post_init__(self) -> None:
        users = read_only(np.array(self.users, dtype=np.int64))
        noise = read_only(np.array(self.noise, dtype=np.float64))
        deltas = read_only(np.array(self.deltas, dtype=np.float64).reshape(len(users), noise.size))
        object.__setattr__(self, "users", users)
        object.__setattr__(self, "deltas", deltas)
        object.__setattr__(self, "noise", noise)


@dataclass(frozen=True)
class PackedCiphertexts:
    """A silo's per-round message: Paillier ciphertexts of ``length`` packed values, each multiplied by pairwise
    masks that are uniform in ``Z_{n^2}^*`` and cancel only in the product over the round's participants."""

    sender: int
    round_index: int
    length: int
    ciphertexts: tuple[int, ...]
