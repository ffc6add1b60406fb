"""Fixed-point encoding of float64 vectors as residues modulo 2^m, shared by every aggregation protocol.

Secure aggregation (pairwise masking, Bonawitz et al., CCS 2017) and additively homomorphic encryption
(Paillier) add integers modulo a power of two or an RSA modulus, not floats. ``FixedPointCodec`` maps a real
``x`` to the integer ``r = round(x * 2^f)`` (round half to even, as ``numpy.rint``) and stores it as a residue
modulo ``2^m`` (``m = modulus_bits``), negatives in two's complement. Residues live in ``numpy.uint64``, whose
wraparound arithmetic is exactly addition modulo 2^64; for ``m < 64`` decoding first reduces modulo ``2^m``
(which divides 2^64), so callers may add encodings, or encodings and uniform 64-bit masks, modulo 2^64.

Range with headroom. A codec is built for sums of at most ``N = max_summands`` encodings and reserves
``h = ceil(log2 N) + margin_bits`` headroom bits: one encoding may carry ``|r| <= B = 2^(m-1-h) - 1``, i.e.
``|x| <= max_abs_value ~ 2^(m-1-h-f)``, and ``encode`` refuses anything larger. Since ``N * B < 2^h * B <
2^(m-1)``, a sum of up to N in-range encodings never wraps around, and a true sum may even exceed the sum of
the bounds ``n * B`` by a factor ``2^margin_bits`` before it could wrap.

Homomorphism. For ``n <= N`` values ``x_1..x_n`` with rounded integers ``r_k = round(x_k * 2^f)``, ``|r_k| <= B``::

    decode(encode(x_1) + ... + encode(x_n)  mod 2^64, summands=n) == (r_1 + ... + r_n) * 2^-f

exactly as an integer; the returned float64 is its correctly rounded value (exact while the sum has at most 53
significant bits). Each value carries a rounding error ``|x - r * 2^-f| <= 2^-(f+1) = precision / 2``, so a
sum of ``n`` values is within ``n * precision / 2`` of the float sum.

Detection. ``decode`` raises ``EncodingOverflowError`` when a decoded sum lies outside ``[-n * B, n * B]``,
which no sum of ``n`` in-range encodings can reach. So a party that skipped the range check is caught whenever
the true sum of the rounded values is beyond ``n * B`` yet below ``2^(m-1)`` (all overshoots up to a factor
``2^margin_bits``): then nothing wrapped, and the decoded sum is the true one, out of range. A sum of at most
``n * B`` in magnitude is decoded exactly whatever its parts. Only a residue far outside the range (a sum
beyond ``2^(m-1)``, which ``encode`` never produces) can wrap back into the accepted band undetected.
"""
from __future__ import annotations

import math

import numpy as np

DEFAULT_MARGIN_BITS = 4
"""Headroom bits beyond ``ceil(log2(max_summands))``: overshoots of the summed range by up to 16x are caught."""


class EncodingOverflowError(ValueError):
    """A value, or a decoded sum, lies outside the codec's range (or is NaN or infinite).

    ``value`` is the offending magnitude (NaN or infinity for non-finite input) and ``limit`` the magnitude
    that was allowed; both are floats, so the error pickles across processes.
    """

    def __init__(self, message: str, value: float, limit: float) -> None:
        super().__init__(message, value, limit)
        self.message = message
        self.value = value
        self.limit = limit

    def __str__(self) -> str:
        return self.message


def _integer_as_float_down(integer: int, exponent: int) -> float:
    """``integer * 2^exponent`` as a float64, rounded towards zero (for bounds that must not be overstated)."""
    as_float = float(integer)
    if as_float > integer:  # more than 53 significant bits, rounded up
        as_float = math.nextafter(as_float, 0.0)
    return math.ldexp(as_float, exponent)


class FixedPointCodec:
    """Fixed-point encoding with ``fractional_bits`` bits after the binary point, modulo ``2^modulus_bits``,
    with headroom for sums of up to ``max_summands`` encodings (see the module docstring).

    ``modulus_bits`` may be 2..64 (smaller moduli leave room for packing several values into one Paillier
    plaintext); ``fractional_bits`` may be 0..``modulus_bits - 2 - headroom_bits`` so that at least one integer
    bit remains.
    """

    def __init__(
        self,
        *,
        fractional_bits: int = 24,
        modulus_bits: int = 64,
        max_summands: int = 1,
        margin_bits: int = DEFAULT_MARGIN_BITS,
    ) -> None:
        if isinstance(modulus_bits, bool) or not isinstance(modulus_bits, int) or not 2 <= modulus_bits <= 64:
            raise ValueError(f"modulus_bits must be an int in [2, 64], got {modulus_bits!r}")
        if isinstance(max_summands, bool) or not isinstance(max_summands, int) or max_summands < 1:
            raise ValueError(f"max_summands must be an int >= 1, got {max_summands!r}")
        if isinstance(margin_bits, bool) or not isinstance(margin_bits, int) or margin_bits < 0:
            raise ValueError(f"margin_bits must be an int >= 0, got {margin_bits!r}")
        headroom_bits = (max_summands - 1).bit_length() + margin_bits  # ceil(log2(max_summands)) + margin
        top = modulus_bits - 2 - headroom_bits
        if isinstance(fractional_bits, bool) or not isinstance(fractional_bits, int) or not 0 <= fractional_bits <= top:
            raise ValueError(
                f"fractional_bits must be an int in [0, {top}] (modulus_bits {modulus_bits} minus 2 minus "
                f"{headroom_bits} headroom bits), got {fractional_bits!r}"
            )
        self.fractional_bits = fractional_bits
        self.modulus_bits = modulus_bits
        self.max_summands = max_summands
        self.margin_bits = margin_bits
        self.headroom_bits = headroom_bits
        self._max_integer = 2 ** (modulus_bits - 1 - headroom_bits) - 1
        self._residue_mask = np.uint64(2**modulus_bits - 1)
        self._unsigned_shift = np.uint64(64 - modulus_bits)
        self._signed_shift = np.int64(64 - modulus_bits)

    def __repr__(self) -> str:
        return (
            f"FixedPointCodec(fractional_bits={self.fractional_bits}, modulus_bits={self.modulus_bits}, "
            f"max_summands={self.max_summands}, margin_bits={self.margin_bits})"
        )

    @property
    def precision(self) -> float:
        """Spacing of representable values, ``2^-f``; encoding rounds to within half of it."""
        return math.ldexp(1.0, -self.fractional_bits)

    @property
    def max_integer(self) -> int:
        """``B = 2^(m-1-h) - 1``: the largest ``|round(x * 2^f)|`` one encoding may carry."""
        return self._max_integer

    @property
    def max_abs_value(self) -> float:
        """The largest ``|x|`` of one encoding, ``B * 2^-f``, rounded down to a float64."""
        return _integer_as_float_down(self._max_integer, -self.fractional_bits)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Return ``round(x * 2^f) mod 2^m`` as ``uint64`` residues.

        Raises ``EncodingOverflowError`` if some ``|round(x * 2^f)| > B`` (checked exactly) or ``x`` is not finite.
        """
        return self.to_integers(x).view(np.uint64) & self._residue_mask

    def to_integers(self, x: np.ndarray, *, toward_zero: bool = False) -> np.ndarray:
        """Return the signed integers ``round(x * 2^f)`` as ``int64`` (the values ``encode`` stores as residues),
        range-checked like ``encode``.

        ``toward_zero=True`` truncates instead of rounding to nearest: then ``|r| * 2^-f <= |x|`` for every entry,
        so the encoding never lengthens a vector (a clipped vector stays clipped), at an error below ``2^-f``
        instead of ``2^-(f+1)`` per value (used by the Paillier weighting protocol, whose per-user deltas are
        encoded before the noise is added).
        """
        values = np.asarray(x, dtype=np.float64)
        if values.size:
            self.check_range(values)
        scaled = values * math.ldexp(1.0, self.fractional_bits)  # exact, like np.ldexp: a power of two
        return (np.trunc(scaled) if toward_zero else np.rint(scaled)).astype(np.int64)

    def check_range(self, values: np.ndarray) -> None:
        """Raise ``EncodingOverflowError`` if some value is not finite or would encode beyond the range."""
        largest = float(np.max(np.abs(values)))
        if not math.isfinite(largest):
            raise EncodingOverflowError("cannot encode NaN or infinite values", largest, self.max_abs_value)
        # Rounding is monotone in |x|, so the largest |x| has the largest rounded magnitude. The first test
        # keeps ldexp finite; the second is exact (Python integers).
        beyond = math.ldexp(1.0, self.modulus_bits - self.fractional_bits)
        if largest >= beyond or round(math.ldexp(largest, self.fractional_bits)) > self._max_integer:
            raise EncodingOverflowError(
                f"|x| = {largest:.6g} is outside the range +-{self.max_abs_value:.6g} of one encoding "
                f"({self.fractional_bits} fractional bits, {self.headroom_bits} headroom bits for sums of up to "
                f"{self.max_summands}, modulo 2^{self.modulus_bits})",
                largest,
                self.max_abs_value,
            )

    def decode(self, v: np.ndarray, *, summands: int = 1) -> np.ndarray:
        """Return the float64 values of ``v``, the sum of ``summands`` encodings (any ``uint64`` residues,
        reduced mod ``2^m``, signed).

        Raises ``EncodingOverflowError`` if an entry lies outside ``[-summands * B, summands * B]``, which no sum
        of that many in-range encodings reaches: some encoding was out of range and the sum may have wrapped.
        """
        if isinstance(summands, bool) or not isinstance(summands, int) or not 1 <= summands <= self.max_summands:
            raise ValueError(f"summands must be an int in [1, {self.max_summands}], got {summands!r}")
        signed = self._signed(v)
        largest = max(int(signed.max()), -int(signed.min())) if signed.size else 0  # Python ints: no abs overflow
        bound = summands * self._max_integer
        if largest > bound:
            raise EncodingOverflowError(
                f"a decoded sum of {summands} encoding(s) reaches |s| = "
                f"{math.ldexp(largest, -self.fractional_bits):.6g}, beyond {summands} x "
                f"{self.max_abs_value:.6g}: some encoding was out of range (a party skipped the range check), "
                "so the sum cannot be trusted",
                math.ldexp(largest, -self.fractional_bits),
                _integer_as_float_down(bound, -self.fractional_bits),
            )
        return signed.astype(np.float64) * math.ldexp(1.0, -self.fractional_bits)  # exact: a power of two

    def _signed(self, v: np.ndarray) -> np.ndarray:
        residues = np.asarray(v)
        if residues.dtype != np.uint64:
            raise TypeError(f"decode expects uint64 residues, got dtype {residues.dtype}")
        return (residues << self._unsigned_shift).view(np.int64) >> self._signed_shift
