"""Messages of secure aggregation (Bonawitz et al., CCS 2017): key advertisement and directory, masked vectors."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import numpy as np


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
