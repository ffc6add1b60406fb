"""Silo side of secure aggregation with dropout recovery (Bonawitz et al., CCS 2017, Fig. 4; with ``server=
"may_lie"`` its actively secure variant: signed keys and the consistency round) on the SecAgg+ graph (Bell et
al., CCS 2020): fresh keys and shares every round."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from privsilo.protocols.base import ProtocolStateError, SiloProtocol, check_participants, check_round_index, read_only
from privsilo.protocols.crypto_random import CryptoRandom
from privsilo.protocols.fixed_point import FixedPointCodec
from privsilo.protocols.secure_aggregation.limits import check_count, check_minimum, check_silo_id
from privsilo.protocols.secure_aggregation.masks import derive_pairwise_key, mask_sum, self_mask_key
from privsilo.protocols.secure_aggregation.graph import connected, round_graph
from privsilo.protocols.secure_aggregation.messages import (
    CommitmentList,
    ConfirmedUploaders,
    ConsistencyRequest,
    ConsistencySignature,
    EncryptedShares,
    IdentityKey,
    IdentityRegistry,
    KeyCommitment,
    MaskedVector,
    NeighbourKeys,
    RoundKeyAdvertisement,
    SecAggSetupStage,
    SecAggStage,
    ShareBundle,
    SignedUploaders,
    UnmaskReply,
    UnmaskRequest,
)
from privsilo.protocols.secure_aggregation.parameters import (
    DEFAULT_CORRUPT_FRACTION,
    DEFAULT_DROPOUT_RATE,
    GraphSettings,
    Neighbours,
    RoundParameters,
    ServerModel,
    dropped_silos,
)
from privsilo.protocols.secure_aggregation.sharing import (
    SEED_BYTES,
    Channel,
    Share,
    channel_key,
    holder_list,
    mask_private_key,
    public_bytes,
    split,
)
from privsilo.protocols.secure_aggregation.signatures import (
    IDENTITY_KEY_BYTES,
    advertisement_message,
    commitment_message,
    identity_public,
    key_digest,
    list_digest,
    roster_seed,
    sign,
    uploaders_message,
    valid_signers,
    verified,
)

_SELF_MASK, _MASK_SEED = "self-mask seed", "mask seed"
_SAT_OUT = "sat out"
"""A silo's step after the server dropped it from the round (it refused the silo's keys): it uploads nothing."""


@dataclass
class _Round:
    """A silo's secrets and progress in one round, as raw bytes (picklable; no key objects are kept)."""

    round_index: int
    mask_seed: bytes
    self_mask_seed: bytes
    channel_key: bytes
    public_keys: tuple[bytes, bytes] = (b"", b"")
    """The advertised (mask, channel) public keys."""
    next_step: str = SecAggStage.SHARE_KEYS.name
    listed: bytes = b""
    """When the server may lie: the hash of the commitment list this silo signed with its keys."""
    commitments: CommitmentList | None = None
    seed: int = 0
    """When the server may lie: the round's graph seed, which every statement it signs names."""
    threshold: int = 0
    keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    shares: dict[int, tuple[Share, Share]] = field(default_factory=dict)
    """Shares held, by owner (this silo's own included): (share of its mask seed, share of its self-mask seed)."""
    holders: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """When the server may lie: every holder of each owner's shares, as the owner sent them."""
    statement: tuple[int, ...] | None = None
    """When the server may lie: the uploaders ``U`` this silo signed in the consistency round (one set per round)."""
    confirmed: tuple[int, ...] | None = None
    """When the server may lie: the signers ``U'`` of ``U`` that this silo signed in turn (one set per round)."""
    graph: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """When the server may lie: the round's graph, as this silo recomputed it from the roster's keys."""
    participants: int = 0
    """When the server may lie: the size of the round's roster."""
    advertisers: frozenset[int] = frozenset()
    """When the server may lie: the silos of the roster (every committed silo, each revealed its keys)."""
    revealed: dict[int, str] = field(default_factory=dict)

    mask_keys: dict[int, bytes] = field(default_factory=dict)
    """The pairwise mask keys ``k_uv``, by neighbour (``agree``)."""
    channel_keys: dict[int, bytes] = field(default_factory=dict)
    """The AES-GCM keys of the channels to the neighbours (``agree``)."""

    def mask_key(self, silo_id: int) -> X25519PrivateKey:
        return mask_private_key(self.mask_seed, silo_id=silo_id, round_index=self.round_index)

    def agree(self, silo_id: int) -> None:
        """Derive every pairwise key of the round in one pass over the neighbours (two X25519 agreements each:
        mask keys and channel keys), once: sealing, opening and masking all reuse them."""
        mask_key, channel = self.mask_key(silo_id), X25519PrivateKey.from_private_bytes(self.channel_key)
        for peer, (mask_public, channel_public) in self.keys.items():
            if peer == silo_id:
                continue
            try:  # a malformed or low-order key (all-zero shared secret) raises: the server should have refused it
                self.mask_keys[peer] = derive_pairwise_key(private_key=mask_key, peer_public_key=mask_public,
                                                           own_id=silo_id, peer_id=peer)
                self.channel_keys[peer] = channel_key(channel, channel_public, own_id=silo_id, peer_id=peer,
                                                      round_index=self.round_index)
            except (TypeError, ValueError):
                raise ProtocolStateError(
                    f"silo {silo_id}: the server relayed invalid or low-order keys of silos [{peer}]") from None

    def channel(self, silo_id: int, peer: int) -> Channel:
        return Channel(self.channel_keys[peer], own_id=silo_id, peer_id=peer, round_index=self.round_index)


_last_list_check: list = [None, ()]  # [the last commitment list object, its unsigned entries]


def _unsigned_commitments(listing: CommitmentList, registry: dict[int, bytes]) -> tuple[int, ...]:
    """The commitments of ``listing`` whose signature fails, remembered for the last list object (one worker's
    silos receive one copy and check it once)."""
    if _last_list_check[0] is not listing:
        bad = tuple(sorted(i for i, (digest, signature) in listing.commitments.items()
                           if not verified(registry.get(i, b""), commitment_message(listing.round_index, i, digest), signature)))
        _last_list_check[:] = [listing, bad]
    return _last_list_check[1]


_last_claim: list = [None, None, None, (), True]  # [claim, roster silos, graph, their strangers, connected]


def _claim_facts(uploaded: tuple[int, ...], advertisers: frozenset[int], graph: dict) -> tuple[list[int], bool]:
    """The members of a claim outside the roster and whether the graph connects it, remembered for the last claim
    (every silo of a worker is told the same one, and the graph is one shared object there)."""
    if _last_claim[0] != uploaded or _last_claim[1] != advertisers or _last_claim[2] is not graph:
        _last_claim[:] = [uploaded, advertisers, graph, sorted(set(uploaded) - advertisers),
                          connected(frozenset(uploaded), graph)]
    return _last_claim[3], _last_claim[4]


_last_list: list = [None, b""]  # [the last commitment list object, its hash]


def _list_digest(listing: CommitmentList) -> bytes:
    """``signatures.list_digest`` of a commitment list, remembered for the last list object."""
    if _last_list[0] is not listing:
        _last_list[:] = [listing, list_digest(listing.round_index, listing.participants, listing.commitments)]
    return _last_list[1]


_last_share_sets: list = [None, frozenset(), {}]  # [the last graph object, its roster silos, share sets by dealer]


def _share_sets(graph: dict, advertisers: frozenset[int]) -> dict[int, tuple[int, ...]]:
    """A dict that ``_share_set`` fills: each dealer's share set in ``graph`` among ``advertisers``, remembered for
    the last graph object and roster (every silo of a worker checks the same ones)."""
    if _last_share_sets[0] is not graph or _last_share_sets[1] != advertisers:
        _last_share_sets[:] = [graph, advertisers, {}]
    return _last_share_sets[2]


def _share_set(known: dict[int, tuple[int, ...]], graph: dict, advertisers: frozenset[int], peer: int) -> tuple[int, ...]:
    """``peer`` and its neighbours in ``graph`` among ``advertisers``, sorted: whom it must deal its shares to."""
    if peer not in known:
        known[peer] = tuple(sorted({peer, *(q for q in graph[peer] if q in advertisers)}))
    return known[peer]


_last_roster_check: list = [None, b"", ()]  # [the last roster object, the list hash, its bad entries]


def _unsigned_entries(roster, commitments: CommitmentList, listed: bytes, registry: dict[int, bytes]) -> tuple[int, ...]:
    """The roster entries whose keys do not match their commitment or whose signature over ``listed`` fails,
    remembered for the last roster object (one worker's silos receive one copy and check it once)."""
    if _last_roster_check[0] is not roster or _last_roster_check[1] != listed:
        bad = tuple(sorted(
            peer for peer, (mask, channel, signature) in roster.advertised.items()
            if key_digest(roster.round_index, peer, mask, channel) != commitments.commitments[peer][0]
            or not verified(registry.get(peer, b""), advertisement_message(roster.round_index, peer, mask, channel, listed),
                            signature)))
        _last_roster_check[:] = [roster, listed, bad]
    return _last_roster_check[2]


class SecAggSilo(SiloProtocol):
    """Silo side: per round, advertises fresh keys, shares its seeds with its neighbours, masks its vector twice
    and answers the server's unmasking request (see the package docstring).

    ``random`` defaults to the operating system's CSPRNG (pass ``privsilo.protocols.crypto_random.seeded_for_tests``
    only in tests; Shamir's polynomial coefficients come from it too). The silo masks only for rounds of
    at least ``min_participants`` (>= 2) and at most ``codec.max_summands`` participants, and refuses a
    relayed threshold that differs from what ``neighbours``/``threshold`` give for the round's size (out of
    ``federation`` silos). With ``server="may_lie"`` it registers an identity key at set-up, commits to its round
    keys before revealing them, checks every roster entry against the registry and the commitments and its
    neighbourhood against the graph, signs only claims that name no neighbour it did not mask with, and reveals
    shares only after the two consistency exchanges (``signatures.py``).
    """

    def __init__(
        self,
        silo_id: int,
        *,
        codec: FixedPointCodec,
        min_participants: int = 2,
        threshold: int | None = None,
        neighbours: Neighbours = "all",
        corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
        dropout_rate: float = DEFAULT_DROPOUT_RATE,
        federation: int | None = None,
        server: ServerModel = "honest_but_curious",
        random: CryptoRandom | None = None,
    ) -> None:
        check_silo_id(silo_id)
        check_minimum(min_participants, codec)
        self.silo_id = silo_id
        self.codec = codec
        self.min_participants = min_participants
        self.settings = GraphSettings(neighbours, threshold, corrupt_fraction, dropout_rate, federation, server)
        self.may_lie = server == "may_lie"
        self._random = CryptoRandom() if random is None else random
        self._identity: bytes | None = None
        self._registry: dict[int, bytes] = {}
        self._round: _Round | None = None
        self._last_round: int | None = None

    def __getstate__(self) -> dict:
        # A snapshot (crash recovery, checkpoints) is taken between rounds or after this silo's upload; it never
        # carries a round's seeds, keys or shares, which with the upload would unmask it. A silo restored after a
        # crash never rejoins the round it crashed in, and the next round starts afresh.
        return {**self.__dict__, "_round": None}

    def setup_reply(self, stage: enum.Enum, inbound: object | None) -> object | None:
        """Only when the server may lie: ``REGISTER`` draws the identity key and sends its public half;
        ``LEARN_IDENTITIES`` keeps the registry (``IdentityRegistry``). Round keys are agreed every round."""
        if not self.may_lie:
            raise ProtocolStateError(f"secure aggregation has no setup stages, got {stage!r}")
        if stage is SecAggSetupStage.REGISTER and self._identity is None:
            self._identity = self._random.bytes(IDENTITY_KEY_BYTES)
            return IdentityKey(sender=self.silo_id, public_key=identity_public(self._identity))
        if stage is SecAggSetupStage.LEARN_IDENTITIES and self._identity is not None and not self._registry:
            if not isinstance(inbound, IdentityRegistry) or inbound.keys.get(self.silo_id) != identity_public(self._identity):
                raise ProtocolStateError(f"{self._who()}: the identity registry does not hold this silo's key")
            self._registry = dict(inbound.keys)
            return None
        raise ProtocolStateError(f"{self._who()}: set-up stage {stage!r} out of order")

    def _who(self) -> str:
        return f"silo {self.silo_id}"

    def _current(self, round_index: int, step: str) -> _Round:
        check_round_index(round_index)
        state = self._round
        if state is None or state.round_index != round_index or state.next_step != step:
            where = "no round" if state is None else f"round {state.round_index} at {state.next_step}"
            raise ProtocolStateError(f"{self._who()}: got {step} for round {round_index}, but is in {where}")
        return state

    def round_reply(self, stage: enum.Enum, inbound: object | None, *, round_index: int) -> object | None:
        """``ADVERTISE_KEYS`` (Bonawitz et al. round 0; ``inbound`` is ``None`` or the engine's leftover from an
        earlier round, ignored): draw fresh seeds and keys. ``SHARE_KEYS`` (round 1; ``NeighbourKeys``): share
        both seeds among the share set, encrypted. ``COLLECT_SHARES`` (``ShareBundle``): keep the neighbours'
        shares; answers ``None``."""
        if stage is SecAggStage.COMMIT_KEYS and self.may_lie:
            return self._commit(inbound, round_index)
        if stage is SecAggStage.ADVERTISE_KEYS and self.may_lie:
            return self._reveal_keys(inbound, round_index)
        if stage is SecAggStage.ADVERTISE_KEYS:
            return self._advertise(inbound, round_index)
        if stage is SecAggStage.SHARE_KEYS:
            return self._share(inbound, round_index)
        if stage is SecAggStage.COLLECT_SHARES:
            return self._collect(inbound, round_index)
        raise ProtocolStateError(f"{self._who()}: unknown stage {stage!r}")

    def _commit(self, inbound: object | None, round_index: int) -> KeyCommitment:
        """When the server may lie (``COMMIT_KEYS``): draw the round's keys and send only their signed hash."""
        advertisement = self._advertise(inbound, round_index)
        digest = key_digest(round_index, self.silo_id, advertisement.mask_public_key, advertisement.channel_public_key)
        self._round.next_step = SecAggStage.ADVERTISE_KEYS.name
        return KeyCommitment(sender=self.silo_id, round_index=round_index, digest=digest,
                             signature=sign(self._identity, commitment_message(round_index, self.silo_id, digest)))

    def _reveal_keys(self, inbound: object | None, round_index: int) -> RoundKeyAdvertisement:
        """When the server may lie (``ADVERTISE_KEYS``): check the commitment list (its own commitment in it, every
        entry registered and signed) and reveal the keys, signed together with the list's hash."""
        state = self._current(round_index, SecAggStage.ADVERTISE_KEYS.name)
        if not isinstance(inbound, CommitmentList) or inbound.round_index != round_index:
            raise ProtocolStateError(f"{self._who()}: ADVERTISE_KEYS needs this round's CommitmentList, got {inbound!r}")
        participants = check_participants(inbound.participants)
        own = key_digest(round_index, self.silo_id, *state.public_keys)
        if inbound.commitments.get(self.silo_id, (b"",))[0] != own:
            raise ProtocolStateError(f"{self._who()}: the commitment list does not hold its own commitment")
        strangers = sorted((set(participants) - self._registry.keys()) | (inbound.commitments.keys() - set(participants)))
        if strangers:
            raise ProtocolStateError(f"{self._who()}: the commitment list names unregistered or unsampled silos {strangers[:10]}")
        bad = _unsigned_commitments(inbound, self._registry)
        if bad:
            raise ProtocolStateError(f"{self._who()}: the commitments relayed for silos {list(bad[:10])} do not carry their signature")
        state.commitments = inbound
        state.listed = _list_digest(inbound)
        state.next_step = SecAggStage.SHARE_KEYS.name
        return RoundKeyAdvertisement(
            sender=self.silo_id, round_index=round_index, mask_public_key=state.public_keys[0],
            channel_public_key=state.public_keys[1],
            signature=sign(self._identity, advertisement_message(round_index, self.silo_id, *state.public_keys, state.listed)),
        )

    def _advertise(self, inbound: object | None, round_index: int) -> RoundKeyAdvertisement:
        check_round_index(round_index)
        if self._last_round is not None and round_index <= self._last_round:
            raise ProtocolStateError(
                f"{self._who()}: round {round_index} is not after round {self._last_round}; keys are fresh every round"
            )
        stale = getattr(inbound, "round_index", None)
        if inbound is not None and not (isinstance(stale, int) and stale < round_index):
            raise ProtocolStateError(f"{self._who()}: ADVERTISE_KEYS takes no inbound message, got {inbound!r}")
        self._last_round = round_index
        channel = self._random.bytes(32)
        state = _Round(round_index, self._random.bytes(SEED_BYTES), self._random.bytes(SEED_BYTES), channel)
        state.public_keys = (public_bytes(state.mask_key(self.silo_id)), public_bytes(X25519PrivateKey.from_private_bytes(channel)))
        self._round = state
        if self.may_lie and not self._registry:
            raise ProtocolStateError(f"{self._who()}: no identity registry; the set-up stages did not run")
        return RoundKeyAdvertisement(sender=self.silo_id, round_index=round_index, mask_public_key=state.public_keys[0],
                                     channel_public_key=state.public_keys[1])

    def _check_neighbourhood(self, state: _Round, inbound: NeighbourKeys, expected: RoundParameters) -> dict[int, tuple[int, ...]]:
        """When the server may lie: the roster holds exactly the committed silos, each entry's keys match its
        commitment and carry its signature over the commitment list this silo saw (so every silo that accepts a
        roster saw the same list, and all of them draw one graph), and the relayed keys are exactly this silo's
        neighbours among the advertisers in that graph; returns the graph."""
        roster, commitments = inbound.roster, state.commitments
        if roster is None or roster.round_index != inbound.round_index or roster.participants != commitments.participants \
                or len(roster.participants) != inbound.participants:
            raise ProtocolStateError(f"{self._who()}: the round's roster is missing or does not match the commitment list")
        advertised = roster.advertised
        if advertised.keys() != commitments.commitments.keys():
            missing = sorted(commitments.commitments.keys() - advertised.keys())
            raise ProtocolStateError(f"{self._who()}: silos {missing[:10]} committed to keys the roster does not reveal")
        bad = _unsigned_entries(roster, commitments, state.listed, self._registry)
        if bad:
            raise ProtocolStateError(f"{self._who()}: the keys relayed for silos {list(bad[:10])} do not carry their signature "
                                     "over this silo's commitment list, or do not match their commitment")
        for peer, pair in inbound.keys.items():
            if peer not in advertised or advertised[peer][:2] != tuple(pair):
                raise ProtocolStateError(f"{self._who()}: the keys relayed for silo {peer} do not carry its signature")
        state.seed, state.advertisers = roster_seed(roster, state.listed), frozenset(advertised)
        graph = round_graph(roster.participants, degree=expected.degree, seed=state.seed, round_index=inbound.round_index)
        neighbours = {peer for peer in graph.get(self.silo_id, ()) if peer in advertised}
        if set(inbound.keys) != neighbours | {self.silo_id}:
            raise ProtocolStateError(f"{self._who()}: the relayed keys are not its neighbours in the round's graph")
        return graph

    def _share(self, inbound: object | None, round_index: int) -> EncryptedShares | None:
        state = self._current(round_index, SecAggStage.SHARE_KEYS.name)
        if inbound is None:  # the server dropped this silo (it refused its keys): it sits the round out
            state.next_step = _SAT_OUT
            return None
        if not isinstance(inbound, NeighbourKeys) or inbound.round_index != round_index:
            raise ProtocolStateError(f"{self._who()}: SHARE_KEYS needs this round's NeighbourKeys, got {inbound!r}")
        try:
            expected = self.settings.for_round(inbound.participants)
        except ValueError as error:
            raise ProtocolStateError(f"{self._who()}: refuses round {round_index}: {error}") from None
        if inbound.keys.get(self.silo_id) != state.public_keys:
            raise ProtocolStateError(f"{self._who()}: the relayed keys do not hold this silo's own keys")
        if inbound.threshold != expected.threshold:
            raise ProtocolStateError(
                f"{self._who()}: refuses threshold {inbound.threshold}; its settings give {expected.threshold} "
                f"for {inbound.participants} participants"
            )
        if not expected.threshold <= len(inbound.keys) <= expected.share_set:
            raise ProtocolStateError(
                f"{self._who()}: a share set of {len(inbound.keys)} silos is unsafe (threshold {expected.threshold}, "
                f"at most {expected.share_set} holders)"
            )
        if self.may_lie:
            state.graph, state.participants = self._check_neighbourhood(state, inbound, expected), inbound.participants
        state.threshold, state.keys = expected.threshold, dict(inbound.keys)
        state.agree(self.silo_id)
        holders = sorted(state.keys)
        mask_seed_shares = split(state.mask_seed, threshold=state.threshold, holders=holders, random=self._random)
        self_mask_shares = split(state.self_mask_seed, threshold=state.threshold, holders=holders, random=self._random)
        state.shares[self.silo_id] = (mask_seed_shares[self.silo_id], self_mask_shares[self.silo_id])
        state.holders[self.silo_id] = tuple(holders) if self.may_lie else ()
        listed = holder_list(state.holders[self.silo_id])
        ciphertexts = {peer: state.channel(self.silo_id, peer).seal(mask_seed_shares[peer], self_mask_shares[peer], listed)
                       for peer in holders if peer != self.silo_id}
        state.next_step = SecAggStage.COLLECT_SHARES.name
        return EncryptedShares(sender=self.silo_id, round_index=round_index, ciphertexts=ciphertexts)

    def _collect(self, inbound: object | None, round_index: int) -> None:
        if self._round is not None and self._round.next_step in (_SAT_OUT, SecAggStage.COLLECT_SHARES.name) and inbound is None:
            self._round.next_step = _SAT_OUT  # the server dropped this silo (keys or shares refused): it sits out
            return None
        state = self._current(round_index, SecAggStage.COLLECT_SHARES.name)
        if not isinstance(inbound, ShareBundle) or inbound.round_index != round_index:
            raise ProtocolStateError(f"{self._who()}: COLLECT_SHARES needs this round's ShareBundle, got {inbound!r}")
        strangers = sorted(peer for peer in inbound.ciphertexts if peer == self.silo_id or peer not in state.keys)
        if strangers:
            raise ProtocolStateError(f"{self._who()}: shares relayed from non-neighbours {strangers}")
        known = _share_sets(state.graph, state.advertisers) if self.may_lie else {}
        for peer, ciphertext in inbound.ciphertexts.items():
            if not self.may_lie:
                mask_seed_share, self_mask_share, holders = state.channel(self.silo_id, peer).open(ciphertext)
            else:
                # A ciphertext that does not open, or a share not for its sender's share set in the round's graph
                # at this silo's rank there, counts as not received: this silo does not mask with the sender and
                # will sign no claim naming it (_sign_uploaders), so a bad sender drops out instead of ending the run.
                try:
                    mask_seed_share, self_mask_share, holders = state.channel(self.silo_id, peer).open(ciphertext)
                except ProtocolStateError:
                    continue
                expected = _share_set(known, state.graph, state.advertisers, peer)
                if holders != expected or mask_seed_share[0] != expected.index(self.silo_id) + 1:
                    continue
            state.shares[peer], state.holders[peer] = (mask_seed_share, self_mask_share), holders
        if len(state.shares) < state.threshold:
            raise ProtocolStateError(
                f"{self._who()}: only {len(state.shares)} silos hold its shares, below the threshold {state.threshold}"
            )
        state.next_step = "protect"
        return None

    def protect(self, vector: np.ndarray, *, round_index: int, participants: tuple[int, ...]) -> MaskedVector | None:
        """Bonawitz et al. round 2: ``y = encode(x) + PRG(b) + sum_v s_v PRG(k_v)`` mod 2^64 over the neighbours
        ``v`` whose shares arrived (``s_v = +1`` if this silo's id is below ``v``'s, else ``-1``).

        ``None`` when the server dropped this silo at ``SHARE_KEYS`` (it sits the round out).

        Raises ``EncodingOverflowError`` if a value lies outside the codec's range and ``ProtocolStateError``
        out of order (before ``COLLECT_SHARES``, or a second time in a round), for participants that omit this
        silo or a neighbour it masks with, or for a round size outside ``[min_participants, max_summands]``."""
        if self._round is not None and self._round.round_index == round_index and self._round.next_step == _SAT_OUT:
            return None
        state = self._current(round_index, "protect")
        members = check_participants(participants)
        if self.silo_id not in members:
            raise ProtocolStateError(f"{self._who()} is not among the participants {participants!r}")
        check_count(len(participants), min_participants=self.min_participants, codec=self.codec, who=self._who())
        strangers = sorted(state.shares.keys() - members)
        if strangers:
            raise ProtocolStateError(f"{self._who()}: neighbours {strangers} are not among the participants")
        values = np.asarray(vector, dtype=np.float64)
        if values.ndim != 1:
            raise ValueError(f"expected a flat vector, got shape {values.shape}")
        masked = self.codec.encode(values)
        neighbours = sorted(state.shares.keys() - {self.silo_id})
        masked += mask_sum(
            [self_mask_key(state.self_mask_seed, silo_id=self.silo_id, round_index=round_index)]
            + [state.mask_keys[peer] for peer in neighbours if self.silo_id < peer],
            [state.mask_keys[peer] for peer in neighbours if peer < self.silo_id],
            round_index=round_index, length=masked.size,
        )
        state.next_step = "unmask"
        return MaskedVector(sender=self.silo_id, round_index=round_index, data=read_only(masked))

    def unmask_reply(self, request: object, *, round_index: int) -> UnmaskReply | ConsistencySignature:
        """Bonawitz et al. round 4: reveal the self-mask-seed shares of the share-set members that uploaded
        (this silo included) and the mask-seed shares of the others.

        The server that follows the protocol asks with an ``UnmaskRequest``. One that may lie (Bonawitz et al.'s
        consistency check, in two exchanges) sends a ``ConsistencyRequest`` with the claimed uploaders ``U``
        (answered with a ``ConsistencySignature``), then ``SignedUploaders``, the signatures of ``U`` (the signers
        ``U'`` are the uploaders; answered with a signature of ``U'``), then ``ConfirmedUploaders``: the silo
        reveals as for ``U'``, and only if, for every silo whose share it holds, ``threshold`` of that silo's share
        holders signed the same ``U'``.

        Refuses (``ProtocolStateError``) before this silo uploaded, when fewer than ``min_participants`` uploaded
        in all, when asked for its own mask seed, whenever answering would reveal, over the round, both kinds of
        share of one silo, and (server that may lie) a request of another kind or out of order, a second set to
        sign, a claim a truthful server could not make (``_check_claim``), or too few agreeing signatures."""
        state = self._current(round_index, "unmask")
        if getattr(request, "round_index", None) != round_index:
            raise ProtocolStateError(f"{self._who()}: expected this round's unmasking request, got {request!r}")
        if self.may_lie and isinstance(request, ConsistencyRequest):
            return self._sign_uploaders(state, request)
        if self.may_lie and isinstance(request, SignedUploaders):
            return self._sign_signers(state, request)
        if self.may_lie and isinstance(request, ConfirmedUploaders):
            self._check_agreement(state, request)
            return self._reveal(state, set(state.confirmed) & state.shares.keys(), len(state.confirmed), round_index)
        if not self.may_lie and isinstance(request, UnmaskRequest):
            return self._reveal(state, set(request.uploaded), request.uploaders, round_index)
        raise ProtocolStateError(f"{self._who()}: expected this round's unmasking request, got {request!r}")

    def _sign_uploaders(self, state: _Round, request: ConsistencyRequest) -> ConsistencySignature:
        """Sign ``U`` (once per round) if a truthful server could claim it (``_check_claim``) and every neighbour
        it names is one whose shares this silo received and masked with (Bonawitz et al.'s ``U3 ⊆ U2``): a server
        that withheld a neighbour's shares from this silo, so that it masked without that neighbour, must then
        count the neighbour as dropped, which reveals its mask seed, never its self-mask seed."""
        uploaded = tuple(sorted(set(request.uploaded)))
        if state.statement is not None:
            raise ProtocolStateError(f"{self._who()}: already signed a set of uploaders in round {state.round_index}")
        self._check_claim(state, uploaded, "claimed uploaders")
        unshared = sorted(set(uploaded) & set(state.graph[self.silo_id]) - state.shares.keys())
        if unshared:
            raise ProtocolStateError(f"{self._who()}: the claimed uploaders name neighbours {unshared[:10]} whose shares "
                                     "it never received (it did not mask with them); it signs nothing")
        state.statement = uploaded
        signature = sign(self._identity, uploaders_message(state.round_index, uploaded, seed=state.seed))
        return ConsistencySignature(sender=self.silo_id, round_index=state.round_index, signature=signature)

    def _sign_signers(self, state: _Round, request: SignedUploaders) -> ConsistencySignature:
        """Sign ``U'``, the members of the ``U`` it signed whose signature of ``U`` verifies (and itself), once per
        round, if a truthful server could claim it (``_check_claim``). An uploader that did not sign ``U`` counts
        as dropped: the holders reveal its mask seed, and its upload is left out of the sum."""
        if state.statement is None or state.confirmed is not None:
            raise ProtocolStateError(f"{self._who()}: the signers of the uploaders arrive out of order")
        message = uploaders_message(state.round_index, state.statement, seed=state.seed)
        signers = valid_signers(self._registry, message, request.signatures) & set(state.statement) | {self.silo_id}
        confirmed = tuple(sorted(signers))
        self._check_claim(state, confirmed, "uploaders that signed")
        state.confirmed = confirmed
        signature = sign(self._identity, uploaders_message(state.round_index, confirmed, seed=state.seed, signers=True))
        return ConsistencySignature(sender=self.silo_id, round_index=state.round_index, signature=signature)

    def _check_claim(self, state: _Round, uploaded: tuple[int, ...], what: str) -> None:
        """Accept a set of uploaders only if a truthful server could claim it within the guarantee: this silo in it,
        every member in the roster (registered, committed and revealed), at most ``d = ceil(dropout_rate * n)`` of
        the round's ``n`` silos missing, and the rest connected in the round's graph. A server that may lie would
        otherwise drop chosen silos to split the uploaders into groups and learn each group's sum
        (``parameters.py`` bounds what ``d`` dropouts it places can still do)."""
        if self.silo_id not in uploaded:
            raise ProtocolStateError(f"{self._who()}: the {what} {list(uploaded)[:10]} omit this silo")
        strangers, joined = _claim_facts(uploaded, state.advertisers, state.graph)
        if strangers:
            raise ProtocolStateError(f"{self._who()}: the {what} name silos {strangers[:10]} outside the round's roster")
        check_count(len(uploaded), min_participants=self.min_participants, codec=self.codec, who=self._who())
        lost, allowed = state.participants - len(uploaded), dropped_silos(state.participants, self.settings.dropout_rate)
        if lost > allowed:
            raise ProtocolStateError(
                f"{self._who()}: the server claims {lost} of the round's {state.participants} silos are not among the "
                f"{what}, more than protocol.dropout_rate = {self.settings.dropout_rate} allows ({allowed}); it signs nothing"
            )
        if not joined:
            raise ProtocolStateError(f"{self._who()}: the {what} are not connected in the round's graph; it signs nothing")

    def _check_agreement(self, state: _Round, request: ConfirmedUploaders) -> None:
        """Refuse unless this silo signed ``U'`` and, for every owner of a share it holds, ``threshold`` of the
        owner's share holders (its share set in the round's graph) signed the same ``U'``."""
        if state.confirmed is None:
            raise ProtocolStateError(f"{self._who()}: asked to unmask before it signed the uploaders")
        message = uploaders_message(state.round_index, state.confirmed, seed=state.seed, signers=True)
        agreeing = valid_signers(self._registry, message, request.signatures) | {self.silo_id}
        short = sorted(owner for owner, holders in state.holders.items() if len(agreeing.intersection(holders)) < state.threshold)
        if short:
            raise ProtocolStateError(
                f"{self._who()}: fewer than {state.threshold} share holders of silos {short[:10]} signed the uploaders "
                f"it signed; it reveals nothing"
            )

    def _reveal(self, state: _Round, uploaded: set[int], uploaders: int, round_index: int) -> UnmaskReply:
        check_count(uploaders, min_participants=self.min_participants, codec=self.codec, who=self._who())
        if self.silo_id not in uploaded or not uploaded <= state.shares.keys():
            raise ProtocolStateError(
                f"{self._who()}: request names uploaders {sorted(uploaded)} outside its share set "
                f"{sorted(state.shares)} or omits itself"
            )
        kinds = {owner: _SELF_MASK if owner in uploaded else _MASK_SEED for owner in state.shares}
        both = sorted(owner for owner, kind in kinds.items() if state.revealed.get(owner, kind) != kind)
        if both:
            raise ProtocolStateError(
                f"{self._who()}: refuses to reveal both a mask-seed and a self-mask-seed share of silos {both} "
                f"in round {round_index}"
            )
        state.revealed.update(kinds)
        return UnmaskReply(
            sender=self.silo_id, round_index=round_index,
            self_mask_shares={owner: state.shares[owner][1] for owner, kind in kinds.items() if kind == _SELF_MASK},
            mask_seed_shares={owner: state.shares[owner][0] for owner, kind in kinds.items() if kind == _MASK_SEED},
        )
