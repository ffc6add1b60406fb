"""Property tests of the shared fixed-point codec (protocols/fixed_point.py)."""
from __future__ import annotations

import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privsilo.protocols.fixed_point import DEFAULT_MARGIN_BITS, EncodingOverflowError, FixedPointCodec


@st.composite
def codecs(draw: st.DrawFn, *, max_modulus_bits: int = 64) -> FixedPointCodec:
    max_summands = draw(st.sampled_from([1, 2, 3, 5, 8, 10, 1000]) | st.integers(1, 64))
    margin_bits = draw(st.sampled_from([DEFAULT_MARGIN_BITS, DEFAULT_MARGIN_BITS, 0, 1]))
    headroom_bits = math.ceil(math.log2(max_summands)) + margin_bits
    modulus_bits = draw(st.sampled_from([64, 64, 53, 32]) | st.integers(headroom_bits + 2, 64))
    modulus_bits = max(min(modulus_bits, max_modulus_bits), headroom_bits + 2)
    fractional_bits = draw(st.integers(0, modulus_bits - 2 - headroom_bits))
    return FixedPointCodec(
        fractional_bits=fractional_bits, modulus_bits=modulus_bits, max_summands=max_summands, margin_bits=margin_bits
    )


def value_arrays(bound: float, shape: st.SearchStrategy[int | tuple[int, ...]]) -> st.SearchStrategy[np.ndarray]:
    return arrays(np.float64, shape, elements=st.floats(-bound, bound, allow_nan=False, allow_infinity=False))


def exact_rounded(codec: FixedPointCodec, x: np.ndarray) -> list[int]:
    """round(x * 2^f) as exact Python integers (round half to even, like numpy.rint)."""
    return [round(Fraction(float(value)) * 2**codec.fractional_bits) for value in x]


def residues(codec: FixedPointCodec, integers: list[int]) -> np.ndarray:
    """Encodings of arbitrary integers, as a party that skipped the range check would send them."""
    return np.array([integer % 2**codec.modulus_bits for integer in integers], dtype=np.uint64)


def test_headroom_is_ceil_log2_of_the_summands_plus_the_margin() -> None:
    for max_summands, headroom in [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (1000, 10), (1024, 10), (1025, 11)]:
        codec = FixedPointCodec(max_summands=max_summands)
        assert codec.headroom_bits == headroom + DEFAULT_MARGIN_BITS
        assert codec.max_integer == 2 ** (63 - codec.headroom_bits) - 1
        # The per-encoding range times the number of summands (even times 2^margin) never reaches 2^63.
        assert 2**DEFAULT_MARGIN_BITS * max_summands * codec.max_integer < 2**63


@settings(deadline=None)
@given(data=st.data())
def test_round_trip_is_within_half_the_precision(data: st.DataObject) -> None:
    codec = data.draw(codecs())
    x = data.draw(value_arrays(codec.max_abs_value, st.integers(0, 30)))
    encoded = codec.encode(x)
    assert encoded.dtype == np.uint64
    assert all(int(residue) < 2**codec.modulus_bits for residue in encoded)
    assert np.all(np.abs(codec.decode(encoded) - x) <= codec.precision / 2)


@settings(deadline=None)
@given(data=st.data())
def test_encode_and_decode_are_exact(data: st.DataObject) -> None:
    # Scaling by 2^f is a multiplication by a power of two: exact for every float in range, subnormals included.
    codec = data.draw(codecs())
    x = data.draw(value_arrays(codec.max_abs_value, st.integers(0, 30)))
    assert codec.encode(x).tolist() == residues(codec, exact_rounded(codec, x)).tolist()
    integers = data.draw(st.lists(st.integers(-codec.max_integer, codec.max_integer), max_size=30))
    decoded = codec.decode(residues(codec, integers))
    assert decoded.tolist() == [math.ldexp(float(i), -codec.fractional_bits) for i in integers]  # float(i): nearest


@settings(deadline=None)
@given(data=st.data())
def test_any_in_range_encodings_sum_without_wraparound(data: st.DataObject) -> None:
    """Homomorphism: n <= max_summands in-range encodings, added modulo 2^64, decode to the exact sum of the
    rounded values, which is within n * 2^-(f+1) of the true sum, and pass the server's range check."""
    codec = data.draw(codecs())
    summands = data.draw(st.integers(1, min(codec.max_summands, 40)))
    length = data.draw(st.integers(1, 8))
    bound = codec.max_abs_value
    vectors = data.draw(value_arrays(bound, st.just((summands, length))))
    # Hypothesis rarely lands every summand on the boundary; force the extreme sums into some examples.
    extreme = data.draw(st.sampled_from([None, bound, -bound]))
    if extreme is not None:
        vectors[:, 0] = extreme
    encoded_sum = np.zeros(length, dtype=np.uint64)
    for vector in vectors:
        encoded_sum += codec.encode(vector)  # wraps modulo 2^64
    decoded = codec.decode(encoded_sum, summands=summands)
    for position, column in enumerate(vectors.T):
        rounded_sum = sum(exact_rounded(codec, column))
        assert abs(rounded_sum) <= summands * codec.max_integer
        assert decoded[position] == float(Fraction(rounded_sum, 2**codec.fractional_bits))
        true_sum = sum(Fraction(float(value)) for value in column)
        assert abs(Fraction(rounded_sum, 2**codec.fractional_bits) - true_sum) <= Fraction(summands, 2) * Fraction(
            codec.precision
        )


@settings(deadline=None)
@given(data=st.data())
def test_a_sum_with_an_out_of_range_encoding_is_detected(data: st.DataObject) -> None:
    """One party skips the range check; every true sum beyond n * B (up to 2^margin times it, and then nothing
    has wrapped) is refused on decoding, while a sum within n * B decodes exactly whatever its parts."""
    codec = data.draw(codecs().filter(lambda c: c.max_summands >= 2 and c.margin_bits >= 1))
    summands = data.draw(st.integers(2, min(codec.max_summands, 40)))
    bound = codec.max_integer
    honest = data.draw(st.lists(st.integers(-bound, bound), min_size=summands - 1, max_size=summands - 1))
    band = summands * bound
    beyond = data.draw(st.integers(band + 1, 2**codec.margin_bits * band)) * data.draw(st.sampled_from([1, -1]))
    rogue = beyond - sum(honest)
    assert abs(rogue) > bound  # out of range by construction
    total = np.zeros(1, dtype=np.uint64)
    for residue in residues(codec, [*honest, rogue]):
        total += residue
    with pytest.raises(EncodingOverflowError, match=f"decoded sum of {summands}") as caught:
        codec.decode(total, summands=summands)
    assert caught.value.value == math.ldexp(abs(beyond), -codec.fractional_bits)

    within = data.draw(st.integers(-band, band))
    total = np.zeros(1, dtype=np.uint64)
    for residue in residues(codec, [*honest, within - sum(honest)]):
        total += residue
    assert codec.decode(total, summands=summands)[0] == math.ldexp(within, -codec.fractional_bits)


def test_the_reviews_wrapped_sum_is_now_detected() -> None:
    # Two encodings of 3.3e11 at 24 fractional bits made without headroom: their sum 6.6e11 wraps modulo 2^64
    # and used to decode, silently, to -4.4e11.
    unchecked = FixedPointCodec(fractional_bits=24, margin_bits=0).encode(np.array([3.3e11]))
    codec = FixedPointCodec(fractional_bits=24, max_summands=2)
    with pytest.raises(EncodingOverflowError, match="out of range"):
        codec.decode(unchecked + unchecked, summands=2)
    with pytest.raises(EncodingOverflowError, match="outside the range"):
        codec.encode(np.array([3.3e11]))


@settings(deadline=None)
@given(codec=codecs(max_modulus_bits=53))
def test_encode_range_check_is_exact_at_the_boundary(codec: FixedPointCodec) -> None:
    # With at most 53 bits every integer involved is exactly a float64, so the boundary can be hit exactly.
    largest_ok = math.ldexp(codec.max_integer, -codec.fractional_bits)
    assert codec.max_abs_value == largest_ok
    codec.encode(np.array([0.0, -largest_ok, largest_ok]))
    just_over = math.ldexp(codec.max_integer + 1, -codec.fractional_bits)
    with pytest.raises(EncodingOverflowError, match="outside the range") as caught:
        codec.encode(np.array([-just_over]))
    assert (caught.value.value, caught.value.limit) == (just_over, largest_ok)


@settings(deadline=None)
@given(codec=codecs(), sign=st.sampled_from([1.0, -1.0]), excess=st.floats(1.0, 1e300))
def test_encode_rejects_values_beyond_the_range(codec: FixedPointCodec, sign: float, excess: float) -> None:
    too_large = sign * math.ldexp(codec.max_integer + 1, -codec.fractional_bits) * excess
    with pytest.raises(EncodingOverflowError):
        codec.encode(np.array([0.0, too_large]))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_raise(bad: float) -> None:
    codec = FixedPointCodec()
    with pytest.raises(EncodingOverflowError, match="NaN or infinite") as caught:
        codec.encode(np.array([1.0, bad]))
    assert not math.isfinite(caught.value.value)


def test_overflow_errors_survive_pickling() -> None:
    # Ray pickles a silo's exception to carry it to the driver, which reads value and limit.
    with pytest.raises(EncodingOverflowError) as caught:
        FixedPointCodec(fractional_bits=40, max_summands=5).encode(np.array([1e6]))
    restored = pickle.loads(pickle.dumps(caught.value))
    assert (str(restored), restored.value, restored.limit) == (str(caught.value), 1e6, caught.value.limit)


def test_negatives_are_twos_complement_and_defaults_are_documented() -> None:
    codec = FixedPointCodec()
    assert codec.precision == 2.0**-24 and codec.headroom_bits == DEFAULT_MARGIN_BITS == 4
    next_float = math.nextafter(codec.max_abs_value, math.inf)
    assert Fraction(codec.max_abs_value) <= Fraction(2**59 - 1, 2**24) < Fraction(next_float)
    assert codec.encode(np.array([-codec.precision]))[0] == np.uint64(2**64 - 1)
    # The README's range for 5 silos: |x| < 2^(63 - 7 - f).
    for fractional_bits in (8, 16, 24, 32, 40):
        five_silos = FixedPointCodec(fractional_bits=fractional_bits, max_summands=5)
        assert five_silos.max_abs_value < 2.0 ** (56 - fractional_bits) == math.nextafter(five_silos.max_abs_value, math.inf)
    small = FixedPointCodec(fractional_bits=4, modulus_bits=12)
    assert small.encode(np.array([-1.0]))[0] == 2**12 - 16
    # Residues may carry garbage above bit m (e.g. uniform 64-bit masks); decoding reduces them first.
    assert small.decode(np.array([2**40 + 2**12 - 16], dtype=np.uint64))[0] == -1.0


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"fractional_bits": -1}, "fractional_bits"),
        ({"fractional_bits": 59}, r"\[0, 58\]"),
        ({"fractional_bits": 48, "max_summands": 1025}, r"\[0, 47\]"),
        ({"fractional_bits": 7, "modulus_bits": 8, "margin_bits": 0}, "fractional_bits"),
        ({"modulus_bits": 65}, "modulus_bits"),
        ({"fractional_bits": 0, "modulus_bits": 1}, "modulus_bits"),
        ({"fractional_bits": True}, "fractional_bits"),
        ({"fractional_bits": 24.0}, "fractional_bits"),
        ({"max_summands": 0}, "max_summands"),
        ({"max_summands": True}, "max_summands"),
        ({"margin_bits": -1}, "margin_bits"),
    ],
)
def test_invalid_parameters_are_rejected(arguments: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FixedPointCodec(**arguments)


def test_decode_requires_uint64_residues_and_a_valid_number_of_summands() -> None:
    codec = FixedPointCodec(max_summands=3)
    with pytest.raises(TypeError):
        codec.decode(np.array([1, 2], dtype=np.int64))
    for summands in (0, 4, True):
        with pytest.raises(ValueError, match="summands"):
            codec.decode(np.zeros(2, dtype=np.uint64), summands=summands)
