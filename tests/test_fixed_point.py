"""Property tests of the shared fixed-point codec (protocols/fixed_point.py)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from protocols.fixed_point import EncodingOverflowError, FixedPointCodec


@st.composite
def codecs(draw: st.DrawFn, *, min_modulus_bits: int = 2) -> FixedPointCodec:
    modulus_bits = draw(st.sampled_from([64, 64, 64, 53, 32, 16, 8, min_modulus_bits]))
    fractional_bits = draw(st.integers(0, modulus_bits - 2))
    return FixedPointCodec(fractional_bits=fractional_bits, modulus_bits=modulus_bits)


def per_value_bound(codec: FixedPointCodec, summands: int) -> float:
    """The largest float |x| for which a sum of ``summands`` values passes ``check_sum_fits``."""
    largest_integer = (2 ** (codec.modulus_bits - 1) - 1) // summands
    largest_float = float(largest_integer)
    if largest_float > largest_integer:
        largest_float = math.nextafter(largest_float, 0.0)
    return math.ldexp(largest_float, -codec.fractional_bits)


def value_arrays(bound: float, shape: st.SearchStrategy[int | tuple[int, ...]]) -> st.SearchStrategy[np.ndarray]:
    return arrays(np.float64, shape, elements=st.floats(-bound, bound, allow_nan=False, allow_infinity=False))


def exact_rounded(codec: FixedPointCodec, x: np.ndarray) -> list[int]:
    """round(x * 2^f) as exact Python integers (round half to even, like numpy.rint)."""
    return [round(Fraction(float(value)) * 2**codec.fractional_bits) for value in x]


@settings(deadline=None)
@given(data=st.data())
def test_round_trip_is_within_half_the_precision(data: st.DataObject) -> None:
    codec = data.draw(codecs())
    x = data.draw(value_arrays(per_value_bound(codec, 1), st.integers(0, 30)))
    encoded = codec.encode(x)
    assert encoded.dtype == np.uint64
    assert all(int(residue) < 2**codec.modulus_bits for residue in encoded)
    assert np.all(np.abs(codec.decode(encoded) - x) <= codec.precision / 2)


@settings(deadline=None)
@given(data=st.data())
def test_sum_of_encodings_decodes_to_the_exact_sum_of_rounded_values(data: st.DataObject) -> None:
    codec = data.draw(codecs())
    summands = data.draw(st.integers(2, 20))
    length = data.draw(st.integers(1, 8))
    vectors = data.draw(value_arrays(per_value_bound(codec, summands), st.just((summands, length))))
    encoded_sum = np.zeros(length, dtype=np.uint64)
    for vector in vectors:
        codec.check_sum_fits(vector, summands=summands)
        encoded_sum += codec.encode(vector)  # wraps modulo 2^64
    decoded = codec.decode(encoded_sum)
    for position, column in enumerate(vectors.T):
        rounded_sum = sum(exact_rounded(codec, column))
        assert decoded[position] == float(Fraction(rounded_sum, 2**codec.fractional_bits))
        true_sum = sum(Fraction(float(value)) for value in column)
        assert abs(Fraction(rounded_sum, 2**codec.fractional_bits) - true_sum) <= Fraction(summands, 2) * Fraction(
            codec.precision
        )


@given(codec=codecs(min_modulus_bits=53).filter(lambda c: c.modulus_bits <= 53), summands=st.integers(1, 20))
def test_check_sum_fits_is_exact_at_the_boundary(codec: FixedPointCodec, summands: int) -> None:
    # With at most 53 bits every integer involved is exactly a float64, so the boundary can be hit exactly.
    largest_ok = (2 ** (codec.modulus_bits - 1) - 1) // summands
    codec.check_sum_fits(np.array([0.0, -math.ldexp(largest_ok, -codec.fractional_bits)]), summands=summands)
    with pytest.raises(EncodingOverflowError, match=f"sum of {summands} values"):
        codec.check_sum_fits(np.array([math.ldexp(largest_ok + 1, -codec.fractional_bits)]), summands=summands)


@given(codec=codecs(), sign=st.sampled_from([1.0, -1.0]), excess=st.floats(1.0, 1e300))
def test_encode_rejects_values_beyond_the_signed_range(codec: FixedPointCodec, sign: float, excess: float) -> None:
    too_large = sign * math.ldexp(1.0, codec.modulus_bits - 1 - codec.fractional_bits) * excess
    with pytest.raises(EncodingOverflowError):
        codec.encode(np.array([0.0, too_large]))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_raise(bad: float) -> None:
    codec = FixedPointCodec()
    with pytest.raises(EncodingOverflowError, match="NaN or infinite"):
        codec.encode(np.array([1.0, bad]))
    with pytest.raises(EncodingOverflowError):
        codec.check_sum_fits(np.array([bad]), summands=3)


def test_negatives_are_twos_complement_and_defaults_are_documented() -> None:
    codec = FixedPointCodec()
    assert codec.precision == 2.0**-24
    next_float = math.nextafter(codec.max_abs_sum, math.inf)
    assert Fraction(codec.max_abs_sum) <= Fraction(2**63 - 1, 2**24) < Fraction(next_float)
    assert codec.encode(np.array([-codec.precision]))[0] == np.uint64(2**64 - 1)
    small = FixedPointCodec(fractional_bits=4, modulus_bits=12)
    assert small.encode(np.array([-1.0]))[0] == 2**12 - 16
    # Residues may carry garbage above bit m (e.g. uniform 64-bit masks); decoding reduces them first.
    assert small.decode(np.array([2**40 + 2**12 - 16], dtype=np.uint64))[0] == -1.0


@pytest.mark.parametrize(
    ("fractional_bits", "modulus_bits"), [(-1, 64), (63, 64), (7, 8), (24, 65), (0, 1), (True, 64), (24.0, 64)]
)
def test_invalid_parameters_are_rejected(fractional_bits: int, modulus_bits: int) -> None:
    with pytest.raises(ValueError):
        FixedPointCodec(fractional_bits=fractional_bits, modulus_bits=modulus_bits)


def test_decode_requires_uint64_residues_and_summands_must_be_positive() -> None:
    codec = FixedPointCodec()
    with pytest.raises(TypeError):
        codec.decode(np.array([1, 2], dtype=np.int64))
    with pytest.raises(ValueError):
        codec.check_sum_fits(np.array([1.0]), summands=0)
