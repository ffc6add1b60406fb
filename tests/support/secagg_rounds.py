"""Secure aggregation rounds in process (no Ray), driven by the engine's round loop from ``privsilo.protocols.base``."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from privsilo.protocols.base import RoundAbandoned
from privsilo.protocols.crypto_random import seeded_for_tests
from privsilo.protocols.fixed_point import FixedPointCodec
from privsilo.protocols.secure_aggregation import NeighbourKeys, SecAggServer, SecAggSilo, SecAggStage


@dataclass
class Round:
    """One round's outcome: the sum (or the ``RoundAbandoned``), and every message the server received."""

    total: np.ndarray | None
    abandoned: RoundAbandoned | None
    uploaders: tuple[int, ...]
    view: dict[str, dict[int, object]] = field(default_factory=dict)


def federation(n: int, *, neighbours="all", threshold=None, seed: int = 0, codec: FixedPointCodec | None = None,
               **settings):
    """``n`` silos (deterministic test randomness from ``seed``) and their server; with ``server="may_lie"`` the
    set-up stages (identity registration) have run."""
    codec = codec or FixedPointCodec(max_summands=max(n, 2))
    silos = {
        i: SecAggSilo(i, codec=codec, neighbours=neighbours, threshold=threshold,
                      random=seeded_for_tests(1000 * seed + i), **settings)
        for i in range(n)
    }
    server = SecAggServer(codec=codec, neighbours=neighbours, threshold=threshold, **settings)
    inbound: dict[int, object] = {}
    for stage in server.setup_stages:
        inbound = server.relay(stage, {i: silo.setup_reply(stage, inbound.get(i)) for i, silo in silos.items()})
    return silos, server


def through_keys(silos, server, round_index: int = 0) -> dict[int, NeighbourKeys]:
    """Round ``round_index`` up to the server's answer to ``ADVERTISE_KEYS`` (with ``COMMIT_KEYS`` first when the
    silos assume a server that may lie), every silo present."""
    server.begin_round(round_index=round_index, participants=tuple(sorted(silos)))
    inbound: dict[int, object] = {}
    for stage in server.round_stages[:server.round_stages.index(SecAggStage.ADVERTISE_KEYS) + 1]:
        inbound = dict(server.round_relay(stage, {i: s.round_reply(stage, inbound.get(i), round_index=round_index)
                                                  for i, s in silos.items()}, round_index=round_index))
    return inbound


def run_round(silos, server, vectors, *, round_index: int, drops: dict[int, str] | None = None) -> Round:
    """The engine's round loop (privsilo.protocols.base), with silo ``i`` vanishing before step ``drops[i]``."""
    drops = drops or {}
    participants = tuple(sorted(vectors))
    alive = set(participants)
    view: dict[str, dict[int, object]] = {}

    def vanish(step: str) -> None:
        alive.difference_update(i for i, at in drops.items() if at == step)

    try:
        server.begin_round(round_index=round_index, participants=participants)
        inbound: dict[int, object] = {}
        for stage in server.round_stages:
            vanish(stage.name)
            replies = {i: silos[i].round_reply(stage, inbound.get(i), round_index=round_index) for i in sorted(alive)}
            view[stage.name] = replies
            inbound = dict(server.round_relay(stage, replies, round_index=round_index))
        vanish("protect")
        messages = {i: silos[i].protect(vectors[i], round_index=round_index, participants=participants) for i in sorted(alive)}
        view["protect"] = messages
        requests = server.unmask_requests(messages, round_index=round_index)
        vanish("unmask")
        replies = {i: silos[i].unmask_reply(requests[i], round_index=round_index) for i in requests if i in alive}
        while requests := server.unmask_follow_up(replies, round_index=round_index):  # the consistency round
            view["consistency"] = replies
            replies = {i: silos[i].unmask_reply(requests[i], round_index=round_index) for i in requests if i in alive}
        view["unmask"] = replies
        total = server.combine(messages, round_index=round_index, participants=tuple(sorted(messages)), unmasking=replies)
    except RoundAbandoned as abandoned:
        return Round(None, abandoned, tuple(sorted(view.get("protect", {}))), view)
    return Round(total, None, server.summed if isinstance(server, SecAggServer) else tuple(sorted(messages)), view)


def random_vectors(n: int, rng: np.random.Generator, length: int = 40) -> dict[int, np.ndarray]:
    """One vector of ``length`` normal values (scale 100) per silo ``0..n-1``."""
    return {i: rng.normal(scale=100.0, size=length) for i in range(n)}
