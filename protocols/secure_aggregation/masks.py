"""Pairwise keys and mask streams of secure aggregation (Bonawitz et al., CCS 2017, round 2: ``KA.agree`` of the
mask keys and the masked input's PRG): X25519 + HKDF-SHA256 keys, AES-256-CTR keystreams as little-endian
uint64 words; the self-mask ``PRG(b)`` uses the same stream under a key derived from the seed ``b``.

AES in counter mode is the PRG because the processor's AES instructions make its keystream about twice as fast as
ChaCha20's here (``benchmarks/protocols/bench_mask_prg.py``); a silo expands one stream of the whole model per neighbour
every round, one of the two largest costs of SecAgg+ at scale."""
from __future__ import annotations

import sys
from typing import Sequence

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from privsilo.protocols.base import read_only
from privsilo.protocols.kdf import hkdf_sha256

PAIRWISE_KEY_LABEL = b"privsilo secure aggregation pairwise mask key v1"
SELF_MASK_LABEL = b"privsilo secure aggregation self-mask key v1"
_WORD_BYTES = 8
MAX_STREAM_WORDS = 2**33
"""The 32-bit block counter of ``mask_stream`` gives 2^32 AES blocks of two words each."""


def derive_pairwise_key(
    *, private_key: X25519PrivateKey, peer_public_key: bytes, own_id: int, peer_id: int
) -> bytes:
    """Return the 32-byte key shared by silos ``own_id`` and ``peer_id``: HKDF-SHA256 of their X25519 secret.

    The HKDF info binds both silo ids in ascending order, so both ends derive the same key.
    """
    shared_secret = private_key.exchange(X25519PublicKey.from_public_bytes(peer_public_key))
    low, high = sorted((own_id, peer_id))
    info = PAIRWISE_KEY_LABEL + low.to_bytes(8, "big") + high.to_bytes(8, "big")
    return hkdf_sha256(shared_secret, info)


def mask_stream(pairwise_key: bytes, *, round_index: int, length: int) -> np.ndarray:
    """Return ``PRG(pairwise_key, round_index)``: ``length`` uniform ``uint64`` words (a read-only array).

    The words are the AES-256 keystream in counter mode (NIST SP 800-38A) under ``pairwise_key``: block ``i`` is
    ``AES_k(round_index || i)``, the round as 12 big-endian bytes and ``i`` as 4, from ``i = 0``, read as
    little-endian 64-bit integers. The 32-bit block counter allows up to 2^33 words per round.
    """
    out = np.empty(length, dtype=np.uint64)
    MaskStreams(length).write(pairwise_key, round_index=round_index, out=out)
    return read_only(out)


class MaskStreams:
    """Writes [`mask_stream`][privsilo.protocols.secure_aggregation.masks.mask_stream] words into a caller's ``uint64`` array, with one zero block (the cipher's input)
    kept for every stream of one length: a silo masking for n peers expands n streams without allocating any."""

    def __init__(self, length: int) -> None:
        if not 0 <= length <= MAX_STREAM_WORDS:
            raise ValueError(f"a mask stream holds at most 2^33 words, got {length!r}")
        self.length = length
        self._zeros = bytes(length * _WORD_BYTES)

    def write(self, pairwise_key: bytes, *, round_index: int, out: np.ndarray) -> None:
        """Overwrite ``out`` (C-contiguous ``uint64`` of ``length`` words) with ``PRG(pairwise_key, round_index)``."""
        if not 0 <= round_index < 2**96:
            raise ValueError(f"round_index must be in [0, 2^96) to fit the counter block, got {round_index!r}")
        if out.dtype != np.uint64 or out.shape != (self.length,) or not out.flags.c_contiguous:
            raise ValueError(f"expected a contiguous uint64 array of {self.length} words, got {out.dtype} {out.shape}")
        counter_block = round_index.to_bytes(12, "big") + bytes(4)
        encryptor = Cipher(algorithms.AES256(pairwise_key), modes.CTR(counter_block)).encryptor()
        encryptor.update_into(self._zeros, memoryview(out).cast("B"))
        if sys.byteorder != "little":  # the words are little-endian
            out.byteswap(inplace=True)


def mask_sum(plus: Sequence[bytes], minus: Sequence[bytes] = (), *, round_index: int, length: int) -> np.ndarray:
    """``sum_k PRG(plus_k) - sum_k PRG(minus_k)`` mod 2^64 (``length`` words; uint64 arithmetic wraps modulo
    2^64): each stream is expanded into one reused row and added at once, so the row and the total stay in the
    processor's cache. A silo's masks and the server's self-masks of a round go through here."""
    total = np.zeros(length, dtype=np.uint64)
    row = np.empty(length, dtype=np.uint64)
    streams = MaskStreams(length)
    for keys, combine in ((plus, np.add), (minus, np.subtract)):
        for key in keys:
            streams.write(key, round_index=round_index, out=row)
            combine(total, row, out=total)
    return total


def self_mask_key(self_mask_seed: bytes, *, silo_id: int, round_index: int) -> bytes:
    """The 32-byte AES-256 key of silo ``silo_id``'s self-mask ``PRG(b)`` in round ``round_index``: HKDF-SHA256
    of the 16-byte seed ``b`` (Bonawitz et al., round 2: ``p_u = PRG(b_u)``)."""
    info = SELF_MASK_LABEL + silo_id.to_bytes(8, "big") + round_index.to_bytes(12, "big")
    return hkdf_sha256(self_mask_seed, info)
