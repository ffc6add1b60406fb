"""HKDF-SHA256 (Krawczyk and Eronen, RFC 5869) for one 32-byte output block without salt, on ``hashlib``.

The same bytes as ``cryptography``'s ``HKDF(SHA256(), length=32, salt=None, info)`` (``tests/unit/protocols/test_kdf.py``
compares them), at a fraction of its per-call cost: a round of secure aggregation among 1,000 silos derives
about 62,000 keys. With no salt, HKDF-Extract's HMAC key is 32 zero bytes, so its padded inner and outer keys are
constants and their SHA-256 states are computed once; HMAC's key padding is a byte translation.
"""
from __future__ import annotations

import hashlib

_BLOCK = 64  # SHA-256's block size
_INNER_ZERO_KEY = hashlib.sha256(b"\x36" * _BLOCK)  # HMAC(0^32, .)'s inner state after its padded key
_OUTER_ZERO_KEY = hashlib.sha256(b"\x5c" * _BLOCK)
_XOR_INNER = bytes(byte ^ 0x36 for byte in range(256))
_XOR_OUTER = bytes(byte ^ 0x5C for byte in range(256))
_INNER_TAIL, _OUTER_TAIL = b"\x36" * (_BLOCK - 32), b"\x5c" * (_BLOCK - 32)


def hkdf_sha256(secret: bytes, info: bytes) -> bytes:
    """``HKDF-Expand(HKDF-Extract(salt = 0^32, secret), info, 32)`` with SHA-256 (RFC 5869, Sec. 2.2-2.3):
    ``PRK = HMAC(0^32, secret)``, ``OKM = HMAC(PRK, info || 0x01)``."""
    inner = _INNER_ZERO_KEY.copy()
    inner.update(secret)
    outer = _OUTER_ZERO_KEY.copy()
    outer.update(inner.digest())
    prk = outer.digest()
    expanded = hashlib.sha256(prk.translate(_XOR_INNER) + _INNER_TAIL + info + b"\x01").digest()
    return hashlib.sha256(prk.translate(_XOR_OUTER) + _OUTER_TAIL + expanded).digest()
