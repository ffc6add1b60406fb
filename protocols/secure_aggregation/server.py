"""Server side of secure aggregation with dropout recovery (Bonawitz et al., CCS 2017, Fig. 4) on the SecAgg+
graph (Bell et al., CCS 2020): per round, draws the graph from the round's keys, relays keys and encrypted shares
to neighbours only, (with silos that assume it may lie) runs the consistency round, asks the uploaders for
exactly one kind of share of each silo, and removes the masks."""
from __future__ import annotations

import collections
import enum
import itertools
from dataclasses import dataclass, field
from typing import ClassVar, Collection, Mapping

import numpy as np
from privsilo.protocols.base import (
    ProtocolStateError,
    RoundAbandoned,
    ServerProtocol,
    check_participants,
    check_round_index,
    collect_round_messages,
)
from privsilo.protocols.fixed_point import EncodingOverflowError, FixedPointCodec
from privsilo.protocols.secure_aggregation.graph import connected, round_graph
from privsilo.protocols.secure_aggregation.limits import check_count, check_minimum
from privsilo.protocols.secure_aggregation.masks import derive_pairwise_key, mask_sum, self_mask_key
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
    RoundRoster,
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
    Share,
    consistent,
    mask_private_key,
    public_bytes,
    recover,
    valid_public_key,
)
from privsilo.protocols.secure_aggregation.signatures import (
    advertisement_message,
    commitment_message,
    graph_seed,
    key_digest,
    list_digest,
    uploaders_message,
    valid_signers,
    verified,
)


@dataclass
class _Round:
    """The server's record of one round: the graph and who is still present after each step (Bonawitz et al.'s
    ``U1 ⊇ U2 ⊇ U3``), as plain data (picklable)."""

    round_index: int
    participants: tuple[int, ...]
    parameters: RoundParameters
    graph: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Drawn once the keys are advertised (``signatures.graph_seed``)."""
    next_step: str = SecAggStage.ADVERTISE_KEYS.name
    commitments: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    """When the silos assume it may lie: every valid commitment to round keys, by silo (``COMMIT_KEYS``)."""
    listed: bytes = b""
    seed: int = 0
    keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    """The advertised public keys (mask, channel), by silo: ``U1``."""
    shared: frozenset[int] = frozenset()
    uploaded: frozenset[int] = frozenset()
    """The uploaders whose sum the round returns (when the silos assume it may lie: those that signed ``U``)."""
    malformed: frozenset[int] = frozenset()
    """The silos whose upload was malformed (they count as dropped)."""
    claimed: frozenset[int] = frozenset()
    """When the silos assume it may lie: the uploaders ``U`` it told them of."""
    requests: dict[int, UnmaskRequest] = field(default_factory=dict)
    holders: dict[int, frozenset[int]] = field(default_factory=dict)
    """Each silo's share set among ``shared``, worked out on first use (``share_set`` without ``among``)."""

    def share_set(self, silo_id: int, among: Collection[int] | None = None) -> frozenset[int]:
        """Silo ``silo_id`` and its neighbours in ``among`` (default: those that shared, ``U2``): after
        ``SHARE_KEYS``, who holds its shares."""
        if among is None:
            if silo_id not in self.holders:
                self.holders[silo_id] = self.share_set(silo_id, self.shared)
            return self.holders[silo_id]
        return frozenset(filter(among.__contains__, self.graph[silo_id])) | {silo_id}


SEARCHED_SUBSETS = 256
"""How many ``t``-subsets of a seed's shares the server tries when the shares disagree."""


def _rebuild(held: list[tuple[int, Share]], *, threshold: int, owner: int, kind: str, round_index: int,
             matches=lambda secret: True) -> bytes:
    """The seed behind ``held`` (``(holder, share)`` pairs): from the first ``threshold`` shares when every surplus
    share lies on their polynomial and the secret ``matches`` (a mask seed: its public key); else from a subset
    of ``threshold`` shares whose polynomial holds a majority beyond unique decoding (with ``m`` shares, all but
    ``(m - t) // 2``) and whose secret matches, searched over up to ``SEARCHED_SUBSETS`` subsets. Raises
    ``RoundAbandoned`` naming the holders whose shares disagree when none is found: a wrong share never becomes a
    wrong sum."""
    shares = [share for _, share in held]
    needed = len(held) - (len(held) - threshold) // 2
    for chosen in itertools.islice(itertools.combinations(range(len(held)), threshold), SEARCHED_SUBSETS):
        ordered = [shares[i] for i in chosen] + [shares[i] for i in range(len(held)) if i not in chosen]
        try:
            secret = recover(ordered, threshold=threshold)
        except ValueError:
            continue
        flags = consistent(ordered, threshold=threshold)
        if sum(flags) >= needed and matches(secret):
            return secret
    agreeing = consistent(shares, threshold=threshold)
    suspects = sorted(holder for (holder, _), ok in zip(held, agreeing) if not ok) or sorted(holder for holder, _ in held)
    raise RoundAbandoned(
        f"round {round_index}: the shares of silo {owner}'s {kind} seed do not fit together; suspect share holders "
        f"{suspects[:10]} (a protocol fault: the round is abandoned rather than unmasked wrongly)"
    )


class SecAggServer(ServerProtocol):
    """Server side (see the package docstring). ``neighbours``, ``threshold``, ``corrupt_fraction``,
    ``dropout_rate``, ``federation`` and ``server`` must match the silos'. With ``server="may_lie"`` the silos
    register identity keys at set-up (``setup_stages``), every round starts with ``COMMIT_KEYS`` and unmasking
    takes the two consistency exchanges (``unmask_follow_up``); the server here follows the protocol either way.
    ``summed`` names the silos the last ``combine`` summed. A silo whose keys, shares, upload, signatures or replies
    are malformed counts as dropped (``left_out`` names it, with why); no single silo ends a run (with ``may_lie``,
    a committed silo that reveals no valid keys ends the round, named)."""

    setup_stages: tuple[enum.Enum, ...] = ()
    survives_missing_uploads: ClassVar[bool] = True
    round_stages: tuple[enum.Enum, ...] = tuple(stage for stage in SecAggStage if stage is not SecAggStage.COMMIT_KEYS)
    """``COMMIT_KEYS`` first only when the silos assume a server that may lie."""

    def __init__(
        self,
        *,
        codec: FixedPointCodec,
        min_participants: int = 2,
        threshold: int | None = None,
        neighbours: Neighbours = "all",
        corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
        dropout_rate: float = DEFAULT_DROPOUT_RATE,
        federation: int | None = None,
        server: ServerModel = "honest_but_curious",
    ) -> None:
        check_minimum(min_participants, codec)
        self.codec = codec
        self.min_participants = min_participants
        self.settings = GraphSettings(neighbours, threshold, corrupt_fraction, dropout_rate, federation, server)
        self.may_lie = server == "may_lie"
        self.setup_stages = tuple(SecAggSetupStage) if self.may_lie else ()
        if self.may_lie:
            self.round_stages = tuple(SecAggStage)
        self.registry: dict[int, bytes] = {}
        self.summed: tuple[int, ...] = ()
        """The silos whose vectors the last ``combine`` summed."""
        self.left_out: dict[int, str] = {}
        """The silos the current (or last) round counted as dropped for a malformed message, each with why."""
        self._round: _Round | None = None
        self._last_round: int | None = None

    def __getstate__(self) -> dict:
        # The server's snapshot (checkpoints) is taken between rounds and never carries a round's public keys,
        # relayed shares or rebuilt seeds; the next round starts afresh.
        return {**self.__dict__, "_round": None}

    def relay(self, stage: enum.Enum, inbound: Mapping[int, object]) -> Mapping[int, object]:
        """Only when the silos assume a server that may lie: after ``REGISTER``, send every silo the registry of
        identity keys; after ``LEARN_IDENTITIES``, nothing. Round keys are agreed every round."""
        if not self.may_lie:
            raise ProtocolStateError(f"secure aggregation has no setup stages with an honest-but-curious server, got {stage!r}")
        if stage is SecAggSetupStage.REGISTER:
            for silo_id, message in inbound.items():
                if not isinstance(message, IdentityKey) or message.sender != silo_id or len(message.public_key) != 32:
                    raise ProtocolStateError(f"server: silo {silo_id} did not register its own identity key")
            self.registry = {silo_id: message.public_key for silo_id, message in sorted(inbound.items())}
            registry = IdentityRegistry(keys=self.registry)
            return {silo_id: registry for silo_id in inbound}
        if stage is SecAggSetupStage.LEARN_IDENTITIES and self.registry:
            return {}
        raise ProtocolStateError(f"server: set-up stage {stage!r} out of order")

    def begin_round(self, *, round_index: int, participants: tuple[int, ...]) -> None:
        """Resolve the round's graph degree and threshold (the graph itself is drawn from the round's keys).
        Raises ``RoundAbandoned`` when the settings give no safe threshold for this many participants,
        ``ProtocolStateError`` for a round below ``min_participants``."""
        check_round_index(round_index)
        check_participants(participants)
        if self._last_round is not None and round_index <= self._last_round:
            raise ProtocolStateError(f"server: round {round_index} is not after round {self._last_round}")
        check_count(len(participants), min_participants=self.min_participants, codec=self.codec, who="server")
        self._last_round = round_index
        self._round, self.left_out = None, {}
        try:
            parameters = self.settings.for_round(len(participants))
        except ValueError as error:
            raise RoundAbandoned(f"round {round_index}: {error}") from None
        state = _Round(round_index, tuple(sorted(participants)), parameters)
        state.next_step = self.round_stages[0].name
        self._round = state

    def _current(self, round_index: int, step: str) -> _Round:
        state = self._round
        if state is None or state.round_index != round_index or state.next_step != step:
            where = "no round" if state is None else f"round {state.round_index} at {state.next_step}"
            raise ProtocolStateError(f"server: got {step} for round {round_index}, but is in {where}")
        return state

    def round_relay(self, stage: enum.Enum, inbound: Mapping[int, object], *, round_index: int) -> Mapping[int, object]:
        """``ADVERTISE_KEYS``: send each silo its neighbours' keys (``NeighbourKeys``). ``SHARE_KEYS``: send each
        silo the ciphertexts addressed to it (``ShareBundle``). ``COLLECT_SHARES``: nothing (``{}``). Raises
        ``RoundAbandoned`` as soon as some silo keeps fewer than ``threshold`` share holders."""
        if not isinstance(stage, SecAggStage):
            raise ProtocolStateError(f"server: unknown stage {stage!r}")
        state = self._current(round_index, stage.name)
        inbound = {i: message for i, message in inbound.items() if message is not None or i in state.shared}
        present = set(inbound)  # a silo the server dropped (invalid keys) answers None and sits the round out
        if not present <= set(state.participants):
            raise ProtocolStateError(f"server: {stage.name} replies from non-participants {sorted(present - set(state.participants))}")
        if stage is SecAggStage.COMMIT_KEYS:
            return self._relay_commitments(state, inbound)
        if stage is SecAggStage.ADVERTISE_KEYS:
            return self._relay_keys(state, inbound)
        if stage is SecAggStage.SHARE_KEYS:
            return self._relay_shares(state, inbound)
        if any(reply is not None for reply in inbound.values()) or not present <= state.shared:
            raise ProtocolStateError(f"server: unexpected COLLECT_SHARES replies {dict(inbound)!r}")
        state.next_step = "unmask_requests"
        return {}

    def _relay_commitments(self, state: _Round, inbound: Mapping[int, object]) -> dict[int, CommitmentList]:
        """``COMMIT_KEYS``: keep every registered silo's signed commitment (a silo whose commitment is malformed or
        unsigned counts as dropped) and send every committer the one list of them."""
        state.commitments = {
            silo_id: (message.digest, message.signature) for silo_id, message in sorted(inbound.items())
            if isinstance(message, KeyCommitment) and (message.sender, message.round_index) == (silo_id, state.round_index)
            and verified(self.registry.get(silo_id, b""), commitment_message(state.round_index, silo_id, message.digest),
                         message.signature)
        }
        self._require_threshold(state, state.commitments.keys(), "committed", graph=False)
        listing = CommitmentList(round_index=state.round_index, participants=state.participants, commitments=state.commitments)
        state.listed = list_digest(state.round_index, state.participants, state.commitments)
        state.next_step = SecAggStage.ADVERTISE_KEYS.name
        return {silo_id: listing for silo_id in state.commitments}

    def _valid_advertisement(self, state: _Round, silo_id: int, message: object) -> bool:
        """Its own keys for this round, both of large order; when the silos assume a server that may lie, also
        matching its commitment and signed over the commitment list."""
        if not isinstance(message, RoundKeyAdvertisement) or (message.sender, message.round_index) != (silo_id, state.round_index):
            return False
        keys = (message.mask_public_key, message.channel_public_key)
        if not all(map(valid_public_key, keys)):
            return False
        return not self.may_lie or (
            key_digest(state.round_index, silo_id, *keys) == state.commitments.get(silo_id, (b"",))[0]
            and verified(self.registry.get(silo_id, b""), advertisement_message(state.round_index, silo_id, *keys, state.listed),
                         message.signature))

    def _relay_keys(self, state: _Round, inbound: Mapping[int, object]) -> dict[int, NeighbourKeys]:
        """``ADVERTISE_KEYS``: draw the round's graph and send every silo its neighbours' keys. A silo whose keys
        are invalid (e.g. of low order) counts as dropped; when the silos assume a server that may lie, a committed
        silo that reveals no keys or keys that fail their commitment ends the round instead, naming it (dropping it
        would let the server choose whose keys the graph seed hashes)."""
        valid = {silo_id for silo_id, message in inbound.items() if self._valid_advertisement(state, silo_id, message)}
        if self.may_lie and valid != state.commitments.keys():
            failed = sorted(state.commitments.keys() - valid)
            raise RoundAbandoned(f"round {state.round_index}: silos {failed[:10]} committed to round keys and did not "
                                 "reveal valid keys that match; the graph would depend on whose keys the server kept")
        self._leave_out(state, set(inbound) - valid, "advertised no valid round keys (e.g. of low order)")
        state.keys = {i: (inbound[i].mask_public_key, inbound[i].channel_public_key) for i in sorted(valid)}
        every_key = [key for pair in state.keys.values() for key in pair]
        if len(set(every_key)) != len(every_key):
            raise RoundAbandoned(f"round {state.round_index}: two advertised public keys are equal")
        state.seed = graph_seed(state.round_index, state.keys, state.listed)
        state.graph = round_graph(state.participants, degree=state.parameters.degree, seed=state.seed,
                                  round_index=state.round_index)
        self._require_threshold(state, state.keys.keys(), "advertised keys")
        state.next_step = SecAggStage.SHARE_KEYS.name
        roster = RoundRoster(round_index=state.round_index, participants=state.participants,
                             advertised={i: (*state.keys[i], inbound[i].signature) for i in state.keys}) if self.may_lie else None
        return {
            silo_id: NeighbourKeys(
                round_index=state.round_index, participants=len(state.participants),
                threshold=state.parameters.threshold,
                keys={peer: state.keys[peer] for peer in state.share_set(silo_id, state.keys)},
                roster=roster,
            )
            for silo_id in state.keys
        }

    def _relay_shares(self, state: _Round, inbound: Mapping[int, object]) -> dict[int, ShareBundle]:
        """``SHARE_KEYS``: relay each ciphertext to its addressee. A silo that advertised no keys or did not send
        shares for exactly its neighbours counts as dropped (it sits the round out), so no single silo stops it."""
        sent = set(inbound) & state.keys.keys()
        inbound = {
            silo_id: message for silo_id, message in inbound.items()
            if silo_id in state.keys and isinstance(message, EncryptedShares)
            and (message.sender, message.round_index) == (silo_id, state.round_index)
            and message.ciphertexts.keys() == state.share_set(silo_id, state.keys) - {silo_id}
        }
        self._leave_out(state, sent - set(inbound), "sent no encrypted shares for exactly its neighbours")
        state.shared, state.holders = frozenset(inbound), {}
        self._require_threshold(state, inbound.keys(), "shared")
        state.next_step = SecAggStage.COLLECT_SHARES.name
        return {
            silo_id: ShareBundle(
                round_index=state.round_index,
                ciphertexts={peer: inbound[peer].ciphertexts[silo_id] for peer in state.share_set(silo_id) - {silo_id}},
            )
            for silo_id in inbound
        }

    def _leave_out(self, state: _Round, silo_ids: Collection[int], why: str, *, dropped: bool = True) -> None:
        """Name in ``left_out`` the silos whose message the server could not use."""
        outcome = "it counts as dropped" if dropped else "its reply is ignored"
        self.left_out.update({i: f"round {state.round_index}: silo {i} {why}; {outcome}" for i in silo_ids})

    @staticmethod
    def _require_threshold(state: _Round, present: Collection[int], step: str, *, graph: bool = True) -> None:
        """Abandon the round if some silo of ``present`` has fewer than ``t`` share holders among ``present``
        (``graph=False``, before the graph is drawn: if fewer than ``t`` silos are present at all)."""
        threshold = state.parameters.threshold
        short = sorted(silo_id for silo_id in present
                       if (len(state.share_set(silo_id, present)) if graph else len(present)) < threshold)
        if short:
            raise RoundAbandoned(
                f"round {state.round_index}: after '{step}', silos {short[:10]} have fewer than {threshold} share "
                "holders left; their masks could never be removed"
            )

    def _masked_vectors(self, state: _Round, messages: Mapping[int, object]) -> tuple[MaskedVector, ...]:
        vectors = collect_round_messages(
            messages, message_type=MaskedVector, round_index=state.round_index, participants=tuple(sorted(messages))
        )
        length = vectors[0].data.shape
        for masked in vectors:
            if masked.data.dtype != np.uint64 or masked.data.ndim != 1 or masked.data.shape != length:
                raise ProtocolStateError(
                    f"round {state.round_index}: silo {masked.sender} sent {masked.data.dtype} data of shape "
                    f"{masked.data.shape}; expected flat uint64 of shape {length}"
                )
        return vectors

    def _well_formed(self, state: _Round, messages: Mapping[int, object]) -> dict[int, MaskedVector]:
        """The uploads of ``messages`` that are this round's flat ``uint64`` vectors from their sender, of the length
        most of them have. Every other upload counts as its sender's dropout (named in ``left_out``): it is left
        out of the sum like a silo that never uploaded, so no single silo ends the run. Raises ``RoundAbandoned``
        naming the silos when no length is held by more uploads than any other."""
        def fault(silo_id: int, message: object) -> str:
            if not isinstance(message, MaskedVector) or (message.sender, message.round_index) != (silo_id, state.round_index):
                return f"sent {type(message).__name__}, not its own MaskedVector for this round"
            data = message.data
            if not isinstance(data, np.ndarray) or data.dtype != np.uint64 or data.ndim != 1:
                kind = f"{data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
                return f"uploaded a {kind}, not a flat uint64 vector"
            return ""

        faults = {silo_id: fault(silo_id, message) for silo_id, message in messages.items()}
        typed = {silo_id: messages[silo_id] for silo_id, why in faults.items() if not why}
        lengths = sorted(collections.Counter(masked.data.size for masked in typed.values()).items(), key=lambda c: -c[1])
        if len(lengths) > 1 and lengths[0][1] == lengths[1][1]:
            raise RoundAbandoned(f"round {state.round_index}: the uploads disagree on the vector length with no "
                                 f"majority ({dict(lengths)}); silos {sorted(typed)[:10]}")
        for silo_id, masked in typed.items():
            if masked.data.size != lengths[0][0]:
                faults[silo_id] = f"uploaded {masked.data.size} words where the others uploaded {lengths[0][0]}"
        for silo_id, why in faults.items():
            if why:
                self._leave_out(state, {silo_id}, why)
        state.malformed = frozenset(silo_id for silo_id, why in faults.items() if why)
        return {silo_id: messages[silo_id] for silo_id, why in sorted(faults.items()) if not why}

    def _needed(self, state: _Round) -> tuple[dict[int, frozenset[int]], dict[int, frozenset[int]]]:
        """Whose self-mask seed (every uploader's) and whose mask seed (every silo that shared, did not upload,
        and has an uploading neighbour) the server needs, each with the uploaders that hold a share of it."""
        self_masks = {silo_id: state.share_set(silo_id) & state.uploaded for silo_id in state.uploaded}
        mask_seeds = {
            silo_id: state.share_set(silo_id) & state.uploaded
            for silo_id in state.shared - state.uploaded
            if state.share_set(silo_id) & state.uploaded
        }
        return self_masks, mask_seeds

    def unmask_requests(self, messages: Mapping[int, object], *, round_index: int) -> Mapping[int, object]:
        """Bonawitz et al. round 4's request to every uploader: which silos of its share set uploaded (when the
        silos assume a server that may lie: first the consistency check's claim, ``ConsistencyRequest``). A
        malformed upload counts as its sender's dropout (``_well_formed``). Raises
        ``RoundAbandoned`` (asking for nothing) when fewer than ``min_participants`` uploaded, some needed seed
        has fewer than ``threshold`` holders among the uploaders, or the graph does not connect the uploaders."""
        state = self._current(round_index, "unmask_requests")
        messages = {i: message for i, message in messages.items() if message is not None}  # silos that sat out
        if not set(messages) <= state.shared:
            raise ProtocolStateError(f"server: uploads from silos {sorted(set(messages) - state.shared)} that did not share")
        messages = self._well_formed(state, messages) if messages else messages
        if len(messages) < self.min_participants:
            raise RoundAbandoned(
                f"round {round_index}: {len(messages)} upload(s), below min_participants {self.min_participants}"
            )
        check_count(len(messages), min_participants=self.min_participants, codec=self.codec, who="server")
        self._settle_uploaders(state, frozenset(messages))
        if self.may_lie:  # Bonawitz et al.'s consistency check first: every uploader signs who uploaded
            state.claimed, state.next_step = state.uploaded, "consistency"
            claim = ConsistencyRequest(round_index=round_index, uploaded=tuple(sorted(state.uploaded)))
            return {silo_id: claim for silo_id in sorted(state.uploaded)}
        state.next_step = "combine"
        return dict(state.requests)

    def _settle_uploaders(self, state: _Round, uploaded: frozenset[int]) -> None:
        """Take ``uploaded`` as the round's uploaders and work out every silo's unmasking request; abandon the round
        if some needed seed has fewer than ``t`` holders among them, the graph does not connect them or (silos
        that assume a server that may lie) more than ``d`` of the round's silos are missing: they would refuse."""
        round_index, threshold = state.round_index, state.parameters.threshold
        state.uploaded = uploaded
        for kind, needed in zip(("self-mask", "mask"), self._needed(state)):
            short = sorted(silo_id for silo_id, holders in needed.items() if len(holders) < threshold)
            if short:
                raise RoundAbandoned(
                    f"round {round_index}: the {kind} seeds of silos {short[:10]} have fewer than {threshold} holders "
                    "among the uploaders"
                )
        if not connected(state.uploaded, state.graph):
            raise RoundAbandoned(
                f"round {round_index}: the graph does not connect the uploaders; unmasking them would reveal the sum "
                "of each group they split into"
            )
        lost, allowed = len(state.participants) - len(uploaded), dropped_silos(len(state.participants), self.settings.dropout_rate)
        if self.may_lie and lost > allowed:  # the silos would refuse to sign (silo.py)
            raise RoundAbandoned(
                f"round {round_index}: {lost} of {len(state.participants)} silos did not upload (or sign), more than "
                f"protocol.dropout_rate = {self.settings.dropout_rate} allows ({allowed}) when the server may lie"
            )
        state.requests = {
            silo_id: UnmaskRequest(
                round_index=round_index, uploaded=tuple(sorted(state.share_set(silo_id) & state.uploaded)),
                uploaders=len(state.uploaded),
            )
            for silo_id in sorted(state.uploaded)
        }

    def _signatures(self, state: _Round, replies: Mapping[int, object], message: bytes, among: frozenset[int]) -> dict[int, bytes]:
        """The valid signatures of ``message`` among ``replies`` by members of ``among`` (any other reply: unsigned)."""
        signatures = {i: reply.signature for i, reply in replies.items() if i in among and isinstance(reply, ConsistencySignature)
                      and (reply.sender, reply.round_index) == (i, state.round_index)}
        return {i: signatures[i] for i in sorted(valid_signers(self.registry, message, signatures))}

    def unmask_follow_up(self, replies: Mapping[int, object], *, round_index: int) -> Mapping[int, object]:
        """The consistency check's next exchanges (silos that assume a server that may lie). After the signatures
        of ``U``: the signers are the uploaders ``U'`` (an uploader that did not sign counts as dropped); send every
        signer all of them (``SignedUploaders``). After the signatures of ``U'``: ask every signer to unmask, with
        all of them (``ConfirmedUploaders``). Raises ``RoundAbandoned`` when ``U'`` is not one the silos accept or
        some needed seed has fewer than ``threshold`` signing holders. After the shares: nothing more (``{}``)."""
        step = None if self._round is None else self._round.next_step
        if step not in ("consistency", "confirm"):
            return {}
        state = self._current(round_index, step)
        if step == "consistency":
            signed = self._signatures(state, replies, uploaders_message(round_index, state.claimed, seed=state.seed),
                                      state.claimed)
            self._settle_uploaders(state, frozenset(signed))
            state.next_step = "confirm"
            request = SignedUploaders(round_index=round_index, signatures=signed)
            return {silo_id: request for silo_id in signed}
        message = uploaders_message(round_index, state.uploaded, seed=state.seed, signers=True)
        confirmed = self._signatures(state, replies, message, state.uploaded)
        needed = {owner for kind in self._needed(state) for owner in kind}
        short = sorted(owner for owner in needed if len(state.share_set(owner) & confirmed.keys()) < state.parameters.threshold)
        if short:
            raise RoundAbandoned(
                f"round {round_index}: fewer than {state.parameters.threshold} share holders of silos {short[:10]} "
                "signed the uploaders; no silo would unmask"
            )
        state.requests = {i: request for i, request in state.requests.items() if i in confirmed}
        state.next_step = "combine"
        request = ConfirmedUploaders(round_index=round_index, signatures=confirmed)
        return {silo_id: request for silo_id in confirmed}

    def _collect_shares(
        self, state: _Round, unmasking: Mapping[int, object]
    ) -> tuple[dict[int, list[tuple[int, Share]]], dict[int, list[tuple[int, Share]]]]:
        self_masks: dict[int, list[tuple[int, Share]]] = {}
        mask_seeds: dict[int, list[tuple[int, Share]]] = {}
        for silo_id, reply in unmasking.items():
            request = state.requests.get(silo_id)
            if request is None:
                raise ProtocolStateError(f"server: an unmasking reply from silo {silo_id}, which was not asked")
            uploaded = set(request.uploaded)
            if (
                not isinstance(reply, UnmaskReply)
                or (reply.sender, reply.round_index) != (silo_id, state.round_index)
                or reply.self_mask_shares.keys() != uploaded
                or reply.mask_seed_shares.keys() != state.share_set(silo_id) - uploaded
            ):  # a reply that does not answer its request counts as no answer (too few: abandoned)
                self._leave_out(state, {silo_id}, "sent an unmasking reply that does not answer its request", dropped=False)
                continue
            for owner, share in reply.self_mask_shares.items():
                self_masks.setdefault(owner, []).append((silo_id, share))
            for owner, share in reply.mask_seed_shares.items():
                mask_seeds.setdefault(owner, []).append((silo_id, share))
        return self_masks, mask_seeds

    def combine(
        self,
        messages: Mapping[int, object],
        *,
        round_index: int,
        participants: tuple[int, ...],
        unmasking: Mapping[int, object] | None = None,
    ) -> np.ndarray:
        """Bonawitz et al. round 4: reconstruct every uploader's self-mask seed and every needed dropped silo's
        mask seed from ``threshold`` shares each, remove the masks, decode the sum of the uploaders' vectors.

        When the silos assume a server that may lie, ``messages`` may hold uploads of silos that did not sign the
        consistency check's claim: they count as dropped and are left out; ``summed`` names the silos whose vectors
        the sum holds.

        Raises ``RoundAbandoned`` when some needed seed has fewer than ``threshold`` shares (never a wrong sum),
        ``EncodingOverflowError`` if the decoded sum is out of range (an unchecked encoding)."""
        state = self._current(round_index, "combine")
        messages = {i: message for i, message in messages.items() if message is not None and i not in state.malformed}
        participants = tuple(i for i in participants if i in messages)  # without those that sat out or were left out
        uploads = set(messages) if not self.may_lie else set(messages) & state.uploaded
        if set(participants) != set(messages) or uploads != state.uploaded or not set(messages) <= state.shared:
            raise ProtocolStateError(
                f"server: combine for {sorted(participants)} with uploads {sorted(messages)}, "
                f"but the requests went to {sorted(state.uploaded)}"
            )
        vectors = self._masked_vectors(state, {i: messages[i] for i in sorted(state.uploaded)})
        self_mask_shares, mask_seed_shares = self._collect_shares(state, unmasking or {})
        threshold = state.parameters.threshold
        self_masks, mask_seeds = self._needed(state)
        for kind, needed, shares in (("self-mask", self_masks, self_mask_shares), ("mask", mask_seeds, mask_seed_shares)):
            short = sorted(silo_id for silo_id in needed if len(shares.get(silo_id, ())) < threshold)
            if short:
                raise RoundAbandoned(
                    f"round {round_index}: fewer than {threshold} shares of the {kind} seeds of silos {short[:10]} arrived"
                )
        total = np.zeros(vectors[0].data.shape, dtype=np.uint64)
        for masked in vectors:
            total += masked.data
        self_mask_keys = [
            self_mask_key(_rebuild(self_mask_shares[silo_id], threshold=threshold, owner=silo_id, kind="self-mask",
                                   round_index=round_index), silo_id=silo_id, round_index=round_index)
            for silo_id in sorted(self_masks)
        ]
        plus, minus = [], []  # the pairwise masks between uploaders and silos that shared but did not upload
        for dropped in sorted(mask_seeds):
            def matches(seed: bytes, owner: int = dropped) -> bool:
                return public_bytes(mask_private_key(seed, silo_id=owner, round_index=round_index)) == state.keys[owner][0]

            seed = _rebuild(mask_seed_shares[dropped], threshold=threshold, owner=dropped, kind="mask",
                            round_index=round_index, matches=matches)
            private_key = mask_private_key(seed, silo_id=dropped, round_index=round_index)
            for peer in sorted(mask_seeds[dropped]):  # uploaders that masked with the dropped silo
                key = derive_pairwise_key(private_key=private_key, peer_public_key=state.keys[peer][0],
                                          own_id=dropped, peer_id=peer)
                (minus if peer < dropped else plus).append(key)
        total += mask_sum(plus, minus + self_mask_keys, round_index=round_index, length=total.size)
        self._round, self.summed = None, tuple(sorted(state.uploaded))
        try:
            return self.codec.decode(total, summands=len(vectors))
        except EncodingOverflowError as error:  # in-range encodings of <= max_summands silos never overflow
            raise RoundAbandoned(
                f"round {round_index}: the unmasked sum is out of range ({error}): a silo uploaded a vector it did not "
                "encode within the codec's range, or a share holder sent a wrong share; a protocol fault, so the round "
                "is abandoned (protocol.fractional_bits is not the cause)"
            ) from None
