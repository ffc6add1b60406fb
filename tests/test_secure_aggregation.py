"""Tests of pairwise-masking secure aggregation (protocols/secure_aggregation/) and plain summation."""
from __future__ import annotations

import hashlib
import itertools
import pickle
import subprocess
import sys

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from scipy import stats

from protocols.base import ProtocolStateError
from protocols.fixed_point import EncodingOverflowError, FixedPointCodec
from protocols.plain import PlainSumServer, PlainSumSilo, PlainVector
from protocols.secure_aggregation import (
    KeyAdvertisement,
    KeyAgreementDone,
    KeyDirectory,
    MaskedVector,
    SecAggServer,
    SecAggSilo,
    SecAggStage,
    derive_pairwise_key,
    mask_stream,
)

SILO_IDS = (0, 1, 2, 3, 4)
CODEC = FixedPointCodec(max_summands=len(SILO_IDS))


def fixed_private_key(silo_id: int, *, seed: bytes = b"test") -> X25519PrivateKey:
    """A reproducible X25519 key (tests only; the protocol draws keys from the OS CSPRNG by default)."""
    return X25519PrivateKey.from_private_bytes(hashlib.sha256(seed + silo_id.to_bytes(8, "big")).digest())


def public_bytes(private_key: X25519PrivateKey) -> bytes:
    return private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def make_silos(silo_ids: tuple[int, ...] = SILO_IDS, *, codec: FixedPointCodec = CODEC) -> dict[int, SecAggSilo]:
    return {i: SecAggSilo(i, codec=codec, private_key=fixed_private_key(i)) for i in silo_ids}


def run_setup(silos: dict[int, SecAggSilo], server: SecAggServer) -> None:
    """The engine's setup loop, verbatim."""
    inbound: dict[int, object] = {}
    for stage in server.setup_stages:
        replies = {i: silo.setup_reply(stage, inbound.get(i)) for i, silo in silos.items()}
        inbound = server.relay(stage, replies)


def set_up(silo_ids: tuple[int, ...] = SILO_IDS, *, codec: FixedPointCodec = CODEC):
    silos = make_silos(silo_ids, codec=codec)
    server = SecAggServer(codec=codec)
    run_setup(silos, server)
    return silos, server


def aggregate(silos, server, vectors: dict[int, np.ndarray], *, round_index: int) -> np.ndarray:
    participants = tuple(vectors)
    messages = {
        i: silos[i].protect(vector, round_index=round_index, participants=participants) for i, vector in vectors.items()
    }
    return server.combine(messages, round_index=round_index, participants=participants)


def test_every_setup_stage_transition_with_real_keys() -> None:
    silos = make_silos()
    server = SecAggServer(codec=CODEC)
    assert server.setup_stages == (SecAggStage.ADVERTISE_KEYS, SecAggStage.AGREE_KEYS)

    advertisements = {i: silo.setup_reply(SecAggStage.ADVERTISE_KEYS, None) for i, silo in silos.items()}
    for i, advertisement in advertisements.items():
        assert advertisement == KeyAdvertisement(sender=i, public_key=public_bytes(fixed_private_key(i)))
    directories = server.relay(SecAggStage.ADVERTISE_KEYS, advertisements)
    assert directories.keys() == silos.keys()
    expected_directory = {i: public_bytes(fixed_private_key(i)) for i in SILO_IDS}
    for directory in directories.values():
        assert isinstance(directory, KeyDirectory)
        assert dict(directory.public_keys) == expected_directory
        with pytest.raises(TypeError):
            directory.public_keys[0] = b"x" * 32  # type: ignore[index]

    acknowledgements = {i: silo.setup_reply(SecAggStage.AGREE_KEYS, directories[i]) for i, silo in silos.items()}
    assert acknowledgements == {i: KeyAgreementDone(sender=i) for i in SILO_IDS}
    assert server.relay(SecAggStage.AGREE_KEYS, acknowledgements) == {}

    vectors = {i: np.full(3, float(i)) for i in SILO_IDS}
    np.testing.assert_array_equal(aggregate(silos, server, vectors, round_index=0), np.full(3, 10.0))


@pytest.mark.parametrize("participants", [SILO_IDS, (0, 2, 4), (4, 1)])
@pytest.mark.parametrize("codec", [CODEC, FixedPointCodec(fractional_bits=16, modulus_bits=48, max_summands=5)], ids=repr)
def test_combine_equals_the_plain_sum(participants: tuple[int, ...], codec: FixedPointCodec) -> None:
    silos, server = set_up(codec=codec)
    rng = np.random.default_rng(20240601)
    largest = codec.max_abs_value
    for round_index in range(3):
        vectors = {
            i: np.concatenate(
                [rng.normal(scale=1e3, size=500), rng.uniform(-largest, largest, size=20), [largest, -largest, 0.0]]
            )
            for i in participants
        }
        total = aggregate(silos, server, vectors, round_index=round_index)
        exact = codec.decode(sum(codec.encode(vector) for vector in vectors.values()), summands=len(participants))
        np.testing.assert_array_equal(total, exact)
        plain_sum = np.sum(list(vectors.values()), axis=0)
        float_slack = 4 * len(participants) * np.spacing(np.abs(plain_sum) + largest)
        assert np.all(np.abs(total - plain_sum) <= len(participants) * codec.precision / 2 + float_slack)


def test_neither_side_handles_a_round_below_the_minimum() -> None:
    """Defence in depth: a sum of one masked vector is the vector, so the silo refuses to mask for a round below
    ``min_participants`` and the server refuses to combine one, whatever the caller does."""
    silos, server = set_up()
    vector = np.array([0.25, -3.0])
    with pytest.raises(ProtocolStateError, match="below the minimum of 2"):
        silos[3].protect(vector, round_index=0, participants=(3,))
    # What a silo without the check would send for a one-silo round: its encoding, unmasked.
    unmasked = MaskedVector(sender=3, round_index=0, data=CODEC.encode(vector))
    with pytest.raises(ProtocolStateError, match="below the minimum of 2"):
        server.combine({3: unmasked}, round_index=0, participants=(3,))

    strict = {i: SecAggSilo(i, codec=CODEC, min_participants=3, private_key=fixed_private_key(i)) for i in SILO_IDS}
    strict_server = SecAggServer(codec=CODEC, min_participants=3)
    run_setup(strict, strict_server)
    with pytest.raises(ProtocolStateError, match="round of 2 participant\\(s\\) is below the minimum of 3"):
        strict[0].protect(vector, round_index=0, participants=(0, 1))
    pair = {i: silos[i].protect(vector, round_index=1, participants=(0, 1)) for i in (0, 1)}
    with pytest.raises(ProtocolStateError, match="below the minimum of 3"):
        strict_server.combine(pair, round_index=1, participants=(0, 1))
    np.testing.assert_array_equal(
        aggregate(strict, strict_server, {0: vector, 1: vector, 4: vector}, round_index=2), 3 * vector
    )


@pytest.mark.parametrize("min_participants", [1, 0, 6, True, 2.0])
def test_the_minimum_must_be_at_least_two_and_within_the_codecs_headroom(min_participants) -> None:
    with pytest.raises(ValueError, match="min_participants"):
        SecAggSilo(0, codec=CODEC, min_participants=min_participants)
    with pytest.raises(ValueError, match="min_participants"):
        SecAggServer(codec=CODEC, min_participants=min_participants)


def test_rounds_larger_than_the_codecs_headroom_are_refused() -> None:
    codec = FixedPointCodec(max_summands=2)
    silos, server = set_up((0, 1, 2), codec=codec)
    with pytest.raises(ProtocolStateError, match="headroom for 2 summands"):
        silos[0].protect(np.ones(2), round_index=0, participants=(0, 1, 2))
    messages = {i: silos[i].protect(np.ones(2), round_index=1, participants=(i, (i + 1) % 3)) for i in (0, 1, 2)}
    with pytest.raises(ProtocolStateError, match="headroom for 2 summands"):
        server.combine(messages, round_index=1, participants=(0, 1, 2))


def test_the_server_detects_an_unchecked_encoding_that_wrapped_the_sum() -> None:
    """A silo that skips the range check: its masked upload looks like any other, but the decoded sum falls
    outside the range of n in-range encodings, and the server refuses it instead of returning a wrapped sum."""
    silos, server = set_up()
    participants = (0, 1)
    honest = silos[0].protect(np.array([1.0, CODEC.max_abs_value]), round_index=0, participants=participants)
    rogue_value = np.array([1.0, 2**CODEC.margin_bits * CODEC.max_abs_value])
    # Silo 1's masked input, built by hand without the range check (its codec would refuse the value).
    unchecked = FixedPointCodec(fractional_bits=CODEC.fractional_bits, margin_bits=0).encode(rogue_value)
    key = derive_pairwise_key(
        private_key=fixed_private_key(1), peer_public_key=public_bytes(fixed_private_key(0)), own_id=1, peer_id=0
    )
    rogue = MaskedVector(sender=1, round_index=0, data=unchecked - mask_stream(key, round_index=0, length=2))
    with pytest.raises(EncodingOverflowError, match="decoded sum of 2 encoding"):
        server.combine({0: honest, 1: rogue}, round_index=0, participants=participants)
    with pytest.raises(EncodingOverflowError, match="outside the range"):
        silos[1].protect(rogue_value, round_index=0, participants=participants)


def test_masked_vectors_differ_from_encodings_and_look_uniform() -> None:
    """Chi-square test on the top byte of every masked word, for a highly structured input whose encodings all
    have top byte 0x00 or 0xFF. Each of the 5 tests rejects a truly uniform byte with probability 1e-7, so the
    false-failure rate is below 5e-7 (the keys are fixed, so the outcome is reproducible)."""
    silos, _ = set_up()
    length = 2**16
    vector = np.linspace(-1.0, 1.0, length)
    encoded = CODEC.encode(vector)
    threshold = stats.chi2.isf(1e-7, df=255)
    for silo in silos.values():
        message = silo.protect(vector, round_index=0, participants=SILO_IDS)
        assert message.data.dtype == np.uint64 and not message.data.flags.writeable
        assert not np.any(message.data == encoded)
        counts = np.bincount((message.data >> np.uint64(56)).astype(np.intp), minlength=256)
        expected = length / 256
        assert np.sum((counts - expected) ** 2 / expected) < threshold


def test_pairwise_keys_agree_and_differ_between_pairs() -> None:
    keys = {}
    for i, j in itertools.permutations(SILO_IDS, 2):
        keys[i, j] = derive_pairwise_key(
            private_key=fixed_private_key(i), peer_public_key=public_bytes(fixed_private_key(j)), own_id=i, peer_id=j
        )
    for i, j in itertools.combinations(SILO_IDS, 2):
        assert len(keys[i, j]) == 32 and keys[i, j] == keys[j, i]
    assert len(set(keys.values())) == len(keys) // 2


def test_masks_of_a_pair_cancel() -> None:
    silos, _ = set_up()
    zeros = np.zeros(64)
    for round_index, pair in enumerate(itertools.combinations(SILO_IDS, 2)):
        first, second = (silos[i].protect(zeros, round_index=round_index, participants=pair).data for i in pair)
        assert np.any(first != 0)
        np.testing.assert_array_equal(first + second, np.zeros(64, dtype=np.uint64))


def test_different_rounds_give_different_masks() -> None:
    silos, _ = set_up()
    vector = np.ones(256)
    round_0 = silos[0].protect(vector, round_index=0, participants=SILO_IDS).data
    round_1 = silos[0].protect(vector, round_index=1, participants=SILO_IDS).data
    assert not np.any(round_0 == round_1)
    key = bytes(range(32))
    assert not np.any(mask_stream(key, round_index=7, length=64) == mask_stream(key, round_index=8, length=64))


def test_mask_stream_is_the_rfc8439_chacha20_keystream() -> None:
    # RFC 8439 appendix A.1, test vectors 1 (all-zero nonce) and 5 (nonce ending in 0x02), block counter 0.
    first = mask_stream(bytes(32), round_index=0, length=2)
    fifth = mask_stream(bytes(32), round_index=2 << 88, length=2)
    assert first.astype("<u8").tobytes() == bytes.fromhex("76b8e0ada0f13d90405d6ae55386bd28")
    assert fifth.astype("<u8").tobytes() == bytes.fromhex("c2c64d378cd536374ae204b9ef933fcd")


def test_a_masked_vector_is_the_encoding_plus_the_signed_mask_streams_of_its_peers() -> None:
    # protect expands every peer's stream into one reused buffer; the result must be exactly the definition.
    silos, _ = set_up()
    keys = {
        j: derive_pairwise_key(private_key=fixed_private_key(2), peer_public_key=public_bytes(fixed_private_key(j)),
                               own_id=2, peer_id=j)
        for j in SILO_IDS if j != 2
    }
    vector = np.linspace(-3.0, 3.0, 1001)
    participants = (0, 2, 3, 4)
    expected = CODEC.encode(vector)
    for j in (0, 3, 4):
        stream = mask_stream(keys[j], round_index=5, length=vector.size)
        expected = expected + stream if 2 < j else expected - stream
    masked = silos[2].protect(vector, round_index=5, participants=participants).data
    np.testing.assert_array_equal(masked, expected)
    assert not mask_stream(keys[0], round_index=5, length=3).flags.writeable


def test_silo_rejects_out_of_order_calls() -> None:
    silo = SecAggSilo(0, codec=CODEC)
    with pytest.raises(ProtocolStateError, match="before setup"):
        silo.protect(np.zeros(2), round_index=0, participants=(0, 1))
    with pytest.raises(ProtocolStateError, match="expected"):
        silo.setup_reply(SecAggStage.AGREE_KEYS, KeyDirectory(public_keys={}))
    with pytest.raises(ProtocolStateError, match="no inbound"):
        silo.setup_reply(SecAggStage.ADVERTISE_KEYS, KeyDirectory(public_keys={}))
    silo.setup_reply(SecAggStage.ADVERTISE_KEYS, None)
    with pytest.raises(ProtocolStateError, match="expected"):
        silo.setup_reply(SecAggStage.ADVERTISE_KEYS, None)
    with pytest.raises(ProtocolStateError, match="KeyDirectory"):
        silo.setup_reply(SecAggStage.AGREE_KEYS, None)
    with pytest.raises(ProtocolStateError, match="does not hold"):
        silo.setup_reply(SecAggStage.AGREE_KEYS, KeyDirectory(public_keys={0: b"\x09" * 32}))


def test_silo_rejects_bad_participants_and_reused_rounds() -> None:
    silos, _ = set_up()
    silo = silos[1]
    with pytest.raises(ProtocolStateError, match="not among the participants"):
        silo.protect(np.zeros(2), round_index=0, participants=(0, 2))
    with pytest.raises(ProtocolStateError, match="no pairwise key"):
        silo.protect(np.zeros(2), round_index=0, participants=(1, 99))
    with pytest.raises(ProtocolStateError, match="more than once"):
        silo.protect(np.zeros(2), round_index=0, participants=(1, 2, 2))
    with pytest.raises(ProtocolStateError, match="round_index"):
        silo.protect(np.zeros(2), round_index=-1, participants=(1, 2))
    with pytest.raises(EncodingOverflowError):
        silo.protect(np.array([2 * CODEC.max_abs_value]), round_index=0, participants=(1, 2, 3))
    silo.protect(np.zeros(2), round_index=5, participants=(1, 2))
    for reused in (5, 4):
        with pytest.raises(ProtocolStateError, match="masks cannot be reused"):
            silo.protect(np.ones(2), round_index=reused, participants=(1, 2))
    with pytest.raises(ProtocolStateError, match="expected None"):
        silo.setup_reply(SecAggStage.ADVERTISE_KEYS, None)


def test_server_rejects_out_of_order_and_malformed_setup() -> None:
    silos = make_silos()
    advertisements = {i: silo.setup_reply(SecAggStage.ADVERTISE_KEYS, None) for i, silo in silos.items()}
    server = SecAggServer(codec=CODEC)
    with pytest.raises(ProtocolStateError, match="before setup"):
        server.combine({}, round_index=0, participants=(0, 1))
    with pytest.raises(ProtocolStateError, match="expected"):
        server.relay(SecAggStage.AGREE_KEYS, {})
    with pytest.raises(ProtocolStateError, match="same public key"):
        duplicate = KeyAdvertisement(sender=5, public_key=advertisements[0].public_key)
        server.relay(SecAggStage.ADVERTISE_KEYS, {**advertisements, 5: duplicate})
    with pytest.raises(ProtocolStateError, match="own key"):
        server.relay(SecAggStage.ADVERTISE_KEYS, {**advertisements, 5: advertisements[4]})
    with pytest.raises(ProtocolStateError, match="own key"):
        server.relay(SecAggStage.ADVERTISE_KEYS, {**advertisements, 5: None})
    with pytest.raises(ProtocolStateError, match="invalid X25519"):
        server.relay(SecAggStage.ADVERTISE_KEYS, {**advertisements, 5: KeyAdvertisement(5, b"short")})
    with pytest.raises(ProtocolStateError, match="no silo"):
        server.relay(SecAggStage.ADVERTISE_KEYS, {})
    directories = server.relay(SecAggStage.ADVERTISE_KEYS, advertisements)
    acknowledgements = {i: silo.setup_reply(SecAggStage.AGREE_KEYS, directories[i]) for i, silo in silos.items()}
    with pytest.raises(ProtocolStateError, match="replies from"):
        server.relay(SecAggStage.AGREE_KEYS, {i: acknowledgements[i] for i in (0, 1, 2, 3)})
    with pytest.raises(ProtocolStateError, match="answered"):
        server.relay(SecAggStage.AGREE_KEYS, {**acknowledgements, 4: KeyAgreementDone(sender=3)})
    server.relay(SecAggStage.AGREE_KEYS, acknowledgements)
    with pytest.raises(ProtocolStateError, match="expected None"):
        server.relay(SecAggStage.ADVERTISE_KEYS, advertisements)


def test_server_rejects_malformed_rounds() -> None:
    silos, server = set_up()
    participants = (0, 1, 2)
    messages = {i: silos[i].protect(np.ones(4), round_index=3, participants=participants) for i in participants}
    cases = {
        "missing messages from \\[2\\]": ({0: messages[0], 1: messages[1]}, participants),
        "unexpected from \\[3\\]": ({**messages, 3: messages[0]}, participants),
        "claims sender": ({**messages, 2: messages[1]}, participants),
        "expected MaskedVector": ({**messages, 2: PlainVector(2, 3, np.ones(4))}, participants),
        "took no part": (messages, (0, 1, 2, 7)),
        "expected flat uint64": ({**messages, 2: MaskedVector(2, 3, np.zeros(5, dtype=np.uint64))}, participants),
    }
    for match, (round_messages, round_participants) in cases.items():
        with pytest.raises(ProtocolStateError, match=match):
            server.combine(round_messages, round_index=3, participants=round_participants)
    with pytest.raises(ProtocolStateError, match="claims sender"):
        server.combine(messages, round_index=4, participants=participants)
    np.testing.assert_array_equal(server.combine(messages, round_index=3, participants=participants), np.full(4, 3.0))


def test_messages_are_frozen_read_only_and_picklable() -> None:
    silos, _ = set_up()
    message = silos[0].protect(np.ones(3), round_index=0, participants=SILO_IDS)
    with pytest.raises(ValueError):
        message.data[0] = 0
    with pytest.raises(AttributeError):
        message.sender = 1  # type: ignore[misc]
    directory = KeyDirectory(public_keys={0: b"a", 1: b"b"})
    for value in (message, directory, KeyAdvertisement(0, b"k"), KeyAgreementDone(0)):
        restored = pickle.loads(pickle.dumps(value))
        assert type(restored) is type(value)
    assert dict(pickle.loads(pickle.dumps(directory)).public_keys) == {0: b"a", 1: b"b"}


def test_plain_sum_protocol() -> None:
    silos = {i: PlainSumSilo(i) for i in SILO_IDS}
    server = PlainSumServer()
    assert server.setup_stages == ()
    participants = (4, 0, 2)
    messages = {
        i: silos[i].protect(np.full(3, i + 0.5), round_index=1, participants=participants) for i in participants
    }
    assert messages[4].sender == 4 and not messages[4].values.flags.writeable
    np.testing.assert_array_equal(server.combine(messages, round_index=1, participants=participants), np.full(3, 7.5))
    with pytest.raises(ProtocolStateError):
        silos[1].protect(np.ones(3), round_index=1, participants=participants)
    with pytest.raises(ProtocolStateError):
        server.relay(SecAggStage.ADVERTISE_KEYS, {})
    with pytest.raises(ProtocolStateError):
        silos[0].setup_reply(SecAggStage.ADVERTISE_KEYS, None)


def test_masking_a_million_entries_for_ten_participants_runs() -> None:
    participants = tuple(range(10))
    silos, server = set_up(participants, codec=FixedPointCodec(max_summands=10))
    vector = np.linspace(-5.0, 5.0, 10**6)
    total = aggregate(silos, server, {i: vector for i in participants}, round_index=0)
    assert np.max(np.abs(total - 10 * vector)) <= 10 * CODEC.precision


def test_protocols_stay_free_of_ray() -> None:
    code = (
        "import sys, protocols.plain, protocols.secure_aggregation, protocols.fixed_point; "
        "assert 'ray' not in sys.modules and 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
