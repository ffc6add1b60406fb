"""Fixed-point encoding of float64 vectors as residues modulo 2^m, shared by every aggregation protocol.

Secure aggregation (pairwise masking, Bonawitz et al., CCS 2017) and additively homomorphic encryption
(Paillier) add integers modulo a power of two or an RSA modulus, not floats. ``FixedPointCodec`` maps a real
``x`` to the integer ``round(x * 2^f)`` (round half to even, as ``numpy.rint``) and stores it as a residue
modulo ``2^m`` (``m = modulus_bits``), negatives in two's complement. Residues live in ``numpy.uint64``, whose
wraparound arithmetic is exactly addition modulo 2^64; for ``m < 64`` decoding first reduces modulo ``2^m``
(which divides 2^64), so callers may add encodings, or encodings and uniform 64-bit masks, modulo 2^64.

Homomorphism. For values ``x_1..x_n`` with rounded integers ``r_k = round(x_k * 2^f)``::

    decode(encode(x_1) + ... + encode(x_n)  mod 2^64) == (r_1 + ... + r_n) * 2^-f

as long as the integer sum satisfies ``|r_1 + ... + r_n| <= 2^(m-1) - 1``, i.e. the real sum of the rounded
values stays within ``max_abs_sum = (2^(m-1) - 1) * 2^-f`` (just under ``2^(m-1-f)``). The right-hand side is
exact as an integer; the returned float64 is its correctly rounded value (exact while the sum has at most 53
significant bits). Each value carries a rounding error ``|x - r * 2^-f| <= 2^-(f+1) = precision / 2``, so a
sum of ``n`` values is within ``n * precision / 2`` of the float sum. Past ``max_abs_sum`` the sum wraps to
the other sign without any signal; ``check_sum_fits`` rules that out beforehand.
"""
from __future__ import annotations

import math

import numpy as np


class EncodingOverflowError(ValueError):
    """A value is NaN, infinite, or so large that a sum of encodings could leave the signed range."""


class FixedPointCodec:
    """Fixed-point encoding with ``fractional_bits`` bits after the binary point, modulo ``2^modulus_bits``.

    ``modulus_bits`` may be 2..64 (smaller moduli leave room for packing several values into one Paillier
    plaintext); ``fractional_bits`` may be 0..``modulus_bits - 2`` so at least one integer bit remains.
    """

    def __init__(self, *, fractional_bits: int = 24, modulus_bits: int = 64) -> None:
        if isinstance(modulus_bits, bool) or not isinstance(modulus_bits, int) or not 2 <= modulus_bits <= 64:
            raise ValueError(f"modulus_bits must be an int in [2, 64], got {modulus_bits!r}")
        if (
            isinstance(fractional_bits, bool)
            or not isinstance(fractional_bits, int)
            or not 0 <= fractional_bits <= modulus_bits - 2
        ):
            raise ValueError(f"fractional_bits must be an int in [0, {modulus_bits - 2}], got {fractional_bits!r}")
        self.fractional_bits = fractional_bits
        self.modulus_bits = modulus_bits
        self._max_integer = 2 ** (modulus_bits - 1) - 1
        self._residue_mask = np.uint64(2**modulus_bits - 1)
        self._unsigned_shift = np.uint64(64 - modulus_bits)
        self._signed_shift = np.int64(64 - modulus_bits)

    def __repr__(self) -> str:
        return f"FixedPointCodec(fractional_bits={self.fractional_bits}, modulus_bits={self.modulus_bits})"

    @property
    def precision(self) -> float:
        """Spacing of representable values, ``2^-f``; encoding rounds to within half of it."""
        return math.ldexp(1.0, -self.fractional_bits)

    @property
    def max_abs_sum(self) -> float:
        """Largest absolute sum of rounded values that still decodes correctly: ``(2^(m-1) - 1) * 2^-f``,
        rounded down to a float64."""
        largest_float = float(self._max_integer)
        if largest_float > self._max_integer:  # 2^(m-1) - 1 needs more than 53 bits and rounded up
            largest_float = math.nextafter(largest_float, 0.0)
        return math.ldexp(largest_float, -self.fractional_bits)

    def check_sum_fits(self, x: np.ndarray, *, summands: int) -> None:
        """Raise ``EncodingOverflowError`` unless a sum of ``summands`` values as large as ``x``'s fits.

        The check is exact: with ``R = round(max |x| * 2^f)`` (the largest rounded magnitude) it requires
        ``summands * R <= 2^(m-1) - 1``. If every party to a sum of ``summands`` values passes it for its own
        values, the sum cannot wrap.
        """
        if isinstance(summands, bool) or not isinstance(summands, int) or summands < 1:
            raise ValueError(f"summands must be a positive int, got {summands!r}")
        values = np.asarray(x, dtype=np.float64)
        if values.size == 0:
            return
        if not np.all(np.isfinite(values)):
            raise EncodingOverflowError("cannot encode NaN or infinite values")
        largest = float(np.max(np.abs(values)))
        too_large = largest > self.max_abs_sum  # also keeps ldexp below from overflowing
        if too_large or summands * round(math.ldexp(largest, self.fractional_bits)) > self._max_integer:
            raise EncodingOverflowError(
                f"|x| up to {largest!r} could overflow a sum of {summands} values: with {self.fractional_bits} "
                f"fractional bits modulo 2^{self.modulus_bits} the sum must stay within {self.max_abs_sum!r}, "
                f"so each value within {self.max_abs_sum / summands!r}; clip or scale the values, or use fewer "
                "fractional bits"
            )

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Return ``round(x * 2^f) mod 2^m`` as ``uint64`` residues; raise ``EncodingOverflowError`` if out of range."""
        self.check_sum_fits(x, summands=1)
        scaled = np.rint(np.ldexp(np.asarray(x, dtype=np.float64), self.fractional_bits))
        return scaled.astype(np.int64).view(np.uint64) & self._residue_mask

    def decode(self, v: np.ndarray) -> np.ndarray:
        """Return the float64 values of residues ``v`` (any ``uint64`` array, reduced mod ``2^m``, signed)."""
        residues = np.asarray(v)
        if residues.dtype != np.uint64:
            raise TypeError(f"decode expects uint64 residues, got dtype {residues.dtype}")
        signed = (residues << self._unsigned_shift).view(np.int64) >> self._signed_shift
        return np.ldexp(signed.astype(np.float64), -self.fractional_bits)
