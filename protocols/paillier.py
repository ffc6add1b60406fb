"""Raw Paillier arithmetic on ciphertext integers (Paillier, EUROCRYPT 1999, with g = n + 1), on gmpy2.

This is the bottom layer of the private weighting protocol, in python-paillier's (phe's) sense of a raw
integer cryptosystem: phe generates the key pair (primes from ``random.SystemRandom``), and this module works on
the ciphertext integers directly, because the protocol needs what phe's number objects do slowly or not at all:

* ``Enc(a) * (1 + m n) = Enc(a + m)  (mod n^2)``: adding a plaintext costs one modular multiplication, since
  ``(1 + n)^m = 1 + m n (mod n^2)``; no fresh encryption.
* ``Enc(a)^k = Enc(k a)``: scalar multiplication; for a negative ``k`` the protocol raises to ``|k|`` and inverts
  (see ``privsilo.protocols.private_weighting.tables``).
* fixed-base window tables ([`WindowTable`][privsilo.protocols.paillier.WindowTable]): all powers ``c^(d 2^(w i))`` of one ciphertext, so raising
  it to many small exponents costs ``ceil(bits / w)`` multiplications each;
* Montgomery's batch inversion ([`batch_invert`][privsilo.protocols.paillier.batch_invert]): ``k`` inverses modulo ``n^2`` for one inversion and
  ``3 (k - 1)`` multiplications;
* CRT decryption and encryption for the key holder ([`PaillierKeyPair`][privsilo.protocols.paillier.PaillierKeyPair]): exponents modulo ``p^2`` and
  ``q^2`` instead of ``n^2``.

Randomness: a fresh encryption's factor ``r^n`` with ``r`` uniform in ``Z_n^*`` is a uniform n-th residue, which
hides the plaintext under the DCR assumption; [`PaillierPublicKey.rerandomize`][privsilo.protocols.paillier.PaillierPublicKey.rerandomize] multiplies one in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import gmpy2
from gmpy2 import mpz

from privsilo.protocols.crypto_random import CryptoRandom

MIN_KEY_BITS = 2048
"""Smallest modulus accepted outside tests (NIST SP 800-57: 112-bit security)."""


def check_key_bits(bits: int, *, insecure_test_key: bool = False) -> None:
    """Refuse a modulus below ``MIN_KEY_BITS`` unless a test explicitly asks for a small, insecure key."""
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < (256 if insecure_test_key else MIN_KEY_BITS):
        raise ValueError(
            f"Paillier key size must be an int >= {MIN_KEY_BITS} bits, got {bits!r}"
            + ("" if insecure_test_key else " (smaller keys exist for tests only: insecure_test_key=True)")
        )


class PaillierPublicKey:
    """The public modulus ``n`` (``g = n + 1``) and what a party without its factorisation can compute."""

    def __init__(self, n: int, *, random: CryptoRandom | None = None) -> None:
        self.n = mpz(n)
        self.n_square = self.n * self.n
        self.bits = int(self.n.bit_length())
        self.random = random or CryptoRandom()

    def plaintext_factor(self, m: int) -> mpz:
        """``1 + (m mod n) n``: the trivial encryption of ``m``; multiplying a ciphertext by it adds ``m``."""
        return (1 + (mpz(m) % self.n) * self.n) % self.n_square

    def random_unit(self) -> mpz:
        """A uniform element of ``Z_n^*``."""
        while True:
            r = mpz(self.random.randbelow(int(self.n)))
            if r and gmpy2.gcd(r, self.n) == 1:
                return r

    def fresh_randomness(self) -> mpz:
        """``r^n mod n^2`` for a uniform ``r`` in ``Z_n^*``: a uniform n-th residue (one full exponentiation)."""
        return gmpy2.powmod(self.random_unit(), self.n, self.n_square)

    def encrypt(self, m: int) -> mpz:
        """A fresh encryption of ``m mod n``."""
        return self.plaintext_factor(m) * self.fresh_randomness() % self.n_square

    def rerandomize(self, ciphertext: int) -> mpz:
        """The same plaintext under fresh randomness."""
        return mpz(ciphertext) * self.fresh_randomness() % self.n_square


class PaillierKeyPair:
    """The key holder's key pair from primes ``p``, ``q``: CRT decryption and encryption."""

    def __init__(self, p: int, q: int, *, random: CryptoRandom | None = None, insecure_test_key: bool = False) -> None:
        p, q = mpz(p), mpz(q)
        if p == q or not (gmpy2.is_prime(p) and gmpy2.is_prime(q)):
            raise ValueError("p and q must be distinct primes")
        if gmpy2.gcd(p * q, (p - 1) * (q - 1)) != 1:
            raise ValueError("gcd(pq, (p-1)(q-1)) must be 1")
        check_key_bits(int((p * q).bit_length()), insecure_test_key=insecure_test_key)
        self.public = PaillierPublicKey(int(p * q), random=random)
        self._p, self._q = p, q
        self._p_square, self._q_square = p * p, q * q
        n = self.public.n
        self._hp = gmpy2.invert((gmpy2.powmod(n + 1, p - 1, self._p_square) - 1) // p, p)
        self._hq = gmpy2.invert((gmpy2.powmod(n + 1, q - 1, self._q_square) - 1) // q, q)
        self._p_inverse_mod_q = gmpy2.invert(p, q)
        self._q_square_inverse_mod_p_square = gmpy2.invert(self._q_square, self._p_square)

    @classmethod
    def generate(cls, bits: int, *, random: CryptoRandom | None = None) -> "PaillierKeyPair":
        """A fresh key pair with a ``bits``-bit modulus (phe's generator; ``bits >= MIN_KEY_BITS``)."""
        from phe import paillier

        check_key_bits(bits)
        _, private_key = paillier.generate_paillier_keypair(n_length=bits)
        return cls(private_key.p, private_key.q, random=random)

    def decrypt(self, ciphertext: int) -> int:
        """The plaintext in ``[0, n)``, by CRT (Paillier 1999, Sec. 7): two half-size exponentiations."""
        c = mpz(ciphertext)
        m_p = (gmpy2.powmod(c, self._p - 1, self._p_square) - 1) // self._p * self._hp % self._p
        m_q = (gmpy2.powmod(c, self._q - 1, self._q_square) - 1) // self._q * self._hq % self._q
        return int(m_p + (m_q - m_p) * self._p_inverse_mod_q % self._q * self._p)

    def encrypt(self, m: int) -> mpz:
        """A fresh encryption of ``m mod n`` whose randomness is drawn by CRT.

        The n-th residues modulo ``p^2`` are exactly the p-th powers (``x -> x^q`` permutes that subgroup of order
        ``p - 1``), so ``y_p^p mod p^2`` and ``y_q^q mod q^2`` for uniform ``y_p``, ``y_q`` combine to a uniform n-th
        residue modulo ``n^2`` at the cost of two half-size exponentiations instead of one full-size one.
        """
        random = self.public.random
        r_p = gmpy2.powmod(mpz(random.randbelow(int(self._p_square - 1)) + 1), self._p, self._p_square)
        r_q = gmpy2.powmod(mpz(random.randbelow(int(self._q_square - 1)) + 1), self._q, self._q_square)
        if gmpy2.gcd(r_p, self._p) != 1 or gmpy2.gcd(r_q, self._q) != 1:  # probability ~2/p: draw again
            return self.encrypt(m)
        residue = r_q + (r_p - r_q) * self._q_square_inverse_mod_p_square % self._p_square * self._q_square
        return self.public.plaintext_factor(m) * residue % self.public.n_square


@dataclass(frozen=True)
class WindowTable:
    """Fixed-base powers of one ciphertext ``g`` modulo ``n^2``: ``rows[i][d] = g^(d 2^(w i))`` for digits
    ``d < 2^w`` and windows ``i < W``. ``g^e`` for ``0 <= e < 2^(w W)`` is then the product of ``rows[i][digit_i(e)]``:
    at most ``W`` multiplications, with no squarings (Brickell et al.'s fixed-base idea, one table per base)."""

    window_bits: int
    rows: tuple[tuple[mpz, ...], ...]

    @classmethod
    def build(cls, base: int, *, window_bits: int, windows: int, modulus: mpz) -> "WindowTable":
        rows = []
        g = mpz(base) % modulus
        for _ in range(windows):
            row = [mpz(1), g]
            for _ in range(2, 1 << window_bits):
                row.append(row[-1] * g % modulus)
            rows.append(tuple(row))
            g = row[-1] * g % modulus  # g^(2^w)
        return cls(window_bits=window_bits, rows=tuple(rows))


def batch_invert(values: Sequence[mpz], modulus: mpz) -> list[mpz]:
    """Inverses of ``values`` modulo ``modulus`` by Montgomery's trick: one inversion, ``3 (k - 1)`` products."""
    if not values:
        return []
    prefix = [mpz(values[0]) % modulus]
    for value in values[1:]:
        prefix.append(prefix[-1] * value % modulus)
    running = gmpy2.invert(prefix[-1], modulus)  # raises ZeroDivisionError if some value is not a unit
    inverses = [mpz(0)] * len(values)
    for index in range(len(values) - 1, 0, -1):
        inverses[index] = running * prefix[index - 1] % modulus
        running = running * values[index] % modulus
    inverses[0] = running
    return inverses
