"""Pairwise keys and mask streams of secure aggregation (Bonawitz et al., CCS 2017, round 1 ``KA.agree`` and the
masked input's PRG): X25519 + HKDF-SHA256 keys, ChaCha20 keystreams as little-endian uint64 words."""
from __future__ import annotations

import sys
from types import MappingProxyType
from typing import Mapping

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from protocols.base import ProtocolStateError, read_only
from protocols.secure_aggregation.limits import check_silo_id
from protocols.secure_aggregation.messages import KeyAdvertisement, KeyDirectory

PAIRWISE_KEY_LABEL = b"privsilo secure aggregation pairwise mask key v1"
_WORD_BYTES = 8


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
    MaskStreams(length).write(pairwise_key, round_index=round_index, out=out)
    return read_only(out)


class MaskStreams:
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
        check_silo_id(silo_id)
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
