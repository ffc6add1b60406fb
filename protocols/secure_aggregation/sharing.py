"""Per-round secrets of a silo and how they travel (Bonawitz et al., CCS 2017, Fig. 4, rounds 0, 1 and 4).

Each silo draws, every round, a 16-byte mask seed ``s`` (its X25519 mask key is derived from it, so the seed
is what gets shared), a 16-byte self-mask seed ``b`` and a 32-byte X25519 channel key. It splits ``s`` and ``b``
with Shamir's scheme (Shamir, CACM 1979) over the prime field of ``p = 2^130 - 5`` (every 16-byte secret is an
element; share ``i`` is the polynomial at ``x = i``, 17 bytes; coefficients uniform in ``[0, p)`` from the silo's
CSPRNG) among its share set: itself and its neighbours, share index = rank in the sorted set plus one. Python's
integers do the field arithmetic, a few hundred times faster than GF(2^128) elements in pure Python. A neighbour's shares travel through the server encrypted with AES-256-GCM under
``HKDF-SHA256(X25519(c_u, c_v))`` of the two channel keys (Bonawitz et al.'s ``AE.enc(KA.agree(c_u^SK, c_v^PK),
u || v || s_u^SK share || b_u share)``); the nonce is the sender's id, unique because each channel key of a
round encrypts one message in each direction.
"""
from __future__ import annotations

import functools
import struct
from typing import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from privsilo.protocols.base import ProtocolStateError
from privsilo.protocols.crypto_random import CryptoRandom
from privsilo.protocols.kdf import hkdf_sha256

SEED_BYTES = 16
"""Length of the shared secrets: the mask seed and the self-mask seed."""
PRIME = 2**130 - 5
"""The field of the shares: a prime above 2^128, so every seed is a field element."""
SHARE_BYTES = 17
MASK_KEY_LABEL = b"privsilo secure aggregation mask private key v1"
CHANNEL_KEY_LABEL = b"privsilo secure aggregation share channel key v1"
_SHARE_FORMAT = ">QQ12sI17s17s"  # sender, recipient, round (12 bytes), share index, share of s, share of b

Share = tuple[int, bytes]
"""One Shamir share: ``(index, 17 bytes)``, the big-endian value of the polynomial at ``index``."""


def _round_bytes(round_index: int) -> bytes:
    return round_index.to_bytes(12, "big")


def mask_private_key(mask_seed: bytes, *, silo_id: int, round_index: int) -> X25519PrivateKey:
    """Silo ``silo_id``'s X25519 mask key of round ``round_index``: HKDF-SHA256 of its 16-byte mask seed."""
    info = MASK_KEY_LABEL + silo_id.to_bytes(8, "big") + _round_bytes(round_index)
    return X25519PrivateKey.from_private_bytes(
        hkdf_sha256(mask_seed, info)
    )


_PROBE = X25519PrivateKey.from_private_bytes(bytes(range(32)))


def valid_public_key(key: object) -> bool:
    """Whether ``key`` is a 32-byte X25519 public key of large order: a low-order point gives every peer the
    all-zero shared secret (which the cryptography library refuses), so such a key is refused where it arrives
    (its silo counts as dropped, or the round ends) instead of failing in its neighbours."""
    try:
        _PROBE.exchange(X25519PublicKey.from_public_bytes(key))
    except (TypeError, ValueError):
        return False
    return True


def public_bytes(private_key: X25519PrivateKey) -> bytes:
    return private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def split(secret: bytes, *, threshold: int, holders: Sequence[int], random: CryptoRandom) -> dict[int, Share]:
    """Shamir shares of the 16-byte ``secret`` for the sorted ``holders``, any ``threshold`` of which recover it:
    holder ``k`` (rank ``k - 1``) gets ``f(k)`` for ``f(x) = secret + a_1 x + ... + a_{t-1} x^{t-1}`` mod ``p``
    with ``a_j`` uniform from ``random``. Horner's rule over Python integers with one reduction per share: the
    share indices are small, so ``f(k)`` before reduction has about ``130 + t log2(k)`` bits, and skipping the
    ``t - 1`` intermediate reductions halves the work."""
    if len(secret) != SEED_BYTES or not 1 <= threshold <= len(holders):
        raise ValueError(f"cannot split {len(secret)} bytes with threshold {threshold} among {len(holders)} holders")
    highest_first = [random.randbelow(PRIME) for _ in range(threshold - 1)][::-1] + [int.from_bytes(secret, "big")]
    shares = {}
    for index, holder in enumerate(holders, start=1):
        value = 0
        for coefficient in highest_first:
            value = value * index + coefficient
        shares[holder] = (index, (value % PRIME).to_bytes(SHARE_BYTES, "big"))
    return shares


def recover(shares: Sequence[Share], *, threshold: int) -> bytes:
    """The secret behind ``threshold`` of ``shares`` (the first ones; more would only cost time):
    ``f(0) = sum_j y_j l_j(0)`` mod ``p``, with each set of share indices' Lagrange coefficients ``l_j(0)`` worked
    out once (``_lagrange_at``; a server recovers one seed per silo every round, mostly from the same
    indices). Raises ``ValueError`` when the shares do not lie on a polynomial with a 16-byte constant term."""
    if len(shares) < threshold:
        raise ValueError(f"{len(shares)} shares cannot recover a secret of threshold {threshold}")
    chosen = list(shares[:threshold])
    coefficients = _lagrange_at(tuple(index for index, _ in chosen), 0)
    secret = sum(c * int.from_bytes(value, "big") for c, (_, value) in zip(coefficients, chosen)) % PRIME
    if secret >= 2 ** (8 * SEED_BYTES):
        raise ValueError("the shares do not belong to one 16-byte secret")
    return secret.to_bytes(SEED_BYTES, "big")


def consistent(shares: Sequence[Share], *, threshold: int) -> list[bool]:
    """For each share, whether it lies on the polynomial of degree ``threshold - 1`` through the first
    ``threshold`` shares (those are consistent by definition): the check of surplus shares, each evaluated exactly
    as ``f(x) = sum_j y_j l_j(x)`` mod ``p`` with the Lagrange coefficients of the first shares' indices at ``x``
    worked out once per (indices, x) (``_lagrange_at``: a server checks one seed per silo every round, mostly
    with the same indices)."""
    base = list(shares[:threshold])
    indices = tuple(index for index, _ in base)
    values = [int.from_bytes(value, "big") for _, value in base]
    flags = [True] * len(base)
    for x, value in shares[threshold:]:
        total = sum(c * y for c, y in zip(_lagrange_at(indices, x), values))
        flags.append(total % PRIME == int.from_bytes(value, "big"))
    return flags


@functools.lru_cache(maxsize=16384)
def _lagrange_at(indices: tuple[int, ...], point: int) -> tuple[int, ...]:
    """``l_j(point) = prod_{m != j} (point - x_m) / (x_j - x_m)`` mod ``p`` for share indices ``x``."""
    if len(set(indices)) != len(indices) or not all(0 < x < PRIME for x in indices):
        raise ValueError(f"share indices must be distinct and in [1, p), got {indices}")
    coefficients = []
    for j, x_j in enumerate(indices):
        numerator, denominator = 1, 1
        for m, x_m in enumerate(indices):
            if m != j:
                numerator = numerator * (point - x_m) % PRIME
                denominator = denominator * (x_j - x_m) % PRIME
        coefficients.append(numerator * pow(denominator, -1, PRIME) % PRIME)
    return tuple(coefficients)


def channel_key(
    private_key: X25519PrivateKey, peer_public_key: bytes, *, own_id: int, peer_id: int, round_index: int
) -> bytes:
    """The AES-256-GCM key of the channel between silos ``own_id`` and ``peer_id`` in round ``round_index``:
    HKDF-SHA256 of the X25519 secret of their channel keys (both ends derive the same key)."""
    low, high = sorted((own_id, peer_id))
    info = CHANNEL_KEY_LABEL + low.to_bytes(8, "big") + high.to_bytes(8, "big") + _round_bytes(round_index)
    secret = private_key.exchange(X25519PublicKey.from_public_bytes(peer_public_key))
    return hkdf_sha256(secret, info)


def holder_list(holders: Sequence[int]) -> bytes:
    """The ids of a silo's share holders as 8-byte big-endian words (what ``Channel.seal`` appends)."""
    return struct.pack(f">{len(holders)}Q", *holders)


class Channel:
    """The AES-GCM channel between silos ``own_id`` and ``peer_id`` for one round (Bonawitz et al., round 1),
    under the key [`channel_key`][privsilo.protocols.secure_aggregation.sharing.channel_key] derived once for both
    directions."""

    def __init__(self, key: bytes, *, own_id: int, peer_id: int, round_index: int) -> None:
        self._aead = AESGCM(key)
        self.own_id, self.peer_id, self.round_index = own_id, peer_id, round_index

    def seal(self, mask_seed_share: Share, self_mask_share: Share, holders: bytes = b"") -> bytes:
        """Encrypt this silo's two shares for the peer (one share index for both), with the ids of every holder of
        its shares (``holders``, encoded by ``holder_list``; sent when the server may lie, for the consistency
        round)."""
        (index, s_share), (b_index, b_share) = mask_seed_share, self_mask_share
        if index != b_index:
            raise ValueError(f"share indices differ: {index} and {b_index}")
        plaintext = struct.pack(
            _SHARE_FORMAT, self.own_id, self.peer_id, _round_bytes(self.round_index), index, s_share, b_share
        ) + holders
        return self._aead.encrypt(self.own_id.to_bytes(12, "big"), plaintext, None)

    def open(self, ciphertext: bytes) -> tuple[Share, Share, tuple[int, ...]]:
        """Decrypt the peer's shares ``(share of its mask seed, share of its self-mask seed, its share holders)``;
        raises ``ProtocolStateError`` if the ciphertext was not sealed by the peer for this silo and round."""
        try:
            plaintext = self._aead.decrypt(self.peer_id.to_bytes(12, "big"), ciphertext, None)
        except InvalidTag:
            raise ProtocolStateError(
                f"silo {self.own_id}: the shares relayed from silo {self.peer_id} do not authenticate"
            ) from None
        header = struct.calcsize(_SHARE_FORMAT)
        sender, recipient, round_bytes, index, s_share, b_share = struct.unpack(_SHARE_FORMAT, plaintext[:header])
        if (sender, recipient, round_bytes) != (self.peer_id, self.own_id, _round_bytes(self.round_index)):
            raise ProtocolStateError(f"silo {self.own_id}: shares from silo {self.peer_id} are addressed elsewhere")
        tail = plaintext[header:]
        if len(tail) % 8:
            raise ProtocolStateError(f"silo {self.own_id}: the share holders listed by silo {self.peer_id} are malformed")
        holders = struct.unpack(f">{len(tail) // 8}Q", tail)
        return (index, s_share), (index, b_share), holders
