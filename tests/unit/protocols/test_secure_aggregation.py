"""Tests of secure aggregation with dropout recovery on the SecAgg+ graph (protocols/secure_aggregation/) and of
plain summation. Pure protocol code: no Ray; each round is driven by the engine's loop from ``privsilo.protocols.base``."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import math
import pickle

import numpy as np
import pytest
from scipy import stats
from Crypto.Cipher import AES

from privsilo.protocols.base import ProtocolStateError, RoundAbandoned
from privsilo.protocols.crypto_random import seeded_for_tests
from privsilo.protocols.fixed_point import EncodingOverflowError, FixedPointCodec
from privsilo.protocols.plain import PlainSumServer, PlainSumSilo
from privsilo.protocols.secure_aggregation import (
    ConfirmedUploaders,
    ConsistencyRequest,
    ConsistencySignature,
    MaskedVector,
    SecAggSetupStage,
    SignedUploaders,
    NeighbourKeys,
    SecAggServer,
    SecAggSilo,
    SecAggStage,
    UnmaskReply,
    UnmaskRequest,
    SERVER_MODELS,
    GraphSettings,
    auto_parameters,
    default_neighbours,
    derive_pairwise_key,
    excess_dropouts,
    excess_warning,
    failure_bounds,
    harary_degree,
    mask_stream,
    parameter_report,
    round_graph,
    round_parameters,
    run_report,
    self_mask_key,
)
from privsilo.protocols.secure_aggregation.graph import connected, harary_positions
from privsilo.protocols.secure_aggregation.parameters import (
    DEFAULT_DROPOUT_RATE,
    _disconnection,
    corrupt_silos,
    dropped_silos,
    hypergeometric_tail,
)
from privsilo.protocols.secure_aggregation.signatures import graph_seed
from privsilo.protocols.secure_aggregation.sharing import PRIME, mask_private_key
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import validate_scenario
from tests.support.scenarios import small_scenario
from tests.support.secagg_rounds import federation, random_vectors, run_round, through_keys

STEPS = ("ADVERTISE_KEYS", "SHARE_KEYS", "COLLECT_SHARES", "protect", "unmask")
"""Where a silo can vanish: before answering that step (and it sends nothing afterwards)."""


def advertised_keys(view: dict[str, dict[int, object]]) -> dict[int, tuple[bytes, bytes]]:
    return {i: (a.mask_public_key, a.channel_public_key) for i, a in view["ADVERTISE_KEYS"].items()}


def first_round_graph(n: int, *, degree: int | None, seed: int = 0, **settings) -> dict[int, tuple[int, ...]]:
    """The graph round 0 of ``federation(n, seed=seed)`` will have without dropouts at ``ADVERTISE_KEYS``: drawn
    from the keys its silos will advertise (their test randomness is deterministic, so twins advertise the same)."""
    twins, twin_server = federation(n, seed=seed, **settings)
    through_keys(twins, twin_server)
    return twin_server._round.graph


def exact_sum(codec: FixedPointCodec, vectors: dict[int, np.ndarray], members) -> np.ndarray:
    """The sum of ``members``' vectors to the codec's precision, as the protocol must return it."""
    return codec.decode(sum(codec.encode(vectors[i]) for i in members), summands=len(members))


def recoverable(server, drops: dict[int, str], participants, view) -> bool:
    """Oracle, independent of the server's code: can every needed seed be recovered given who dropped where?
    Silos that shared are those present at SHARE_KEYS; they mask with each other along the round's graph (drawn
    from the keys advertised, as the server's view shows them)."""
    params = round_parameters(len(participants), neighbours=server.settings.neighbours, threshold=server.settings.threshold)
    graph = round_graph(participants, degree=params.degree, seed=graph_seed(0, advertised_keys(view)), round_index=0)
    gone_by = {step: {i for i, at in drops.items() if STEPS.index(at) <= STEPS.index(step)} for step in STEPS}
    advertised = set(participants) - gone_by["ADVERTISE_KEYS"]
    shared = advertised - gone_by["SHARE_KEYS"]
    uploaded = shared - gone_by["protect"]
    answering = uploaded - gone_by["unmask"]
    t = params.threshold
    for silo in advertised:  # a share set (among the advertisers, then among the sharers) below t: abandoned
        if len({silo, *graph[silo]} & advertised) < t:
            return False
    for silo in shared:
        if len({silo, *graph[silo]} & shared) < t:
            return False
    if len(uploaded) < 2:
        return False
    reached, frontier = set(), [min(uploaded)]
    while frontier:  # uploaders the graph splits into groups: unmasking would show each group's sum
        node = frontier.pop()
        if node not in reached:
            reached.add(node)
            frontier.extend(set(graph[node]) & uploaded)
    if reached != uploaded:
        return False
    for silo in shared:
        holders = ({silo, *graph[silo]} & shared)
        needed = silo in uploaded or bool(holders & uploaded - {silo})
        if needed and len(holders & uploaded) < t:  # the server abandons before asking
            return False
        if needed and len(holders & answering) < t:
            return False
    return True


# --- sums with and without dropouts -------------------------------------------------------------------------------


@pytest.mark.parametrize("neighbours", ["all", 4, "auto"])
@pytest.mark.parametrize("step", [None, *STEPS])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sum_of_the_uploaders_survives_a_dropout_at_any_step(neighbours, step, seed) -> None:
    n = 12
    silos, server = federation(n, neighbours=neighbours, seed=seed)
    rng = np.random.default_rng(seed)
    vectors = random_vectors(n, rng)
    drops = {} if step is None else {int(rng.integers(n)): step}
    result = run_round(silos, server, vectors, round_index=0, drops=drops)
    expected_uploaders = [i for i in range(n) if drops.get(i) not in STEPS[:4]]
    assert result.abandoned is None and list(result.uploaders) == expected_uploaders
    np.testing.assert_array_equal(result.total, exact_sum(server.codec, vectors, expected_uploaders))
    plain = np.sum([vectors[i] for i in expected_uploaders], axis=0)
    assert np.all(np.abs(result.total - plain) <= len(expected_uploaders) * server.codec.precision)


@pytest.mark.parametrize("neighbours", ["all", 6, "auto"])
def test_many_dropouts_give_the_exact_sum_or_an_abandoned_round_never_a_wrong_sum(neighbours) -> None:
    n, outcomes = 16, set()
    for seed in range(12):
        silos, server = federation(n, neighbours=neighbours, seed=seed)
        rng = np.random.default_rng(100 + seed)
        vectors = random_vectors(n, rng, length=8)
        dropped = rng.choice(n, size=int(rng.integers(1, 7)), replace=False)
        drops = {int(i): STEPS[int(rng.integers(len(STEPS)))] for i in dropped}
        result = run_round(silos, server, vectors, round_index=0, drops=drops)
        assert (result.abandoned is None) == recoverable(server, drops, tuple(range(n)), result.view), (seed, drops)
        if result.abandoned is None:
            np.testing.assert_array_equal(result.total, exact_sum(server.codec, vectors, result.uploaders))
        outcomes.add(result.abandoned is None)
    if neighbours == 6:
        assert outcomes == {True, False}  # both branches were exercised


def test_fewer_than_threshold_answers_abandon_the_round() -> None:
    n = 5  # all: threshold 3
    silos, server = federation(n)
    vectors = random_vectors(n, np.random.default_rng(0))
    result = run_round(silos, server, vectors, round_index=0, drops={0: "unmask", 1: "unmask", 2: "unmask"})
    assert result.total is None and "fewer than 3 shares" in str(result.abandoned)
    silos, server = federation(n, threshold=5)
    result = run_round(silos, server, vectors, round_index=0, drops={4: "protect"})
    assert result.total is None and "holders among the uploaders" in str(result.abandoned)
    assert "unmask" not in result.view  # abandoned before a single share was asked for
    silos, server = federation(n, threshold=5)
    result = run_round(silos, server, vectors, round_index=0, drops={4: "SHARE_KEYS"})
    assert "fewer than 5 share holders" in str(result.abandoned)


def test_a_round_too_small_for_the_threshold_is_abandoned_at_begin_round() -> None:
    _, server = federation(5, threshold=4)
    with pytest.raises(RoundAbandoned, match="unsafe for a share set of 3"):
        server.begin_round(round_index=0, participants=(0, 1, 2))
    silos, server = federation(8, neighbours=2, threshold=3)  # share set 3
    vectors = random_vectors(8, np.random.default_rng(1))
    assert run_round(silos, server, vectors, round_index=0).abandoned is None


def test_too_few_uploads_are_abandoned_before_any_share_is_requested() -> None:
    silos, server = federation(4, threshold=2)
    vectors = random_vectors(4, np.random.default_rng(2))
    result = run_round(silos, server, vectors, round_index=0, drops={1: "protect", 2: "protect", 3: "protect"})
    assert "below min_participants 2" in str(result.abandoned) and "unmask" not in result.view


def test_a_silo_that_crashed_joins_the_next_round() -> None:
    n = 10
    for neighbours in ("all", 4):
        silos, server = federation(n, neighbours=neighbours)
        rng = np.random.default_rng(3)
        for round_index, step in enumerate(STEPS):
            vectors = random_vectors(n, rng)
            crashed = run_round(silos, server, vectors, round_index=2 * round_index, drops={3: step})
            assert crashed.abandoned is None
            vectors = random_vectors(n, rng)
            again = run_round(silos, server, vectors, round_index=2 * round_index + 1)
            assert again.uploaders == tuple(range(n))
            np.testing.assert_array_equal(again.total, exact_sum(server.codec, vectors, range(n)))


def test_protocol_objects_pickle_between_rounds_and_carry_on() -> None:
    """The engine snapshots protocol objects between rounds: they hold bytes, no key objects or ciphers."""
    n = 9
    _, server = federation(n, neighbours=4)
    silos = {i: SecAggSilo(i, codec=server.codec, neighbours=4) for i in range(n)}  # the OS CSPRNG, as in a run
    rng = np.random.default_rng(4)
    for round_index in range(3):
        silos, server = pickle.loads(pickle.dumps((silos, server)))
        vectors = random_vectors(n, rng)
        result = run_round(silos, server, vectors, round_index=round_index, drops={round_index: "protect", 8: "unmask"})
        np.testing.assert_array_equal(result.total, exact_sum(server.codec, vectors, result.uploaders))
    assert silos[8]._round.next_step == "unmask"  # uploaded, never asked to unmask: still picklable
    pickle.loads(pickle.dumps(silos[8]))


# --- what the server sees -----------------------------------------------------------------------------------------


def interpolate_at_zero(shares) -> bytes:
    """An independent reconstruction of a Shamir secret: the constant term of ``polynomial_coefficients``."""
    return polynomial_coefficients(shares)[0].to_bytes(16, "big")


def polynomial_coefficients(shares) -> list[int]:
    """Solve the Vandermonde system of the shares for the polynomial's coefficients (lowest first) by Gaussian
    elimination modulo p (not the Lagrange formula ``sharing`` uses)."""
    rows = [[pow(x, k, PRIME) for k in range(len(shares))] + [int.from_bytes(y, "big")] for x, y in shares]
    size = len(rows)
    for col in range(size):
        pivot = next(r for r in range(col, size) if rows[r][col])
        rows[col], rows[pivot] = rows[pivot], rows[col]
        inverse = pow(rows[col][col], -1, PRIME)
        rows[col] = [v * inverse % PRIME for v in rows[col]]
        for r in range(size):
            if r != col and rows[r][col]:
                factor = rows[r][col]
                rows[r] = [(a - factor * b) % PRIME for a, b in zip(rows[r], rows[col])]
    return [row[-1] for row in rows]


def shares_in_view(view) -> tuple[dict[int, list], dict[int, list]]:
    """Every Shamir share the server received: of self-mask seeds and of mask seeds, by owner."""
    self_masks: dict[int, list] = {}
    mask_seeds: dict[int, list] = {}
    for reply in view.get("unmask", {}).values():
        for owner, share in reply.self_mask_shares.items():
            self_masks.setdefault(owner, []).append(share)
        for owner, share in reply.mask_seed_shares.items():
            mask_seeds.setdefault(owner, []).append(share)
    return self_masks, mask_seeds


def attack(view, target: int, *, threshold: int, round_index: int, extra_mask_seed_shares=()) -> np.ndarray:
    """The honest-but-curious server (possibly with shares that colluding silos hand it) strips from the target's
    upload every mask it can compute from what it holds, and returns what is left."""
    self_masks, mask_seeds = shares_in_view(view)
    mask_seeds = {owner: list(shares) for owner, shares in mask_seeds.items()}
    mask_seeds.setdefault(target, []).extend(extra_mask_seed_shares)
    keys = {i: (m.mask_public_key, m.channel_public_key) for i, m in view["ADVERTISE_KEYS"].items()}
    upload = view["protect"][target].data
    residue = upload.copy()
    if len(self_masks.get(target, [])) >= threshold:
        b = interpolate_at_zero(self_masks[target][:threshold])
        residue -= mask_stream(self_mask_key(b, silo_id=target, round_index=round_index), round_index=round_index,
                               length=upload.size)
    private = {
        owner: mask_private_key(interpolate_at_zero(shares[:threshold]), silo_id=owner, round_index=round_index)
        for owner, shares in mask_seeds.items() if len(shares) >= threshold
    }
    for peer in view["SHARE_KEYS"][target].ciphertexts:  # the neighbours the target masked with, if they shared
        if peer not in view["SHARE_KEYS"]:
            continue
        if target in private:
            key = derive_pairwise_key(private_key=private[target], peer_public_key=keys[peer][0], own_id=target, peer_id=peer)
        elif peer in private:
            key = derive_pairwise_key(private_key=private[peer], peer_public_key=keys[target][0], own_id=peer, peer_id=target)
        else:
            continue
        stream = mask_stream(key, round_index=round_index, length=upload.size)
        residue = residue - stream if target < peer else residue + stream
    return residue


@pytest.mark.parametrize("neighbours", ["all", 6])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_servers_whole_view_does_not_reveal_an_update_but_one_more_secret_would(neighbours, seed) -> None:
    n, round_index = 16, 0
    silos, server = federation(n, neighbours=neighbours, seed=seed)
    rng = np.random.default_rng(seed)
    vectors = random_vectors(n, rng, length=256)
    drops = {1: "SHARE_KEYS", 8: "protect", 3: "unmask", 12: "COLLECT_SHARES"}
    result = run_round(silos, server, vectors, round_index=round_index, drops=drops)
    assert result.abandoned is None
    pickle.loads(pickle.dumps(result.view))  # the view is plain, picklable data (what an engine's inbox holds)
    threshold = silos[0]._round.threshold
    self_masks, mask_seeds = shares_in_view(result.view)
    assert not self_masks.keys() & mask_seeds.keys()  # never both kinds of share of one silo
    assert set(mask_seeds) <= {8, 12} and mask_seeds and set(self_masks) == set(result.uploaders)
    for target in (0, 3, 5):  # an uploader that answered, one that vanished after uploading, another
        encoded = server.codec.encode(vectors[target])
        residue = attack(result.view, target, threshold=threshold, round_index=round_index)
        assert np.mean(residue == encoded) < 0.01
        # The same attack with the target's mask seed (from t of its share holders: one extra secret) succeeds.
        holders = [i for i, silo in silos.items() if silo._round is not None and target in silo._round.shares][:threshold]
        stolen = [silos[i]._round.shares[target][0] for i in holders]
        np.testing.assert_array_equal(
            attack(result.view, target, threshold=threshold, round_index=round_index, extra_mask_seed_shares=stolen), encoded
        )
        # A coalition of the server with t - 1 share holders learns nothing more.
        residue = attack(result.view, target, threshold=threshold, round_index=round_index,
                         extra_mask_seed_shares=stolen[:-1])
        assert np.mean(residue == encoded) < 0.01


def test_a_silo_refuses_to_reveal_both_kinds_of_share_of_one_silo() -> None:
    n = 6
    silos, server = federation(n)
    vectors = random_vectors(n, np.random.default_rng(5))
    server.begin_round(round_index=0, participants=tuple(range(n)))
    inbound: dict[int, object] = {}
    for stage in server.round_stages:
        inbound = server.round_relay(stage, {i: s.round_reply(stage, inbound.get(i), round_index=0) for i, s in silos.items()}, round_index=0)
    messages = {i: silos[i].protect(vectors[i], round_index=0, participants=tuple(range(n))) for i in range(5)}
    requests = server.unmask_requests(messages, round_index=0)
    silo = silos[0]
    reply = silo.unmask_reply(requests[0], round_index=0)
    assert set(reply.self_mask_shares) == set(range(5)) and set(reply.mask_seed_shares) == {5}
    assert silo.unmask_reply(requests[0], round_index=0) == reply  # the same answer again reveals nothing new
    claims_5_uploaded = UnmaskRequest(round_index=0, uploaded=tuple(range(6)), uploaders=6)
    with pytest.raises(ProtocolStateError, match=r"refuses to reveal both .* silos \[5\]"):
        silo.unmask_reply(claims_5_uploaded, round_index=0)
    claims_4_dropped = UnmaskRequest(round_index=0, uploaded=(0, 1, 2, 3), uploaders=4)
    with pytest.raises(ProtocolStateError, match=r"refuses to reveal both .* silos \[4\]"):
        silo.unmask_reply(claims_4_dropped, round_index=0)
    with pytest.raises(ProtocolStateError, match="omits itself"):
        silos[1].unmask_reply(UnmaskRequest(round_index=0, uploaded=(0, 2, 3, 4), uploaders=4), round_index=0)
    with pytest.raises(ProtocolStateError, match="below the minimum of 2"):
        silos[1].unmask_reply(UnmaskRequest(round_index=0, uploaded=(1,), uploaders=1), round_index=0)
    with pytest.raises(ProtocolStateError, match="got unmask for round 0, but is in round 0 at protect"):
        silos[5].unmask_reply(requests[0], round_index=0)  # silo 5 never uploaded


def test_keys_and_shares_are_fresh_every_round() -> None:
    n = 6
    silos, server = federation(n, neighbours=2)
    rng = np.random.default_rng(6)
    views = [run_round(silos, server, random_vectors(n, rng), round_index=r, drops={2: "protect"}).view for r in range(2)]
    for i in range(n):
        first, second = (view["ADVERTISE_KEYS"][i] for view in views)
        assert first.mask_public_key != second.mask_public_key and first.channel_public_key != second.channel_public_key
    # silo 2's mask seed recovered in round 0 derives round 0's key only
    _, mask_seeds = shares_in_view(views[0])
    seed = interpolate_at_zero(mask_seeds[2][: silos[0]._round.threshold])
    recovered = mask_private_key(seed, silo_id=2, round_index=0)
    assert recovered.public_key().public_bytes_raw() == views[0]["ADVERTISE_KEYS"][2].mask_public_key
    assert recovered.public_key().public_bytes_raw() != views[1]["ADVERTISE_KEYS"][2].mask_public_key


def test_a_silo_refuses_unsafe_or_mismatched_parameters() -> None:
    silos, server = federation(6, neighbours=2)
    silo = silos[0]
    advertisement = silo.round_reply(SecAggStage.ADVERTISE_KEYS, None, round_index=0)
    own = {0: (advertisement.mask_public_key, advertisement.channel_public_key)}
    others = {i: silos[i].round_reply(SecAggStage.ADVERTISE_KEYS, None, round_index=0) for i in (1, 2)}
    keys = {**own, **{i: (a.mask_public_key, a.channel_public_key) for i, a in others.items()}}
    for threshold, match in [(3, "refuses threshold 3"), (1, "refuses threshold 1")]:
        with pytest.raises(ProtocolStateError, match=match):
            silo.round_reply(SecAggStage.SHARE_KEYS, NeighbourKeys(0, 6, threshold, keys), round_index=0)
    too_many = {**keys, 3: keys[1], 4: keys[2]}
    with pytest.raises(ProtocolStateError, match="share set of 5 silos is unsafe"):
        silo.round_reply(SecAggStage.SHARE_KEYS, NeighbourKeys(0, 6, 2, too_many), round_index=0)
    with pytest.raises(ProtocolStateError, match="own keys"):
        silo.round_reply(SecAggStage.SHARE_KEYS, NeighbourKeys(0, 6, 2, {i: keys[i] for i in (1, 2)}), round_index=0)
    strict = SecAggSilo(0, codec=silo.codec, threshold=3, random=seeded_for_tests(0))
    strict.round_reply(SecAggStage.ADVERTISE_KEYS, None, round_index=0)
    with pytest.raises(ProtocolStateError, match="refuses round 0: threshold 3 is unsafe for a share set of 2"):
        strict.round_reply(SecAggStage.SHARE_KEYS, NeighbourKeys(0, 2, 3, keys), round_index=0)
    with pytest.raises(ValueError, match="threshold must be None or an int >= 2"):
        SecAggSilo(0, codec=silo.codec, threshold=1)
    with pytest.raises(ValueError, match="neighbours must be"):
        SecAggServer(codec=silo.codec, neighbours=0)
    with pytest.raises(ValueError, match="auto' chooses the threshold"):
        SecAggSilo(0, codec=silo.codec, neighbours="auto", threshold=3)
    with pytest.raises(ValueError, match="corrupt_fraction"):
        SecAggServer(codec=silo.codec, corrupt_fraction=1.0)


def test_out_of_order_and_malformed_steps_are_refused() -> None:
    silos, server = federation(4)
    codec = server.codec
    with pytest.raises(ProtocolStateError, match="no setup stages"):
        server.relay(SecAggStage.ADVERTISE_KEYS, {})
    with pytest.raises(ProtocolStateError, match="no setup stages"):
        silos[0].setup_reply(SecAggStage.ADVERTISE_KEYS, None)
    assert server.setup_stages == () and server.round_stages == tuple(SecAggStage)[1:]
    with pytest.raises(ProtocolStateError, match="but is in no round"):
        silos[0].protect(np.zeros(2), round_index=0, participants=(0, 1))
    with pytest.raises(ProtocolStateError, match="but is in no round"):
        server.round_relay(SecAggStage.ADVERTISE_KEYS, {}, round_index=0)
    with pytest.raises(ProtocolStateError, match="below the minimum of 2"):
        server.begin_round(round_index=0, participants=(0,))
    server.begin_round(round_index=1, participants=(0, 1, 2, 3))
    with pytest.raises(ProtocolStateError, match="not after round 1"):
        server.begin_round(round_index=1, participants=(0, 1, 2, 3))
    advertisements = {i: s.round_reply(SecAggStage.ADVERTISE_KEYS, None, round_index=1) for i, s in silos.items()}
    with pytest.raises(ProtocolStateError, match="keys are fresh every round"):
        silos[0].round_reply(SecAggStage.ADVERTISE_KEYS, None, round_index=1)
    with pytest.raises(ProtocolStateError, match="non-participants"):
        server.round_relay(SecAggStage.ADVERTISE_KEYS, {**advertisements, 9: advertisements[2]}, round_index=1)
    with pytest.raises(ProtocolStateError, match="got SHARE_KEYS for round 1, but is in round 1 at ADVERTISE_KEYS"):
        server.round_relay(SecAggStage.SHARE_KEYS, {}, round_index=1)
    keys = server.round_relay(SecAggStage.ADVERTISE_KEYS, advertisements, round_index=1)
    with pytest.raises(ProtocolStateError, match="needs this round's NeighbourKeys"):
        silos[0].round_reply(SecAggStage.SHARE_KEYS, "no keys", round_index=1)
    shares = {i: s.round_reply(SecAggStage.SHARE_KEYS, keys[i], round_index=1) for i, s in silos.items()}
    twin = pickle.loads(pickle.dumps(server))
    twin._round = copy.deepcopy(server._round)  # a silo sending shares for others than its neighbours counts as dropped
    assert 3 not in twin.round_relay(SecAggStage.SHARE_KEYS, {**shares, 3: shares[2]}, round_index=1)
    bundles = server.round_relay(SecAggStage.SHARE_KEYS, shares, round_index=1)
    tampered = type(bundles[0])(round_index=1, ciphertexts={1: bundles[0].ciphertexts[2], 2: bundles[0].ciphertexts[2], 3: bundles[0].ciphertexts[3]})
    with pytest.raises(ProtocolStateError, match="do not authenticate"):
        silos[0].round_reply(SecAggStage.COLLECT_SHARES, tampered, round_index=1)
    assert server.round_relay(SecAggStage.COLLECT_SHARES, {i: s.round_reply(SecAggStage.COLLECT_SHARES, bundles[i], round_index=1) for i, s in silos.items()}, round_index=1) == {}
    with pytest.raises(ProtocolStateError, match="not among the participants"):
        silos[0].protect(np.zeros(2), round_index=1, participants=(1, 2, 3))
    with pytest.raises(ProtocolStateError, match=r"neighbours \[3\] are not among"):
        silos[0].protect(np.zeros(2), round_index=1, participants=(0, 1, 2))
    with pytest.raises(EncodingOverflowError):
        silos[0].protect(np.array([2 * codec.max_abs_value]), round_index=1, participants=(0, 1, 2, 3))
    messages = {i: s.protect(np.ones(2), round_index=1, participants=(0, 1, 2, 3)) for i, s in silos.items()}
    with pytest.raises(ProtocolStateError, match="at unmask"):
        silos[0].protect(np.ones(2), round_index=1, participants=(0, 1, 2, 3))  # masks are never reused
    twin = pickle.loads(pickle.dumps(server))
    twin._round = copy.deepcopy(server._round)  # another silo's vector counts as its sender's dropout
    assert 3 not in twin.unmask_requests({**messages, 3: messages[2]}, round_index=1)
    assert "silo 3 sent MaskedVector, not its own MaskedVector for this round" in twin.left_out[3]
    twin = pickle.loads(pickle.dumps(server))
    twin._round = copy.deepcopy(server._round)  # so does a vector of the wrong length
    assert 3 not in twin.unmask_requests({**messages, 3: MaskedVector(3, 1, np.zeros(3, dtype=np.uint64))}, round_index=1)
    assert "silo 3 uploaded 3 words where the others uploaded 2" in twin.left_out[3]
    requests = server.unmask_requests(messages, round_index=1)
    replies = {i: s.unmask_reply(requests[i], round_index=1) for i, s in silos.items()}
    twin = pickle.loads(pickle.dumps(server))
    twin._round = copy.deepcopy(server._round)  # a reply that answers another request counts as no answer
    np.testing.assert_array_equal(
        twin.combine(messages, round_index=1, participants=(0, 1, 2, 3), unmasking={**replies, 3: replies[2]}), np.full(2, 4.0))
    with pytest.raises(ProtocolStateError, match="but the requests went to"):
        server.combine(messages, round_index=1, participants=(0, 1, 2), unmasking=replies)
    np.testing.assert_array_equal(server.combine(messages, round_index=1, participants=(0, 1, 2, 3), unmasking=replies), np.full(2, 4.0))


def test_the_server_detects_an_unchecked_encoding_that_wrapped_the_sum() -> None:
    """A silo that skips the range check (here: a codec without headroom margin): its masked upload looks like
    any other, but the decoded sum falls outside the range of n in-range encodings, and the server refuses it."""
    silos, server = federation(3)
    codec = server.codec
    rogue_codec = FixedPointCodec(fractional_bits=codec.fractional_bits, max_summands=codec.max_summands, margin_bits=0)
    silos[1] = SecAggSilo(1, codec=rogue_codec, random=seeded_for_tests(1))
    vectors = {0: np.array([codec.max_abs_value]), 1: np.array([2**codec.margin_bits * codec.max_abs_value]), 2: np.zeros(1)}
    result = run_round(silos, server, vectors, round_index=0)  # a protocol fault: never blamed on fractional_bits
    assert "decoded sum of 3 encoding" in str(result.abandoned) and "fractional_bits is not the cause" in str(result.abandoned)


def test_masked_vectors_differ_from_encodings_and_look_uniform() -> None:
    """Chi-square test on the top byte of every masked word of a highly structured input (top byte 0x00 or 0xFF);
    each of the 5 tests rejects a truly uniform byte with probability 1e-7 (seeded, so reproducible)."""
    n, length = 5, 2**16
    silos, server = federation(n, neighbours=2)
    vector = np.linspace(-1.0, 1.0, length)
    encoded = server.codec.encode(vector)
    view = run_round(silos, server, {i: vector for i in range(n)}, round_index=0).view
    threshold = stats.chi2.isf(1e-7, df=255)
    for message in view["protect"].values():
        assert message.data.dtype == np.uint64 and not message.data.flags.writeable
        assert not np.any(message.data == encoded)
        counts = np.bincount((message.data >> np.uint64(56)).astype(np.intp), minlength=256)
        assert np.sum((counts - length / 256) ** 2 / (length / 256)) < threshold


def test_mask_stream_is_the_aes256_ctr_keystream() -> None:
    # Against an independent AES (pycryptodome's, block by block): word pair i is AES_k(round (12 bytes) || i (4 bytes)).
    key, round_index, blocks = bytes(range(32)), 2**90 + 5, 40
    expected = AES.new(key, AES.MODE_ECB).encrypt(
        b"".join(round_index.to_bytes(12, "big") + i.to_bytes(4, "big") for i in range(blocks)))
    stream = mask_stream(key, round_index=round_index, length=2 * blocks)
    assert stream.astype("<u8").tobytes() == expected
    assert not np.any(mask_stream(b"k" * 32, round_index=7, length=64) == mask_stream(b"k" * 32, round_index=8, length=64))


def test_pairwise_keys_agree_and_differ_between_pairs() -> None:
    private = {i: mask_private_key(bytes([i]) * 16, silo_id=i, round_index=0) for i in range(4)}
    public = {i: key.public_key().public_bytes_raw() for i, key in private.items()}
    keys = {(i, j): derive_pairwise_key(private_key=private[i], peer_public_key=public[j], own_id=i, peer_id=j)
            for i, j in itertools.permutations(range(4), 2)}
    assert all(keys[i, j] == keys[j, i] and len(keys[i, j]) == 32 for i, j in keys)
    assert len(set(keys.values())) == 6


# --- the graph and its parameters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k"), [(10, 4), (11, 3), (12, 3), (30, 7), (101, 10), (8, 7), (5, 1), (6, 1)])
def test_the_graph_is_regular_symmetric_reproducible_and_new_every_round(n, k) -> None:
    participants = tuple(range(0, 3 * n, 3))
    graph = round_graph(participants, degree=k, seed=11, round_index=4)
    degree = harary_degree(n, k)
    assert degree in (k, k + 1) and (n * degree) % 2 == 0
    assert set(graph) == set(participants)
    for silo, peers in graph.items():
        assert len(peers) == len(set(peers)) == degree and silo not in peers
        assert all(silo in graph[peer] for peer in peers)
    assert graph == round_graph(participants, degree=k, seed=11, round_index=4)
    if degree < n - 1:
        assert graph != round_graph(participants, degree=k, seed=11, round_index=5)
        assert graph != round_graph(participants, degree=k, seed=12, round_index=4)


def test_removing_silos_disconnects_a_harary_graph_only_with_two_long_gaps() -> None:
    """The premise of the connectivity bound, checked by breadth-first search on random removals."""
    rng = np.random.default_rng(8)
    for _ in range(400):
        n, degree = int(rng.integers(6, 30)), int(rng.integers(2, 6)) * 2
        if degree >= n - 1:
            continue
        removed = set(rng.choice(n, size=int(rng.integers(0, n - 1)), replace=False).tolist())
        kept = [p for p in range(n) if p not in removed]
        seen, frontier = {kept[0]}, [kept[0]]
        while frontier:
            node = frontier.pop()
            for peer in harary_positions(node, n=n, degree=degree):
                if peer not in removed and peer not in seen:
                    seen.add(peer)
                    frontier.append(peer)
        half = degree // 2
        gaps = [(kept[(i + 1) % len(kept)] - kept[i] - 1) % n for i in range(len(kept))] if len(kept) > 1 else [0]
        assert (len(seen) < len(kept)) == (sum(gap >= half for gap in gaps) >= 2)


def security_and_correctness_events(n, degree, threshold, corrupt, dropped, order) -> tuple[bool, bool]:
    """Given positions ``order`` (silo at each position), the corrupt silos ``range(corrupt)`` and the dropped
    ``range(corrupt, corrupt + dropped)``: does security fail, does correctness fail (module docstring events)?"""
    position = {silo: p for p, silo in enumerate(order)}
    neighbours = {s: {order[q] for q in harary_positions(position[s], n=n, degree=degree)} for s in range(n)}
    bad = set(range(corrupt))
    gone = set(range(corrupt, corrupt + dropped))
    if any(len(neighbours[s] & bad) >= threshold for s in range(n) if s not in bad):
        return True, any(len(neighbours[s] - gone) < threshold for s in range(n))
    honest = [s for s in range(n) if s not in bad | gone]
    seen, frontier = {honest[0]}, [honest[0]]
    while frontier:
        for peer in neighbours[frontier.pop()] - bad - gone - seen:
            seen.add(peer)
            frontier.append(peer)
    return len(seen) < len(honest), any(len(neighbours[s] - gone) < threshold for s in range(n))


def test_failure_bounds_hold_exactly_on_every_relabelling_of_a_small_graph() -> None:
    n, corrupt_fraction, dropout_rate = 8, 0.25, 0.125  # 2 corrupt, 1 dropped
    for degree, threshold in [(2, 2), (4, 2), (4, 3)]:
        bounds = failure_bounds(n, degree=degree, threshold=threshold, corrupt_fraction=corrupt_fraction, dropout_rate=dropout_rate)
        events = [security_and_correctness_events(n, degree, threshold, 2, 1, order) for order in itertools.permutations(range(n))]
        security = sum(s for s, _ in events) / len(events)
        correctness = sum(c for _, c in events) / len(events)
        assert security <= bounds.security and correctness <= bounds.correctness, (degree, threshold)
        assert security > 0 or bounds.security < 1  # the bound is not vacuous where the event can happen


def test_failure_bounds_against_monte_carlo_on_forty_silos() -> None:
    n, rng = 40, np.random.default_rng(9)
    fractions = {"corrupt_fraction": 0.2, "dropout_rate": 0.1}  # 8 corrupt, 4 dropped
    for degree, threshold in [(6, 3), (8, 4), (10, 4)]:
        bounds = failure_bounds(n, degree=degree, threshold=threshold, **fractions)
        trials = 3000
        events = [security_and_correctness_events(n, degree, threshold, 8, 4, rng.permutation(n).tolist()) for _ in range(trials)]
        for observed, bound in zip(np.mean(events, axis=0), (bounds.security, bounds.correctness)):
            assert observed <= bound + 3 * math.sqrt(bound * (1 - bound) / trials) + 1e-9, (degree, threshold, observed, bound)


def test_auto_picks_the_smallest_safe_degree_and_threshold() -> None:
    for n in (10, 30, 100, 1000):
        chosen, bounds = auto_parameters(n)
        assert bounds.security <= 2.0**-40 and bounds.correctness <= 2.0**-20
        if chosen.degree is None:
            continue
        assert chosen.share_set == chosen.degree + 1 and 2 <= chosen.threshold <= chosen.share_set
        smaller_t = failure_bounds(n, degree=chosen.degree, threshold=chosen.threshold - 1, corrupt_fraction=0.05, dropout_rate=0.05)
        assert chosen.threshold == 2 or smaller_t.security > 2.0**-40
        for degree in range(2, chosen.degree):
            if (n * degree) % 2 == 0:
                assert all(
                    (b := failure_bounds(n, degree=degree, threshold=t, corrupt_fraction=0.05, dropout_rate=0.05)).security > 2.0**-40
                    or b.correctness > 2.0**-20 for t in range(2, degree + 2)
                )
    assert auto_parameters(1000)[0].degree < 60  # sparse: costs grow with n * K
    assert auto_parameters(5)[0].degree is None  # small rounds use the complete graph
    with pytest.raises(ValueError, match="no safe threshold"):
        auto_parameters(4, corrupt_fraction=0.5, dropout_rate=0.5)


def test_the_parameter_report_for_summary_json() -> None:
    report = parameter_report(100, neighbours="auto", threshold=None, corrupt_fraction=0.05, dropout_rate=0.05)
    assert set(report) == {"round_size", "neighbours", "threshold", "security_failure_probability",
                           "correctness_failure_probability"}
    assert report["neighbours"] == auto_parameters(100)[0].degree and report["threshold"] == auto_parameters(100)[0].threshold
    assert parameter_report(10, neighbours="all", threshold=None, corrupt_fraction=0.0, dropout_rate=0.0) == {
        "round_size": 10, "neighbours": "all", "threshold": 6,
        "security_failure_probability": 0.0, "correctness_failure_probability": 0.0,
    }
    settings = GraphSettings("auto", None, 0.05, 0.05, 100, "honest_but_curious")
    summary = run_report(settings, [(0, 10, 0), (1, 10, 2), (2, 0, 0), (3, 12, 0)])
    assert [row["round_size"] for row in summary["by_round_size"]] == [10, 12]
    assert [row["rounds"] for row in summary["by_round_size"]] == [2, 1]
    assert summary["dropouts_beyond_assumption"] == [{"round": 1, "participants": 10, "dropped": 2, "assumed_at_most": 1}]
    assert "no protection against a server that lies" in summary["assumes"]
    lying = run_report(dataclasses.replace(settings, server="may_lie"), [(0, 100, 0)])
    assert "authentic registry" in lying["assumes"] and "sampled independently of who is corrupt" in lying["assumes"]
    assert "1 round(s) lost more silos" in excess_warning(summary["dropouts_beyond_assumption"], dropout_rate=0.05)
    assert round_parameters(9, neighbours=3, threshold=None).degree == 4  # odd K with odd n: K + 1
    assert round_parameters(9, neighbours=8, threshold=None).degree is None


def test_unset_neighbours_take_auto_where_it_is_safe_and_summary_json_says_why() -> None:
    """The default graph: auto (never wider share sets than all) wherever it has safe parameters for the
    federation, else all; the choice and its reason go to summary.json."""
    chosen, why = default_neighbours(1000, threshold=None)
    parameters = auto_parameters(1000, federation=1000)[0]
    assert chosen == "auto" and f"K = {parameters.degree}, threshold {parameters.threshold}" in why and "1000 silos" in why
    assert default_neighbours(1000, threshold=None, server="may_lie")[0] == "auto"
    assert default_neighbours(5, threshold=None)[0] == "auto"  # auto's complete graph, its own threshold
    assert default_neighbours(20, threshold=7) == ("all", "protocol.threshold = 7 is set, which only the complete graph or a fixed K takes")
    assert default_neighbours(2, threshold=None)[0] == "all" and "no safe parameters" in default_neighbours(2, threshold=None)[1]
    settings = GraphSettings(None, None, 0.05, 0.05, 1000, "honest_but_curious")
    assert settings.for_round(1000) == parameters and settings.for_round(300) == auto_parameters(300, federation=1000)[0]
    assert run_report(settings, [(0, 1000, 0)])["graph"] == {"setting": "default", "chosen": "auto", "why": why}
    assert run_report(GraphSettings("all", None, 0.05, 0.05, 10, "honest_but_curious"), [(0, 10, 0)])["graph"] == {"setting": "all"}
    assert GraphSettings(None, 3, 0.05, 0.05, 5, "honest_but_curious").for_round(5) == round_parameters(5, neighbours="all", threshold=3)
    resolved = validate_scenario(small_scenario(data={"silos": 5}, protocol={"secure_aggregation": True}))
    assert resolved.protocol.neighbours is None


@pytest.mark.parametrize(
    ("protocol", "field", "allowed"),
    [
        ({"threshold": 1}, "protocol.threshold", "must be in [2, 5]"),
        ({"threshold": 6}, "protocol.threshold", "at most the 5 silos that share (data.silos)"),
        ({"neighbours": 2, "threshold": 4}, "protocol.threshold", "at most the 3 silos that share (neighbours + 1)"),
        ({"neighbours": "auto", "threshold": 3}, "protocol.threshold", "must be null with neighbours: auto"),
        ({"neighbours": 0}, "protocol.neighbours", "a number in [1, data.silos - 1 = 4]"),
        ({"neighbours": 5}, "protocol.neighbours", "a number in [1, data.silos - 1 = 4]"),
        ({"neighbours": "some"}, "protocol.neighbours", "must be 'all', 'auto' or a whole number"),
        ({"corrupt_fraction": 1.0}, "protocol.corrupt_fraction", "must be in [0, 1)"),
        ({"corrupt_fraction": -0.1}, "protocol.corrupt_fraction", "must be in [0, 1)"),
        ({"dropout_rate": 1.5}, "protocol.dropout_rate", "must be in [0, 1)"),
        ({"server": "may_lie", "threshold": 2}, "protocol.threshold", "must exceed half the 5 silos that share"),
        ({"server": "may_lie", "neighbours": 3, "threshold": 2}, "protocol.threshold", "must exceed half the 4 silos"),
        ({"server": "malicious"}, "protocol.server", "may_lie"),
    ],
)
def test_bad_protocol_settings_name_their_field(protocol, field, allowed) -> None:
    scenario = small_scenario(data={"silos": 5}, protocol={"secure_aggregation": True, **protocol})
    with pytest.raises(ScenarioError) as info:
        validate_scenario(scenario)
    assert info.value.field == field and allowed in str(info.value), str(info.value)


def test_good_protocol_settings_are_accepted() -> None:
    for protocol in ({"neighbours": "auto"}, {"neighbours": 2, "threshold": 3}, {"threshold": 5}, {"corrupt_fraction": 0.0}):
        resolved = validate_scenario(small_scenario(data={"silos": 5}, protocol={"secure_aggregation": True, **protocol}))
        assert all(getattr(resolved.protocol, name) == value for name, value in protocol.items())


# --- plain summation and layering ---------------------------------------------------------------------------------


def test_plain_sum_protocol() -> None:
    silos = {i: PlainSumSilo(i) for i in range(5)}
    server = PlainSumServer()
    assert server.setup_stages == ()
    participants = (4, 0, 2)
    messages = {i: silos[i].protect(np.full(3, i + 0.5), round_index=1, participants=participants) for i in participants}
    assert messages[4].sender == 4 and not messages[4].values.flags.writeable
    np.testing.assert_array_equal(server.combine(messages, round_index=1, participants=participants), np.full(3, 7.5))
    with pytest.raises(ProtocolStateError):
        silos[1].protect(np.ones(3), round_index=1, participants=participants)
    with pytest.raises(ProtocolStateError):
        server.relay(SecAggStage.ADVERTISE_KEYS, {})
    with pytest.raises(ProtocolStateError):
        silos[0].setup_reply(SecAggStage.ADVERTISE_KEYS, None)


def test_messages_pickle_with_their_read_only_mappings() -> None:
    reply = UnmaskReply(sender=1, round_index=2, self_mask_shares={1: (1, b"x" * 16)}, mask_seed_shares={})
    restored = pickle.loads(pickle.dumps(reply))
    assert restored == reply
    with pytest.raises(TypeError):
        restored.self_mask_shares[3] = (1, b"y")  # type: ignore[index]


def test_with_k_neighbours_every_message_grows_with_k_not_n() -> None:
    """SecAgg+'s cost: a silo handles only its neighbours' keys and shares, the server relays per-silo bundles."""
    n, k = 40, 4
    silos, server = federation(n, neighbours=k)
    server.begin_round(round_index=0, participants=tuple(range(n)))
    inbound: dict[int, object] = {}
    relayed = []
    for stage in server.round_stages:
        replies = {i: s.round_reply(stage, inbound.get(i), round_index=0) for i, s in silos.items()}
        inbound = dict(server.round_relay(stage, replies, round_index=0))
        relayed += [*replies.values(), *inbound.values()]
    sizes = [len(getattr(message, "keys", getattr(message, "ciphertexts", {}))) for message in relayed if message is not None]
    assert max(sizes) == k + 1  # NeighbourKeys: the silo and its K neighbours; ciphertexts: K
    messages = {i: s.protect(np.ones(3), round_index=0, participants=tuple(range(n))) for i, s in silos.items()}
    requests = server.unmask_requests(messages, round_index=0)
    replies = {i: silos[i].unmask_reply(requests[i], round_index=0) for i in requests}
    assert all(len(r.self_mask_shares) + len(r.mask_seed_shares) == k + 1 for r in replies.values())
    np.testing.assert_array_equal(server.combine(messages, round_index=0, participants=tuple(range(n)), unmasking=replies), np.full(3, 40.0))


def test_uploaders_the_graph_does_not_connect_are_not_unmasked() -> None:
    """With 2 neighbours (a ring) over 6 silos, two silos opposite each other dropping before their uploads split
    the uploaders into two groups: unmasking would give the server each group's sum, so the round is abandoned
    before any share is asked for (Bell et al. Sec. 3)."""
    silos, server = federation(6, neighbours=2, threshold=2)
    vectors = random_vectors(6, np.random.default_rng(0))
    graph = first_round_graph(6, degree=2, neighbours=2, threshold=2)
    first = 0
    opposite = next(s for s in range(6) if s not in graph[first] and s != first and not set(graph[s]) & set(graph[first]))
    result = run_round(silos, server, vectors, round_index=0, drops={first: "protect", opposite: "protect"})
    assert result.total is None and "does not connect" in str(result.abandoned)
    assert "unmask" not in result.view



def test_recovery_equals_an_independent_reconstruction_for_any_share_indices() -> None:
    """``sharing.recover`` (Lagrange coefficients cached per set of share indices, in the field of 2^130 - 5) gives
    the secret that Gaussian elimination on the shares gives, for random secrets, thresholds and subsets of
    shares, in any order; duplicate indices and shares of no 16-byte secret are refused."""
    from privsilo.protocols.secure_aggregation.sharing import recover, split

    rng = np.random.default_rng(4)
    random = seeded_for_tests(4)
    for _ in range(300):
        holders = sorted(rng.choice(100, size=int(rng.integers(2, 40)), replace=False).tolist())
        threshold = int(rng.integers(1, len(holders) + 1))
        secret = rng.bytes(16)
        shares = list(split(secret, threshold=threshold, holders=holders, random=random).values())
        subset = [shares[i] for i in rng.permutation(len(shares))[:threshold]]
        assert recover(subset, threshold=threshold) == interpolate_at_zero(subset) == secret
        assert all(len(value) == 17 and int.from_bytes(value, "big") < PRIME for _, value in shares)
    shares = list(split(bytes(16), threshold=2, holders=[1, 2], random=random).values())
    with pytest.raises(ValueError, match="distinct"):
        recover([shares[0], shares[0]], threshold=2)
    with pytest.raises(ValueError, match="one 16-byte secret"):  # the line through (1, 0) and (2, 1) has f(0) = p - 1
        recover([(1, bytes(17)), (2, (1).to_bytes(17, "big"))], threshold=2)


def test_the_surplus_share_check_equals_an_independent_evaluation() -> None:
    """``sharing.consistent`` (Lagrange coefficients at each surplus index cached per set of base indices) flags
    exactly the surplus shares off the polynomial that Gaussian elimination finds through the first ``t`` shares,
    for random thresholds, share orders and a one-unit corruption of any share."""
    from privsilo.protocols.secure_aggregation.sharing import consistent, split

    def on_polynomial(base, share) -> bool:
        x, y = share
        return sum(c * pow(x, k, PRIME) for k, c in enumerate(polynomial_coefficients(base))) % PRIME == int.from_bytes(y, "big")

    rng = np.random.default_rng(7)
    random = seeded_for_tests(7)
    for _ in range(150):
        holders = list(range(int(rng.integers(3, 20))))
        threshold = int(rng.integers(1, len(holders)))
        shares = list(split(rng.bytes(16), threshold=threshold, holders=holders, random=random).values())
        shares = [shares[i] for i in rng.permutation(len(shares))]
        if rng.random() < 0.7:  # corrupt one share (base or surplus) by one unit
            k = int(rng.integers(len(shares)))
            shares[k] = (shares[k][0], ((int.from_bytes(shares[k][1], "big") + 1) % PRIME).to_bytes(17, "big"))
        base = shares[:threshold]
        expected = [True] * threshold + [on_polynomial(base, share) for share in shares[threshold:]]
        assert consistent(shares, threshold=threshold) == expected


# --- rounds sampled from a federation -----------------------------------------------------------------------------


def test_the_hypergeometric_tail_is_exact() -> None:
    """Against scipy's hypergeometric law, and against counting every subset of a small population."""
    for population, marked, draws in [(99, 5, 4), (999, 50, 29), (40, 8, 10), (12, 3, 11)]:
        for at_least in range(0, min(marked, draws) + 2):
            assert hypergeometric_tail(population, marked, draws, at_least) == pytest.approx(
                stats.hypergeom.sf(at_least - 1, population, marked, draws), rel=1e-9, abs=1e-300)
    population, marked, draws = 10, 3, 4
    subsets = list(itertools.combinations(range(population), draws))
    for at_least in range(5):
        counted = sum(len(set(subset) & set(range(marked))) >= at_least for subset in subsets) / len(subsets)
        assert hypergeometric_tail(population, marked, draws, at_least) == pytest.approx(counted)


def sampled_round_failures(*, silos: int, corrupt: frozenset[int], client_rate: float, neighbours: int, threshold,
                           server: str, rounds: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """Monte Carlo of the security event of ``parameters.py`` over rounds sampled from a federation with a fixed
    coalition: (observed failure rate, mean reported bound, mean bound of a round-sized federation)."""
    failures, bounds, naive = 0, [], []
    for _ in range(rounds):
        participants = tuple(int(i) for i in np.flatnonzero(rng.random(silos) < client_rate))
        n = len(participants)
        if n < 4:
            continue
        chosen = round_parameters(n, neighbours=neighbours, threshold=threshold(n) if callable(threshold) else threshold,
                                  server=server)
        graph = round_graph(participants, degree=chosen.degree, seed=int(rng.integers(2**62)), round_index=0)
        exposed_at = chosen.threshold if server == "honest_but_curious" else 2 * chosen.threshold - chosen.share_set
        honest = frozenset(participants) - corrupt
        exposed = any(len(set(graph[v]) & corrupt) >= exposed_at for v in honest)
        failures += exposed or not connected(honest, graph)
        settings = dict(degree=chosen.degree, threshold=chosen.threshold, corrupt_fraction=len(corrupt) / silos,
                        dropout_rate=0.0, server=server)
        bounds.append(failure_bounds(n, federation=silos, **settings).security)
        naive.append(failure_bounds(n, **settings).security)
    return failures / len(bounds), float(np.mean(bounds)), float(np.mean(naive))


@pytest.mark.parametrize(("client_rate", "neighbours", "threshold", "server"), [
    (0.1, 4, 2, "honest_but_curious"),     # the review's setting: rounds of about 10, K = 4, t = 2
    (0.3, 6, 3, "honest_but_curious"),
    (0.1, 4, 3, "may_lie"),                # 2t - s = 1: one corrupt neighbour exposes a silo
    (0.3, 8, lambda n: 6 if n > 12 else n // 2 + 1, "may_lie"),  # 2t - s = 3
])
def test_sampled_rounds_with_a_fixed_coalition_fail_less_often_than_reported(client_rate, neighbours, threshold, server) -> None:
    """100 silos, 5 of them colluding (the same every round), Poisson-sampled rounds: the measured rate of rounds
    in which some honest silo is exposed or the honest silos are disconnected stays below the mean reported
    bound, which counts the coalition against the federation; counted against the round (ceil(gamma * n)) it
    would not hold."""
    rng = np.random.default_rng(30)
    observed, bound, naive = sampled_round_failures(
        silos=100, corrupt=frozenset(range(0, 100, 20)), client_rate=client_rate, neighbours=neighbours,
        threshold=threshold, server=server, rounds=1500, rng=rng)
    assert 0 < observed <= bound + 3 * math.sqrt(bound * (1 - bound) / 1500), (observed, bound)
    if server == "honest_but_curious":
        assert naive < observed  # the old bound, per round size, was broken by sampling


@pytest.mark.parametrize(("dropout_rate", "server", "degree", "threshold"), [
    (0.05, "honest_but_curious", 29, 17), (0.02, "honest_but_curious", 24, 16), (0.01, "honest_but_curious", 21, 15),
    (0.05, "may_lie", 78, 52), (0.02, "may_lie", 42, 32), (0.01, "may_lie", 33, 26),
])
def test_the_documented_parameters_at_a_thousand_silos(dropout_rate, server, degree, threshold) -> None:
    # docs/protocols/secure-aggregation.md: how protocol.dropout_rate sets K at 1,000 silos. A server that places
    # its d dropouts needs two windows of L = K/2 positions to hold 2L - d corrupt silos, so K must exceed d.
    chosen, bounds = auto_parameters(1000, dropout_rate=dropout_rate, server=server)
    assert (chosen.degree, chosen.threshold) == (degree, threshold)
    assert bounds.security <= 2.0**-40 and bounds.correctness <= 2.0**-20
    if server == "may_lie":
        assert 2 * chosen.threshold > chosen.share_set and 2 * (chosen.degree // 2) > dropped_silos(1000, dropout_rate)


def test_auto_under_sampling_counts_the_coalition_against_the_federation() -> None:
    """A round of 10 out of 100 silos with 5 corrupt may hold all 5: auto needs t > 5 (complete graph), where a
    federation of 10 would allow far less; summary.json reports each size's parameters and bounds."""
    chosen, bounds = auto_parameters(10, federation=100)
    assert chosen.degree is None and chosen.threshold == 6 and bounds.security == 0.0
    assert auto_parameters(10)[0].threshold < 6
    for n in (30, 100, 400):
        for server in SERVER_MODELS:
            chosen, bounds = auto_parameters(n, federation=1000, server=server)
            assert bounds.security <= 2.0**-40 and bounds.correctness <= 2.0**-20
            exact = failure_bounds(n, degree=chosen.degree, threshold=chosen.threshold, corrupt_fraction=0.05,
                                   dropout_rate=0.05, federation=1000, server=server)
            assert exact == bounds
            if server == "may_lie":
                assert 2 * chosen.threshold > chosen.share_set
    with pytest.raises(ValueError, match="no safe threshold for a round of 6 participants out of 100"):
        auto_parameters(6, federation=100)
    report = parameter_report(10, neighbours="auto", threshold=None, corrupt_fraction=0.05, dropout_rate=0.05, federation=100)
    assert report == {"round_size": 10, "neighbours": "all", "threshold": 6, "security_failure_probability": 0.0,
                      "correctness_failure_probability": bounds_at(10, None, 6, federation=100).correctness}
    assert "unsafe" in parameter_report(6, neighbours="auto", threshold=None, corrupt_fraction=0.05, dropout_rate=0.05, federation=100)


def bounds_at(n, degree, threshold, **settings):
    return failure_bounds(n, degree=degree, threshold=threshold, corrupt_fraction=0.05, dropout_rate=0.05, **settings)


def test_rounds_that_lose_more_silos_than_assumed_are_named() -> None:
    rounds = [(0, 10, 1), (1, 10, 2), (2, 100, 5), (3, 100, 6)]
    assert excess_dropouts(rounds, dropout_rate=0.05) == [
        {"round": 1, "participants": 10, "dropped": 2, "assumed_at_most": 1},
        {"round": 3, "participants": 100, "dropped": 6, "assumed_at_most": 5},
    ]


# --- a server that lies -------------------------------------------------------------------------------------------


def through_uploads(silos, server, vectors, round_index: int = 0):
    """Every stage up to the uploads, honestly; returns the view so far."""
    participants = tuple(sorted(silos))
    server.begin_round(round_index=round_index, participants=participants)
    inbound: dict[int, object] = {}
    view: dict[str, dict[int, object]] = {}
    for stage in server.round_stages:
        view[stage.name] = {i: s.round_reply(stage, inbound.get(i), round_index=round_index) for i, s in silos.items()}
        inbound = server.round_relay(stage, view[stage.name], round_index=round_index)
    view["protect"] = {i: s.protect(vectors[i], round_index=round_index, participants=participants) for i, s in silos.items()}
    return view


def split_views(silos, view, *, victim: int, told_it_dropped: frozenset[int], may_lie: bool) -> dict[int, object]:
    """The lying server's unmasking: the silos in ``told_it_dropped`` hear that ``victim`` did not upload, the
    others that everybody did; under ``may_lie`` every signature of the consistency round goes to every silo.
    Returns the replies of the silos that agree to unmask."""
    everybody = tuple(sorted(view["protect"]))
    story = {i: tuple(j for j in everybody if j != victim) if i in told_it_dropped else everybody for i in silos}
    replies: dict[int, object] = {}
    if not may_lie:
        for i, silo in silos.items():
            uploaded = tuple(j for j in story[i] if j in silo._round.shares)
            with contextlib.suppress(ProtocolStateError):
                replies[i] = silo.unmask_reply(UnmaskRequest(0, uploaded, len(story[i])), round_index=0)
        return replies
    signatures = {i: silo.unmask_reply(ConsistencyRequest(0, story[i]), round_index=0).signature for i, silo in silos.items()}
    confirmations = {}
    for i, silo in silos.items():
        with contextlib.suppress(ProtocolStateError):
            confirmations[i] = silo.unmask_reply(SignedUploaders(0, signatures), round_index=0).signature
    for i, silo in silos.items():
        with contextlib.suppress(ProtocolStateError):
            replies[i] = silo.unmask_reply(ConfirmedUploaders(0, confirmations), round_index=0)
    return replies


@pytest.mark.parametrize(("n", "neighbours", "threshold"), [(5, "all", 2), (5, "all", 3), (12, 4, 2), (12, 4, 3), (12, 6, 3), (12, 6, 4)])
@pytest.mark.parametrize("server", SERVER_MODELS)
def test_a_server_that_splits_the_survivors_views_unmasks_an_update_only_where_the_docs_say(n, neighbours, threshold, server) -> None:
    """The review's attack: half of the victim's share holders hear "it uploaded" (they reveal shares of its
    self-mask seed), the other half "it dropped" (shares of its mask seed); with t of each kind the server strips
    every mask from the victim's upload. Every split of the holders is tried. Against an honest-but-curious
    server's protocol this succeeds exactly when 2t <= s (s: the share set), as docs/threat-model.md says; with
    ``may_lie`` (where such thresholds are refused, so the test uses t itself only when 2t > s) it never does."""
    may_lie = server == "may_lie"
    share_set = n if neighbours == "all" else neighbours + 1
    if may_lie and 2 * threshold <= share_set:
        with pytest.raises(ValueError, match="unsafe against a server that may lie"):
            round_parameters(n, neighbours=neighbours, threshold=threshold, server=server)
        threshold = share_set // 2 + 1
    victim, recovered_by = 0, []
    holders = None
    for size in range(1, share_set):
        silos, lying = federation(n, neighbours=neighbours, threshold=threshold, server=server, seed=size)
        vectors = random_vectors(n, np.random.default_rng(size), length=32)
        view = through_uploads(silos, lying, vectors)
        holders = sorted(i for i, silo in silos.items() if victim in silo._round.shares)
        told = frozenset([h for h in holders if h != victim][:size])
        view["unmask"] = split_views(silos, view, victim=victim, told_it_dropped=told, may_lie=may_lie)
        residue = attack(view, victim, threshold=threshold, round_index=0)
        if np.array_equal(residue, lying.codec.encode(vectors[victim])):
            recovered_by.append(size)
    assert len(holders) == share_set
    assert bool(recovered_by) == (not may_lie and 2 * threshold <= share_set), recovered_by


def test_a_server_cannot_substitute_keys_when_silos_assume_it_may_lie() -> None:
    silos, server = federation(6, neighbours=2, server="may_lie")
    inbound = through_keys(silos, server)
    victim = 0
    honest = inbound[victim]
    peer = next(p for p in honest.keys if p != victim)
    forged = mask_private_key(b"\x01" * 16, silo_id=peer, round_index=0).public_key().public_bytes_raw()
    keys = {**honest.keys, peer: (forged, honest.keys[peer][1])}
    with pytest.raises(ProtocolStateError, match=f"keys relayed for silo {peer} do not carry its signature"):
        silos[victim].round_reply(SecAggStage.SHARE_KEYS, dataclasses.replace(honest, keys=keys), round_index=0)
    roster = dataclasses.replace(honest.roster, advertised={**honest.roster.advertised, peer: (forged, *honest.roster.advertised[peer][1:])})
    with pytest.raises(ProtocolStateError, match=rf"keys relayed for silos \[{peer}\] do not carry their signature"):
        silos[victim].round_reply(SecAggStage.SHARE_KEYS, dataclasses.replace(honest, keys=keys, roster=roster), round_index=0)
    stranger = next(p for p in range(6) if p not in honest.keys)  # a silo that is not its neighbour in the graph
    keys = {**{p: k for p, k in honest.keys.items() if p != peer}, stranger: inbound[stranger].keys[stranger]}
    with pytest.raises(ProtocolStateError, match="not its neighbours in the round's graph"):
        silos[victim].round_reply(SecAggStage.SHARE_KEYS, dataclasses.replace(honest, keys=keys), round_index=0)
    silos[victim].round_reply(SecAggStage.SHARE_KEYS, honest, round_index=0)  # the honest relay is accepted


@pytest.mark.parametrize("neighbours", ["all", 4, "auto"])
def test_may_lie_sums_survive_dropouts_and_take_one_more_exchange(neighbours) -> None:
    n = 12
    for seed, drops in enumerate([{}, {3: "SHARE_KEYS", 7: "unmask"}, {1: "protect", 5: "COLLECT_SHARES"}]):
        silos, server = federation(n, neighbours=neighbours, server="may_lie", seed=seed, dropout_rate=0.2)
        assert server.setup_stages == tuple(SecAggSetupStage)
        vectors = random_vectors(n, np.random.default_rng(seed), length=16)
        result = run_round(silos, server, vectors, round_index=0, drops=drops)
        assert result.abandoned is None, result.abandoned
        np.testing.assert_array_equal(result.total, exact_sum(server.codec, vectors, result.uploaders))
        assert all(isinstance(reply, ConsistencySignature) for reply in result.view["consistency"].values())
        restored = pickle.loads(pickle.dumps(server))  # the registry survives snapshots, and so do identity keys
        assert restored.registry == server.registry and restored.setup_stages == server.setup_stages
        assert {"_identity", "_registry"} <= silos[0].__getstate__().keys() and silos[0].__getstate__()["_round"] is None


def test_the_graph_is_unknown_until_the_rounds_keys_exist() -> None:
    """Two rounds with the same participants get unrelated graphs, and a graph is a function of the advertised
    keys: recomputing it from the keys in the server's view gives the neighbours the silos were sent."""
    n = 20
    silos, server = federation(n, neighbours=4)
    rng = np.random.default_rng(3)
    graphs = []
    for round_index in range(2):
        result = run_round(silos, server, random_vectors(n, rng), round_index=round_index)
        seed = graph_seed(round_index, advertised_keys(result.view))
        graph = round_graph(tuple(range(n)), degree=4, seed=seed, round_index=round_index)
        assert {i: tuple(sorted(c.ciphertexts)) for i, c in result.view["SHARE_KEYS"].items()} == graph
        graphs.append(graph)
    assert graphs[0] != graphs[1]


def test_may_lie_silos_sign_only_claims_a_truthful_server_could_make() -> None:
    """A server that may lie picks the silos it claims dropped after seeing the graph: claiming two silos that
    split the ring would reveal each half's sum. Every silo refuses to sign a claim whose uploaders the graph
    does not connect, or that misses more silos than ``dropout_rate`` allows; it signs a claim that a truthful
    server could make. A truthful server abandons a round that lost more than that instead of asking."""
    n, settings = 10, dict(neighbours=2, server="may_lie", dropout_rate=0.2)  # a ring; up to d = 2 dropouts
    silos, server = federation(n, **settings)
    graph = first_round_graph(n, degree=2, **settings)
    participants, vectors = tuple(range(n)), random_vectors(n, np.random.default_rng(0))
    server.begin_round(round_index=0, participants=participants)
    inbound: dict[int, object] = {}
    for stage in server.round_stages:
        inbound = dict(server.round_relay(stage, {i: silos[i].round_reply(stage, inbound.get(i), round_index=0)
                                                  for i in participants}, round_index=0))
    for i in participants:
        silos[i].protect(vectors[i], round_index=0, participants=participants)
    far = next(v for v in range(2, n) if v not in graph[0])
    split = tuple(v for v in participants if v not in (0, far))
    assert not connected(frozenset(split), graph)
    neighbour = graph[0][0]
    too_many = tuple(v for v in participants if v not in (0, neighbour, *graph[neighbour]))
    assert connected(frozenset(too_many), graph) and len(too_many) == n - 3
    truthful = tuple(v for v in participants if v != 0)
    for silo_id in truthful:
        if silo_id in split:
            with pytest.raises(ProtocolStateError, match="not connected in the round's graph"):
                silos[silo_id].unmask_reply(ConsistencyRequest(round_index=0, uploaded=split), round_index=0)
        if silo_id in too_many:
            with pytest.raises(ProtocolStateError, match="more than protocol.dropout_rate"):
                silos[silo_id].unmask_reply(ConsistencyRequest(round_index=0, uploaded=too_many), round_index=0)
        reply = silos[silo_id].unmask_reply(ConsistencyRequest(round_index=0, uploaded=truthful), round_index=0)
        assert isinstance(reply, ConsistencySignature)
    n, settings = 20, dict(neighbours=4, server="may_lie", dropout_rate=0.1)  # d = 2; three silos apart drop
    silos, server = federation(n, **settings)
    graph, dropped = first_round_graph(n, degree=4, **settings), []
    for silo_id in range(n):
        if len(dropped) < 3 and not any(silo_id in graph[other] for other in dropped):
            dropped.append(silo_id)
    result = run_round(silos, server, random_vectors(n, np.random.default_rng(1)), round_index=0,
                       drops={silo_id: "protect" for silo_id in dropped})
    assert result.abandoned is not None and "dropout_rate" in str(result.abandoned)


def test_may_lie_bounds_count_the_dropouts_the_server_places() -> None:
    """With no corrupt silo, a server placing ``d`` dropouts splits ``H(n, K)`` once ``2 * floor(K / 2) <= d``;
    ``auto`` against a server that may lie picks a degree beyond that, and its disconnection bound is never below
    the one for dropouts at random positions."""
    for n in (40, 100, 300):
        parameters, _ = auto_parameters(n, corrupt_fraction=0.0, server="may_lie")
        assert 2 * (parameters.degree // 2) > dropped_silos(n, DEFAULT_DROPOUT_RATE)
        for degree in (4, 8, 12):
            settings = dict(federation=n, corrupt=corrupt_silos(n, 0.05), dropped=dropped_silos(n, 0.05))
            assert _disconnection(n, degree, server="may_lie", **settings) >= _disconnection(n, degree, **settings)


def commit_stage(silos, server, round_index: int = 0):
    """Round ``round_index`` through ``COMMIT_KEYS`` (silos that assume a server that may lie): the commitments and
    the list the server answers with."""
    server.begin_round(round_index=round_index, participants=tuple(sorted(silos)))
    commitments = {i: s.round_reply(SecAggStage.COMMIT_KEYS, None, round_index=round_index) for i, s in silos.items()}
    return commitments, server.round_relay(SecAggStage.COMMIT_KEYS, commitments, round_index=round_index)


def test_may_lie_silos_check_every_commitment_and_roster_entry_against_the_registry() -> None:
    """Unregistered ids, unsigned commitments, a roster that leaves out a committed silo or carries keys signed over
    another commitment list (a different graph), and claims that name silos outside the roster are all refused."""
    silos, server = federation(8, neighbours=4, server="may_lie", dropout_rate=0.25)
    commitments, lists = commit_stage(silos, server)
    honest = lists[0]
    forged = {**honest.commitments, 99: (b"\0" * 32, b"\0" * 64)}
    with pytest.raises(ProtocolStateError, match=r"unregistered or unsampled silos \[99\]"):
        silos[0].round_reply(SecAggStage.ADVERTISE_KEYS, dataclasses.replace(honest, participants=(*honest.participants, 99),
                                                                            commitments=forged), round_index=0)
    unsigned = {**honest.commitments, 3: (honest.commitments[3][0], honest.commitments[4][1])}
    with pytest.raises(ProtocolStateError, match=r"commitments relayed for silos \[3\] do not carry their signature"):
        silos[0].round_reply(SecAggStage.ADVERTISE_KEYS, dataclasses.replace(honest, commitments=unsigned), round_index=0)
    # silo 7 sees a list without silo 6: its keys are signed over another list, so nobody accepts them together
    other = dataclasses.replace(honest, commitments={i: c for i, c in honest.commitments.items() if i != 6})
    reveals = {i: s.round_reply(SecAggStage.ADVERTISE_KEYS, other if i == 7 else lists[i], round_index=0)
               for i, s in silos.items()}
    with pytest.raises(RoundAbandoned, match=r"silos \[7\] committed to round keys and did not reveal valid keys"):
        copy = pickle.loads(pickle.dumps(server))
        copy._round = server._round
        copy.round_relay(SecAggStage.ADVERTISE_KEYS, reveals, round_index=0)
    silos, server = federation(8, neighbours=4, server="may_lie", dropout_rate=0.25)
    keys = through_keys(silos, server)
    roster = keys[0].roster
    missing = dataclasses.replace(roster, advertised={i: a for i, a in roster.advertised.items() if i != 5})
    with pytest.raises(ProtocolStateError, match=r"silos \[5\] committed to keys the roster does not reveal"):
        silos[0].round_reply(SecAggStage.SHARE_KEYS, dataclasses.replace(keys[0], roster=missing), round_index=0)
    run_from_keys = {i: s.round_reply(SecAggStage.SHARE_KEYS, keys[i], round_index=0) for i, s in silos.items()}
    bundles = server.round_relay(SecAggStage.SHARE_KEYS, run_from_keys, round_index=0)
    for i, s in silos.items():
        s.round_reply(SecAggStage.COLLECT_SHARES, bundles[i], round_index=0)
        s.protect(np.ones(2), round_index=0, participants=tuple(range(8)))
    with pytest.raises(ProtocolStateError, match=r"name silos \[99\] outside the round's roster"):
        silos[0].unmask_reply(ConsistencyRequest(0, (*range(1, 8), 0, 99)), round_index=0)


def test_a_committed_silo_that_reveals_nothing_ends_the_round_naming_it() -> None:
    """The server cannot choose whose keys the graph seed hashes: a silo that committed and then reveals no keys
    (or keys other than it committed to) ends the round, named, rather than dropping out."""
    silos, server = federation(8, neighbours=4, server="may_lie", dropout_rate=0.25)
    result = run_round(silos, server, random_vectors(8, np.random.default_rng(0)), round_index=0,
                       drops={3: "ADVERTISE_KEYS"})
    assert result.abandoned is not None and "silos [3] committed to round keys" in str(result.abandoned)
    result = run_round(silos, server, random_vectors(8, np.random.default_rng(0)), round_index=1,
                       drops={3: "COMMIT_KEYS"})  # a silo lost before committing is an ordinary dropout
    assert result.abandoned is None and 3 not in result.uploaders


LOW_ORDER_POINT = bytes.fromhex("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800")


@pytest.mark.parametrize("server_model", SERVER_MODELS)
def test_a_low_order_key_drops_its_silo_or_ends_the_round_never_its_neighbours(server_model) -> None:
    """A silo advertising a low-order X25519 key (every peer's shared secret would be zero): with an honest-but-
    curious server it counts as dropped and the others' sum comes out; with may_lie the round ends naming it (its
    key does not match what it committed to). A silo sent such a key by the server refuses, naming the silo."""
    n = 8
    silos, server = federation(n, neighbours=4, server=server_model, dropout_rate=0.25)
    vectors = random_vectors(n, np.random.default_rng(1))
    bad = silos[2]
    original = bad._reveal_keys if server_model == "may_lie" else bad._advertise

    def low_order(inbound, round_index):
        advertisement = original(inbound, round_index)
        return dataclasses.replace(advertisement, mask_public_key=LOW_ORDER_POINT)

    setattr(bad, "_reveal_keys" if server_model == "may_lie" else "_advertise", low_order)
    result = run_round(silos, server, vectors, round_index=0)
    if server_model == "may_lie":
        assert result.abandoned is not None and "silos [2]" in str(result.abandoned)
    else:
        assert result.abandoned is None and 2 not in result.uploaders
        np.testing.assert_array_equal(result.total, exact_sum(server.codec, vectors, result.uploaders))
    silos, server = federation(n, neighbours=4)
    keys = through_keys(silos, server)
    peer = next(p for p in keys[0].keys if p != 0)
    forged = dataclasses.replace(keys[0], keys={**keys[0].keys, peer: (LOW_ORDER_POINT, keys[0].keys[peer][1])})
    with pytest.raises(ProtocolStateError, match=rf"invalid or low-order keys of silos \[{peer}\]"):
        silos[0].round_reply(SecAggStage.SHARE_KEYS, forged, round_index=0)


def tamper(silo, *, owner: int, kind: str):
    """Make ``silo`` answer the unmasking request with a wrong share of ``owner``'s seed (``kind``: ``self_mask_shares``
    or ``mask_seed_shares``)."""
    original = silo.unmask_reply

    def reply(request, *, round_index):
        answer = original(request, round_index=round_index)
        if isinstance(answer, UnmaskReply) and owner in getattr(answer, kind):
            index, value = getattr(answer, kind)[owner]
            wrong = ((int.from_bytes(value, "big") + 1) % PRIME).to_bytes(17, "big")
            answer = dataclasses.replace(answer, **{kind: {**getattr(answer, kind), owner: (index, wrong)}})
        return answer

    silo.unmask_reply = reply


def test_a_wrong_share_is_outvoted_by_surplus_shares_or_abandons_the_round_naming_its_holder() -> None:
    """Complete graph of 7, threshold 4: with every silo answering, a wrong self-mask share among 7 is outvoted (the
    sum is exact); with a dropped silo whose mask seed 6 holders reveal, a wrong share is found by the seed's
    public key; with only t shares of a mask seed, a wrong one abandons the round naming the holders, never
    a wrong sum and never a blame on fractional_bits."""
    n = 7
    silos, server = federation(n, threshold=4)
    vectors = random_vectors(n, np.random.default_rng(2))
    tamper(silos[3], owner=5, kind="self_mask_shares")
    result = run_round(silos, server, vectors, round_index=0)
    assert result.abandoned is None
    np.testing.assert_array_equal(result.total, exact_sum(server.codec, vectors, result.uploaders))
    silos, server = federation(n, threshold=4, seed=1)
    tamper(silos[3], owner=6, kind="mask_seed_shares")
    result = run_round(silos, server, vectors, round_index=0, drops={6: "protect"})
    assert result.abandoned is None and 6 not in result.uploaders
    np.testing.assert_array_equal(result.total, exact_sum(server.codec, vectors, result.uploaders))
    silos, server = federation(n, threshold=4, seed=2)
    tamper(silos[3], owner=6, kind="mask_seed_shares")
    result = run_round(silos, server, vectors, round_index=0, drops={6: "protect", 0: "unmask", 1: "unmask"})
    assert result.abandoned is not None and "silo 6's mask seed do not fit together" in str(result.abandoned)
    assert "fractional_bits" not in str(result.abandoned).split("(a protocol fault")[0]


def test_signatures_replayed_from_another_round_count_for_nothing() -> None:
    """Every statement names its round and graph seed: signatures of the same claimed uploaders from round 0,
    replayed in round 1, leave a silo with no co-signers, so it refuses to sign (and never reveals)."""
    n = 8
    silos, server = federation(n, neighbours=4, server="may_lie", dropout_rate=0.25)
    vectors = random_vectors(n, np.random.default_rng(5))
    everybody = tuple(range(n))
    old = {}
    for round_index in (0, 1):
        through_uploads(silos, server, vectors, round_index=round_index)
        claim = ConsistencyRequest(round_index, everybody)
        fresh = {i: s.unmask_reply(claim, round_index=round_index).signature for i, s in silos.items()}
        if round_index == 0:
            old = fresh
            continue
        with pytest.raises(ProtocolStateError, match="a round of 1 participant"):  # only itself left
            silos[0].unmask_reply(SignedUploaders(1, old), round_index=1)
        assert isinstance(silos[1].unmask_reply(SignedUploaders(1, fresh), round_index=1), ConsistencySignature)


def test_a_share_at_the_wrong_index_counts_as_not_received_and_its_sender_as_dropped(monkeypatch) -> None:
    """With may_lie a silo checks each share's index against its rank in the sender's share set: shares a sender
    deals at shifted indices count as not received (no exception), the receivers do not mask with it, and they
    sign no claim naming it, only one that counts it as dropped."""
    import privsilo.protocols.secure_aggregation.silo as silo_module

    n = 10
    silos, server = federation(n, neighbours=4, server="may_lie", dropout_rate=0.2)
    honest_split, bad = silo_module.split, silos[4]
    share_honestly = bad._share

    def share_shifted(inbound, round_index):
        def shifted(secret, **kwargs):
            return {h: (index + 1, value) for h, (index, value) in honest_split(secret, **kwargs).items()}
        monkeypatch.setattr(silo_module, "split", shifted)
        try:
            return share_honestly(inbound, round_index)
        finally:
            monkeypatch.setattr(silo_module, "split", honest_split)

    bad._share = share_shifted
    participants = tuple(range(n))
    through_uploads(silos, server, random_vectors(n, np.random.default_rng(3)))
    neighbours = sorted(set(bad._round.keys) - {4})
    assert neighbours and all(4 not in silos[i]._round.shares for i in neighbours)
    with pytest.raises(ProtocolStateError, match=r"name neighbours \[4\] whose shares it never received"):
        silos[neighbours[0]].unmask_reply(ConsistencyRequest(0, participants), round_index=0)
    other = silos[neighbours[1]]
    claim = tuple(i for i in participants if i != 4)
    assert isinstance(other.unmask_reply(ConsistencyRequest(0, claim), round_index=0), ConsistencySignature)


MALFORMED_UPLOADS = {
    "longer": lambda good: MaskedVector(3, 0, np.concatenate([good.data, good.data[:1]])),
    "shorter": lambda good: MaskedVector(3, 0, good.data[:-1].copy()),
    "int64": lambda good: MaskedVector(3, 0, good.data.astype(np.int64)),
    "float64": lambda good: MaskedVector(3, 0, good.data.astype(np.float64)),
    "out-of-range words": lambda good: MaskedVector(3, 0, np.array([2**64 + int(w) for w in good.data], dtype=object)),
    "negative words": lambda good: MaskedVector(3, 0, -good.data.astype(np.float64)),
    "two-dimensional": lambda good: MaskedVector(3, 0, good.data.reshape(1, -1)),
    "not an array": lambda good: MaskedVector(3, 0, [int(w) for w in good.data]),
    "not a MaskedVector": lambda good: good.data,
    "another sender's": lambda good: MaskedVector(2, 0, good.data),
    "another round's": lambda good: MaskedVector(3, 1, good.data),
}


@pytest.mark.parametrize("server_model", SERVER_MODELS)
@pytest.mark.parametrize("neighbours", ["all", 4])
def test_a_malformed_upload_counts_as_its_senders_dropout(server_model, neighbours) -> None:
    """Every way one silo's upload can be malformed (length, dtype, words out of range, shape, not an array, not
    its own message): under both server models the round finishes with the exact sum of the others, the sender is
    named in ``left_out`` and counted as dropped (its mask seed rebuilt, its self-mask seed never revealed)."""
    n = 8
    for seed, (name, malform) in enumerate(MALFORMED_UPLOADS.items()):
        silos, server = federation(n, neighbours=neighbours, server=server_model, seed=seed, dropout_rate=0.2)
        vectors = random_vectors(n, np.random.default_rng(seed), length=6)
        messages = dict(through_uploads(silos, server, vectors)["protect"])
        messages[3] = malform(messages[3])
        requests = server.unmask_requests(messages, round_index=0)
        assert 3 not in requests, name
        replies = {i: silos[i].unmask_reply(requests[i], round_index=0) for i in requests}
        while requests := server.unmask_follow_up(replies, round_index=0):
            replies = {i: silos[i].unmask_reply(requests[i], round_index=0) for i in requests}
        assert not any(3 in reply.self_mask_shares for reply in replies.values()), name
        assert any(3 in reply.mask_seed_shares for reply in replies.values()), name
        total = server.combine(messages, round_index=0, participants=tuple(range(n)), unmasking=replies)
        others = tuple(i for i in range(n) if i != 3)
        assert server.summed == others, name
        np.testing.assert_array_equal(total, exact_sum(server.codec, vectors, others))
        assert list(server.left_out) == [3] and "silo 3" in server.left_out[3] and "counts as dropped" in server.left_out[3], name


def test_uploads_of_two_lengths_without_a_majority_abandon_the_round_naming_them() -> None:
    silos, server = federation(4)
    messages = dict(through_uploads(silos, server, random_vectors(4, np.random.default_rng(0), length=5))["protect"])
    messages.update({i: MaskedVector(i, 0, messages[i].data[:-1].copy()) for i in (2, 3)})
    with pytest.raises(RoundAbandoned, match=r"disagree on the vector length with no majority .*silos \[0, 1, 2, 3\]"):
        server.unmask_requests(messages, round_index=0)


@pytest.mark.parametrize("server_model", SERVER_MODELS)
def test_a_silo_refusing_shares_that_do_not_authenticate_drops_out_and_the_round_goes_on(server_model) -> None:
    """Silo 2's shares for silo 0 do not authenticate. The engine turns a refusal into the refuser sitting the rest
    of the round out (``privsilo.simulator.engine.actors``); played here: with ``honest_but_curious`` silo 0 refuses at
    ``COLLECT_SHARES``, naming silo 2, before it masks; with ``may_lie`` it masks without silo 2 and refuses to
    sign a claim naming it. Either way the round sums the other silos exactly, and no silo's two kinds of share
    are both revealed."""
    n, round_index = 8, 0
    silos, server = federation(n, neighbours=4, server=server_model, dropout_rate=0.2)
    vectors = random_vectors(n, np.random.default_rng(5), length=6)
    participants = tuple(range(n))
    server.begin_round(round_index=round_index, participants=participants)
    inbound: dict[int, object] = {}
    for stage in server.round_stages:
        if stage is SecAggStage.COLLECT_SHARES:
            bundle = inbound[0]
            assert 2 in bundle.ciphertexts  # silos 0 and 2 are neighbours in this seeded round's graph
            forged = bundle.ciphertexts[2][:-1] + bytes([bundle.ciphertexts[2][-1] ^ 1])
            inbound[0] = dataclasses.replace(bundle, ciphertexts={**bundle.ciphertexts, 2: forged})
        replies = {}
        for i, silo in silos.items():
            try:
                replies[i] = silo.round_reply(stage, inbound.get(i), round_index=round_index)
            except ProtocolStateError as refusal:
                assert (server_model, i, stage) == ("honest_but_curious", 0, SecAggStage.COLLECT_SHARES)
                assert "the shares relayed from silo 2 do not authenticate" in str(refusal)
        inbound = dict(server.round_relay(stage, replies, round_index=round_index))
    sitting = {0} if server_model == "honest_but_curious" else set()
    messages = {i: silos[i].protect(vectors[i], round_index=round_index, participants=participants)
                for i in participants if i not in sitting}
    requests, refused, revealed = server.unmask_requests(messages, round_index=round_index), set(), []
    while requests:
        replies = {}
        for i in requests:
            try:
                replies[i] = silos[i].unmask_reply(requests[i], round_index=round_index)
            except ProtocolStateError as refusal:
                assert (server_model, i) == ("may_lie", 0) and "name neighbours [2] whose shares it never received" in str(refusal)
                refused.add(i)
        revealed += [reply for reply in replies.values() if isinstance(reply, UnmaskReply)]
        requests = server.unmask_follow_up(replies, round_index=round_index) if server_model == "may_lie" else {}
        unmasking = replies
    assert refused == ({0} if server_model == "may_lie" else set())
    total = server.combine(messages, round_index=round_index, participants=tuple(sorted(messages)), unmasking=unmasking)
    others = tuple(i for i in participants if i != 0)
    assert server.summed == others
    np.testing.assert_array_equal(total, exact_sum(server.codec, vectors, others))
    self_masks = {owner for reply in revealed for owner in reply.self_mask_shares}
    mask_seeds = {owner for reply in revealed for owner in reply.mask_seed_shares}
    assert not self_masks & mask_seeds and 0 in mask_seeds and 0 not in self_masks
