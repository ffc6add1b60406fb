"""Cryptographic randomness for the protocols: uniform integers from a byte source (default ``os.urandom``).

Protocol objects take a ``CryptoRandom`` so that a test can replace the operating system's entropy with a seeded
deterministic stream (:func:`seeded_for_tests`) and repeat a statistical test exactly; real runs always use the
default. Never numpy: its generators are not cryptographic and keep 32- to 128-bit states.
"""
from __future__ import annotations

import hashlib
import os
from typing import Callable


class CryptoRandom:
    """Uniform integers drawn from ``random_bytes(k)`` (k fresh bytes per call), by rejection sampling."""

    def __init__(self, random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self._random_bytes = random_bytes

    def bytes(self, count: int) -> bytes:
        """``count`` fresh random bytes."""
        return self._random_bytes(count)

    def randbits(self, bits: int) -> int:
        """A uniform integer in ``[0, 2^bits)``."""
        if bits <= 0:
            return 0
        value = int.from_bytes(self._random_bytes((bits + 7) // 8), "little")
        return value >> (-bits % 8)

    def randbelow(self, bound: int) -> int:
        """A uniform integer in ``[0, bound)`` (``bound >= 1``)."""
        if bound < 1:
            raise ValueError(f"bound must be >= 1, got {bound}")
        bits = (bound - 1).bit_length()
        while True:
            value = self.randbits(bits)
            if value < bound:
                return value


def seeded_for_tests(seed: int) -> CryptoRandom:
    """A deterministic ``CryptoRandom`` (the SHAKE-256 stream of ``seed``): for repeatable tests only."""
    state = {"counter": 0}

    def stream(count: int) -> bytes:
        state["counter"] += 1
        return hashlib.shake_256(f"privsilo test randomness {seed} {state['counter']}".encode()).digest(count)

    return CryptoRandom(stream)
