"""The private weighting protocol (protocols/private_weighting/protocol.py), pure: the weighted sum, the set-up stages, what
the server sees, the paper's fixes (precision bound, headroom, users without records).

Keys: fixed 1,024-bit test primes (allowed only through ``insecure_test_key=True``) and seeded test randomness
(``seeded_for_tests``), so every test, statistical ones included, is deterministic.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from privsilo.protocols.base import ProtocolStateError
from privsilo.protocols.crypto_random import seeded_for_tests
from privsilo.protocols.fixed_point import EncodingOverflowError
from privsilo.protocols.paillier import PaillierKeyPair
from privsilo.protocols.private_weighting import PwpConfig, PwpStage, encode_noise
from privsilo.protocols.private_weighting.server import PwpServer
from privsilo.protocols.private_weighting.silo import PwpSilo
from privsilo.protocols.private_weighting.layout import (
    WEIGHT_FRACTIONAL_BITS,
    HeadroomError,
    check_headroom,
    lcm_up_to,
    precision_bound,
)
from privsilo.protocols.private_weighting.messages import MaskedWeights, PackedCiphertexts, UserDeltas
from tests.support.paillier_keys import TEST_P, TEST_Q

CLIP = 0.5
FRACTIONAL_BITS = 20
# 3 silos, 7 users; user 3 has no record anywhere, user 6 lives in one silo only
HISTOGRAM = np.array([[4, 0, 2, 0, 1, 3, 0], [1, 5, 0, 0, 2, 3, 0], [0, 1, 7, 0, 1, 3, 9]])


def config(*, length: int = 23, histogram: np.ndarray = HISTOGRAM, **changes) -> PwpConfig:
    settings = dict(num_users=histogram.shape[1], num_silos=histogram.shape[0], length=length, max_abs_delta=CLIP,
                    fractional_bits=FRACTIONAL_BITS, key_bits=1024, max_records_per_user=30, insecure_test_key=True)
    return PwpConfig(**{**settings, **changes})


def set_up(cfg: PwpConfig, histogram: np.ndarray = HISTOGRAM, *, seed: int = 0, planned_rounds: int = 1):
    """Server, silos and every message the server received during set-up (the engine's relay loop)."""
    key = PaillierKeyPair(TEST_P, TEST_Q, insecure_test_key=True, random=seeded_for_tests(seed))
    server = PwpServer(config=cfg, key=key, random=seeded_for_tests(seed + 1))
    silos = {s: PwpSilo(s, config=cfg, counts=histogram[s], random=seeded_for_tests(seed + 10 + s), planned_rounds=planned_rounds)
             for s in range(len(histogram))}
    received, inbound = [], {}
    for stage in server.setup_stages:
        replies = {s: silo.setup_reply(stage, inbound.get(s)) for s, silo in silos.items()}
        received.extend(replies.values())
        inbound = server.relay(stage, replies)
    return server, silos, received, key


def round_inputs(histogram: np.ndarray, *, length: int, rng: np.random.Generator, sampled: np.ndarray | None = None):
    """Per silo: clipped deltas of its sampled users with records, and a noise share."""
    inputs = {}
    for s in range(len(histogram)):
        users = [u for u in np.flatnonzero(histogram[s]) if sampled is None or sampled[u]]
        deltas = rng.normal(size=(len(users), length))
        deltas *= np.minimum(1.0, CLIP / np.linalg.norm(deltas, axis=1, keepdims=True))
        inputs[s] = UserDeltas(users=users, deltas=deltas, noise=rng.normal(scale=3.0, size=length))
    return inputs


def plain_weighted_sum(histogram: np.ndarray, inputs: dict[int, UserDeltas]) -> np.ndarray:
    """sum_s (sum_u n_{s,u}/N_u Delta_{s,u} + z_s) in float64: plain AVG-w (weights in the clear)."""
    totals = histogram.sum(axis=0)
    return sum((histogram[s, x.users] / totals[x.users]) @ x.deltas + x.noise for s, x in inputs.items())


def run_round(server, silos, inputs, *, round_index: int):
    participants = tuple(sorted(silos))
    messages = {s: silos[s].protect(inputs[s], round_index=round_index, participants=participants) for s in participants}
    return server.combine(messages, round_index=round_index, participants=participants), messages


def bound_for(histogram: np.ndarray, inputs: dict[int, UserDeltas], cfg: PwpConfig, plain: np.ndarray) -> float:
    users = len(set().union(*(set(x.users.tolist()) for x in inputs.values())))
    pairs = sum(len(x.users) for x in inputs.values())
    noise = float(np.max(sum(np.abs(x.noise) for x in inputs.values())))
    stated = precision_bound(users=users, pairs=pairs, num_silos=len(histogram), fractional_bits=cfg.fractional_bits,
                             max_abs_delta=CLIP, noise_abs_sum=noise)
    return stated + 4 * 2.0**-52 * float(np.max(np.abs(plain)))  # the float rounding of both results


@pytest.mark.parametrize("planned_rounds", [1, 1000])  # Horner's rule over every slot; tables of shifted weights
def test_private_weighted_sum_equals_the_plain_one_within_the_stated_bound(planned_rounds: int) -> None:
    """Two rounds, the second with a user sample; 23 values in 10-slot ciphertexts (the last one partial)."""
    cfg = config()
    server, silos, _, _ = set_up(cfg, planned_rounds=planned_rounds)
    assert (silos[0].table_plan.shifts > 1) == (planned_rounds > 1)
    rng = np.random.default_rng(7)
    for round_index, sampled in enumerate([None, np.array([1, 0, 1, 1, 0, 1, 1], dtype=bool)]):
        inputs = round_inputs(HISTOGRAM, length=cfg.length, rng=rng, sampled=sampled)
        private, _ = run_round(server, silos, inputs, round_index=round_index)
        plain = plain_weighted_sum(HISTOGRAM, inputs)
        assert np.max(np.abs(private - plain)) <= bound_for(HISTOGRAM, inputs, cfg, plain)


def test_truncation_errors_add_up_beyond_the_papers_bound_p_but_within_ours() -> None:
    """Theorem 4 of the paper bounds the error by P; every user's truncation error adds up, so a round whose
    deltas all sit just below a grid point misses by about |U| P (here 5.9 P) while our bound holds."""
    cfg = config()
    server, silos, _, _ = set_up(cfg)
    precision = 2.0**-cfg.fractional_bits
    inputs = {}
    for s in silos:
        users = np.flatnonzero(HISTOGRAM[s])
        deltas = np.full((len(users), cfg.length), 40.999 * precision)  # |delta| far below the clip norm
        inputs[s] = UserDeltas(users=users, deltas=deltas, noise=np.zeros(cfg.length))
    private, _ = run_round(server, silos, inputs, round_index=0)
    plain = plain_weighted_sum(HISTOGRAM, inputs)
    error = np.max(np.abs(private - plain))
    assert error > 5 * precision
    assert error <= bound_for(HISTOGRAM, inputs, cfg, plain)


def test_users_without_records_are_excluded_and_counted() -> None:
    """N_u = 0 has no inverse (the paper's code stops with "Modular inverse does not exist"); such users are left
    out, the server counts them, and the others' sum is unaffected."""
    histogram = HISTOGRAM.copy()
    histogram[:, 1] = 0
    cfg = config(histogram=histogram)
    server, silos, _, _ = set_up(cfg, histogram)
    assert server.excluded_users == (1, 3)
    assert all(set(silo.weighted_users) == set(np.flatnonzero(histogram[s])) for s, silo in silos.items())
    inputs = round_inputs(histogram, length=cfg.length, rng=np.random.default_rng(1))
    private, _ = run_round(server, silos, inputs, round_index=0)
    plain = plain_weighted_sum(histogram, inputs)
    assert np.max(np.abs(private - plain)) <= bound_for(histogram, inputs, cfg, plain)


def test_every_stage_transition() -> None:
    """Each side accepts the stages only in order, nothing before set-up, each round once."""
    cfg = config()
    key = PaillierKeyPair(TEST_P, TEST_Q, insecure_test_key=True)
    server = PwpServer(config=cfg, key=key)
    silos = {s: PwpSilo(s, config=cfg, counts=HISTOGRAM[s]) for s in range(3)}
    stages = list(PwpStage)
    assert list(server.setup_stages) == stages
    inputs = round_inputs(HISTOGRAM, length=cfg.length, rng=np.random.default_rng(0))
    with pytest.raises(ProtocolStateError, match="before set-up"):
        silos[0].protect(inputs[0], round_index=0, participants=(0, 1, 2))
    with pytest.raises(ProtocolStateError, match="before set-up"):
        server.combine({}, round_index=0, participants=(0, 1, 2))
    inbound: dict[int, object] = {}
    for position, stage in enumerate(stages):
        for later in stages[position + 1:]:
            with pytest.raises(ProtocolStateError, match="expected"):
                silos[0].setup_reply(later, inbound.get(0))
            with pytest.raises(ProtocolStateError, match="expected"):
                server.relay(later, {})
        replies = {s: silo.setup_reply(stage, inbound.get(s)) for s, silo in silos.items()}
        if position:  # a reply missing from one silo is refused
            with pytest.raises(ProtocolStateError, match="replies from"):
                server.relay(stage, {s: r for s, r in replies.items() if s})
        inbound = server.relay(stage, replies)
    for stage in stages:  # set-up is over
        with pytest.raises(ProtocolStateError, match="expected None"):
            silos[0].setup_reply(stage, None)
    messages = {s: silos[s].protect(inputs[s], round_index=3, participants=(0, 1, 2)) for s in silos}
    with pytest.raises(ProtocolStateError, match="masks cannot be reused"):
        silos[0].protect(inputs[0], round_index=3, participants=(0, 1, 2))
    with pytest.raises(ProtocolStateError, match="below the minimum"):
        silos[1].protect(inputs[1], round_index=4, participants=(1,))
    with pytest.raises(ProtocolStateError, match="no weight here"):
        silos[1].protect(dataclasses.replace(inputs[1], users=inputs[1].users * 0 + 3), round_index=5, participants=(0, 1, 2))
    with pytest.raises(ProtocolStateError, match="missing messages"):
        server.combine({0: messages[0], 1: messages[1]}, round_index=3, participants=(0, 1, 2))
    server.combine(messages, round_index=3, participants=(0, 1, 2))


PUBLIC_FIELDS = {"sender", "round_index", "length"}  # silo ids, round numbers, the model size


def _integers(message: object) -> list[int]:
    """Every integer a message's payload carries (fields, tuples, mapping values), bytes and the public
    addressing fields excluded."""
    if isinstance(message, bool):
        return []
    if isinstance(message, int):
        return [message]
    if dataclasses.is_dataclass(message):
        fields = [f.name for f in dataclasses.fields(message) if f.name not in PUBLIC_FIELDS]
        return [i for name in fields for i in _integers(getattr(message, name))]
    if isinstance(message, (tuple, list)):
        return [i for item in message for i in _integers(item)]
    if hasattr(message, "items"):
        return [i for value in message.values() for i in _integers(value)]
    return []


def test_the_server_sees_no_count_no_total_and_no_delta() -> None:
    """Everything the server receives, and everything it can decrypt from it with its own key, avoids every
    n_{s,u}, N_u, C_LCM n_{s,u} / N_u and encoded delta: counts travel blinded and masked, weights masked by
    128 + bits(C_LCM) random bits, round plaintexts under uniform pairwise masks."""
    cfg = config()
    server, silos, received, key = set_up(cfg)
    inputs = round_inputs(HISTOGRAM, length=cfg.length, rng=np.random.default_rng(3))
    _, messages = run_round(server, silos, inputs, round_index=0)
    received.extend(messages.values())
    totals = HISTOGRAM.sum(axis=0)
    c_lcm = cfg.c_lcm
    secrets = {int(c) for c in HISTOGRAM.ravel()} | {int(t) for t in totals}
    secrets |= {c_lcm * int(n) // int(t) for n, t in zip(HISTOGRAM.ravel(), np.tile(totals, 3)) if t}
    secrets |= {abs(int(e)) for x in inputs.values() for e in cfg.codec.to_integers(x.deltas, toward_zero=True).ravel()}
    ciphertexts = [c for m in received if isinstance(m, (MaskedWeights, PackedCiphertexts)) for c in m.ciphertexts]
    seen = [i for m in received for i in _integers(m)] + [key.decrypt(c) for c in ciphertexts]
    assert len(ciphertexts) == 3 * 6 + 3 * 3  # 6 users with records anywhere; 23 values in 3 ciphertexts per silo
    assert not secrets & {abs(v) for v in seen}
    n = int(key.public.n)
    masked_weights = [key.decrypt(c) for m in received if isinstance(m, MaskedWeights) for c in m.ciphertexts]
    assert min(masked_weights) > 2 ** (c_lcm.bit_length() + 100)  # V + rho, rho of bits(C_LCM) + 128 bits


def test_a_single_silos_message_looks_uniform_to_the_server() -> None:
    """Decrypting one silo's round ciphertexts gives uniform residues modulo n, and the ciphertexts are uniform
    modulo n^2, even for a silo whose deltas and noise are all zero (whose ciphertexts the paper's protocol leaves
    equal to the trivial encryption 1 + m n of their plaintext: Enc(B_inv)^0 times the masks as plaintexts).
    Kolmogorov-Smirnov at alpha = 1e-3: a correct protocol fails with probability 1e-3 per seed (a
    masking-free one with probability ~1); seeded, so this run is deterministic."""
    cfg = config(length=300)  # 30 ciphertexts per silo and round
    server, silos, _, key = set_up(cfg, seed=5)
    n, n_square = int(key.public.n), int(key.public.n_square)
    plaintexts, ciphertexts, trivial = [], [], 0
    rng = np.random.default_rng(5)
    for round_index in range(2):
        inputs = round_inputs(HISTOGRAM, length=cfg.length, rng=rng)
        inputs[0] = UserDeltas(users=inputs[0].users, deltas=np.zeros_like(inputs[0].deltas), noise=np.zeros(cfg.length))
        _, messages = run_round(server, silos, inputs, round_index=round_index)
        for c in messages[0].ciphertexts:
            m = key.decrypt(c)
            plaintexts.append(m / n)
            ciphertexts.append(c / n_square)
            trivial += c == key.public.plaintext_factor(m)
    assert trivial == 0
    assert stats.kstest(plaintexts, "uniform").pvalue > 1e-3
    assert stats.kstest(ciphertexts, "uniform").pvalue > 1e-3


def test_headroom_names_the_setting_to_change() -> None:
    """C_LCM = lcm(1..N_max) has 2,878 bits at N_max = 2,000: with the 128-bit mask it fits 3,072 bits, not 2,048."""
    assert lcm_up_to(2000).bit_length() == 2878
    check_headroom(key_bits=3072, max_records_per_user=2000, fractional_bits=24, num_users=100, num_silos=5)
    with pytest.raises(HeadroomError, match="lower max_records_per_user to at most 1320") as caught:
        check_headroom(key_bits=2048, max_records_per_user=2000, fractional_bits=24, num_users=100, num_silos=5)
    assert caught.value.field == "max_records_per_user" and "paillier_key_bits to 3008" in str(caught.value)
    with pytest.raises(HeadroomError) as caught:
        check_headroom(key_bits=3072, max_records_per_user=100, fractional_bits=40, num_users=2**22, num_silos=5)
    assert caught.value.field == "fractional_bits"
    with pytest.raises(HeadroomError):
        config(max_records_per_user=700)  # 1,009 bits + 130 > 1,024


def test_small_keys_only_for_tests() -> None:
    with pytest.raises(ValueError, match=">= 2048"):
        config(insecure_test_key=False)
    with pytest.raises(ValueError, match=">= 2048"):
        PaillierKeyPair(TEST_P, TEST_Q)


def test_an_out_of_range_encoding_is_refused_by_the_server() -> None:
    """A silo that skipped the range checks cannot make the server accept a slot beyond what honest encodings
    reach."""
    cfg = config()
    server, silos, _, key = set_up(cfg)
    inputs = round_inputs(HISTOGRAM, length=cfg.length, rng=np.random.default_rng(2))
    messages = {s: silos[s].protect(inputs[s], round_index=0, participants=(0, 1, 2)) for s in silos}
    huge = key.public.plaintext_factor(cfg.slot_bound() * 4)  # adds 4x the bound to the first slot
    forged = (int(messages[0].ciphertexts[0] * huge % key.public.n_square),) + messages[0].ciphertexts[1:]
    messages[0] = dataclasses.replace(messages[0], ciphertexts=forged)
    with pytest.raises(EncodingOverflowError):
        server.combine(messages, round_index=0, participants=(0, 1, 2))


def test_deltas_beyond_the_clipping_norm_are_refused() -> None:
    cfg = config()
    _, silos, _, _ = set_up(cfg)
    users = np.flatnonzero(HISTOGRAM[0])
    deltas = np.zeros((len(users), cfg.length))
    deltas[0, 0] = 1.01 * CLIP
    with pytest.raises(ValueError, match="clipping norm"):
        silos[0].protect(UserDeltas(users=users, deltas=deltas, noise=np.zeros(cfg.length)), round_index=0, participants=(0, 1, 2))


def test_weight_conversion_keeps_each_users_weights_summing_to_at_most_one() -> None:
    """The converted weights are floor(w (2^F - |S|)) or one more, so a user's weights sum to at most 2^F:
    a user moves the sum by at most C. Checked on every user with the server's key."""
    cfg = config()
    _, silos, _, key = set_up(cfg)
    totals = HISTOGRAM.sum(axis=0)
    for user in np.flatnonzero(totals):
        weights = [key.decrypt(silos[s]._powers.encrypted_weight(user)) for s in silos if HISTOGRAM[s, user]]
        exact = [HISTOGRAM[s, user] / totals[user] * cfg.weight_scale for s in silos if HISTOGRAM[s, user]]
        assert sum(weights) <= 2**WEIGHT_FRACTIONAL_BITS
        assert all(0 <= w - np.floor(x) <= 1 for w, x in zip(weights, exact))


def test_the_noise_covers_every_digit_below_the_weighted_deltas_grid() -> None:
    """The paper adds Encode(z) C_LCM, a multiple of C_LCM, to a sum of multiples of C_LCM / N_u: the decrypted
    value modulo C_LCM is the un-noised weighted sum's fractional part. Here the noise is encoded on the grid of
    the weighted deltas, 2^-(F+f) (and dithered where a float has fewer bits), so its low 32 bits, which the
    paper's encoding leaves at 0, are uniform."""
    cfg = config()
    noise = np.random.default_rng(4).normal(scale=3.0, size=2000)
    noise[:1000] *= 2.0**30  # |z 2^(F+f)| ~ 2^87: the float's last bit is 2^35, above the grid; the dither fills in
    encoded = encode_noise(noise, codec=cfg.codec, extra_bits=WEIGHT_FRACTIONAL_BITS, random=seeded_for_tests(4))
    scaled = np.ldexp(noise, cfg.grid_bits)
    assert all(abs(e - int(x)) <= max(1.0, np.spacing(abs(x))) for e, x in zip(encoded, scaled))
    low_bits = [e % 2**WEIGHT_FRACTIONAL_BITS / 2**WEIGHT_FRACTIONAL_BITS for e in encoded]
    assert stats.kstest(low_bits[:1000], "uniform").pvalue > 1e-3  # dithered
    assert stats.kstest(low_bits[1000:], "uniform").pvalue > 1e-3  # the float's own low bits


def test_a_user_beyond_n_max_is_caught_at_the_weight_conversion() -> None:
    """Users 2, 5 and 6 have 9 records: with N_max = 8, C_LCM n/N is no integer, the masked weight is a random
    residue far beyond C_LCM + mask, and the server refuses instead of converting garbage (no silo could check,
    it sees only its own counts)."""
    with pytest.raises(ProtocolStateError, match="more than max_records_per_user = 8"):
        set_up(config(max_records_per_user=8))
