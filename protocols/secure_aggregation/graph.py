"""The SecAgg+ communication graph (Bell et al., "Secure Single-Server Aggregation with (Poly)Logarithmic
Overhead", CCS 2020, Sec. 3 and their implementation's choice of graph): a Harary graph ``H(n, K)`` over the
round's participants under a uniformly random relabelling drawn from public randomness.

``H(n, K)`` places the ``n`` nodes on a circle and joins each to the ``K // 2`` nearest on either side; for odd
``K`` (then ``n`` is even) also to the node opposite. It is ``K``-regular and ``K``-connected. A ``K``-regular
graph needs ``n * K`` even, so an odd ``K`` with odd ``n`` becomes ``K + 1`` ([`harary_degree`][privsilo.protocols.secure_aggregation.graph.harary_degree]).

The relabelling is a Fisher-Yates shuffle of the sorted participant ids driven by the SHAKE-256 stream of
``(seed, round_index)``. The seed is the hash of every key advertised in the round (``signatures.graph_seed``):
it exists only once the round's fresh keys do, so nobody knows a round's graph before then, and anyone who sees
the keys, the round and the participants can recompute every silo's neighbours. Its guarantees
(``parameters.py``) hold for corrupt silos chosen without knowledge of the graph.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Iterable

from privsilo.protocols.crypto_random import CryptoRandom

GRAPH_LABEL = b"privsilo secagg+ harary relabelling v1"


def harary_degree(n: int, degree: int) -> int:
    """The degree of the graph built for ``degree`` on ``n`` nodes: ``degree``, or ``degree + 1`` when both are
    odd (no odd-degree regular graph has an odd number of nodes); at most ``n - 1`` (complete)."""
    if not 1 <= degree:
        raise ValueError(f"the degree must be >= 1, got {degree}")
    return min(degree + (n * degree) % 2, n - 1)


def harary_positions(position: int, *, n: int, degree: int) -> tuple[int, ...]:
    """The neighbours of ``position`` in ``H(n, degree)`` (``degree`` as [`harary_degree`][privsilo.protocols.secure_aggregation.graph.harary_degree] returns it)."""
    offsets = {j for k in range(1, degree // 2 + 1) for j in (k, -k)}
    if degree % 2:
        offsets.add(n // 2)
    return tuple(sorted((position + offset) % n for offset in offsets))


def public_permutation(n: int, *, seed: int, round_index: int) -> list[int]:
    """A uniformly random permutation of ``range(n)`` drawn from the seed and the round (Fisher-Yates)."""
    if not 0 <= seed < 2**256:
        raise ValueError(f"seed must be an int in [0, 2^256), got {seed!r}")
    prefix = GRAPH_LABEL + seed.to_bytes(32, "big") + round_index.to_bytes(12, "big") + n.to_bytes(8, "big")
    counter = iter(range(2**63))

    def stream(count: int) -> bytes:
        return hashlib.shake_256(prefix + next(counter).to_bytes(8, "big")).digest(count)

    draw = CryptoRandom(stream)
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = draw.randbelow(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def round_graph(
    participants: Iterable[int], *, degree: int | None, seed: int, round_index: int
) -> dict[int, tuple[int, ...]]:
    """Every participant's neighbours (sorted ids) in round ``round_index``: the complete graph for ``degree``
    ``None`` (or ``>= n - 1``), else ``H(n, harary_degree(n, degree))`` relabelled by [`public_permutation`][privsilo.protocols.secure_aggregation.graph.public_permutation].
    The answer is shared between callers in a process (many silos of a worker ask for the same graph): read only."""
    return _round_graph(tuple(sorted(participants)), degree, seed, round_index)


@lru_cache(maxsize=8)
def _round_graph(ids: tuple[int, ...], degree: int | None, seed: int, round_index: int) -> dict[int, tuple[int, ...]]:
    n = len(ids)
    if degree is None or harary_degree(n, degree) >= n - 1:
        return {silo: tuple(peer for peer in ids if peer != silo) for silo in ids}
    degree = harary_degree(n, degree)
    order = public_permutation(n, seed=seed, round_index=round_index)
    silo_at = [ids[index] for index in order]
    return {
        silo_at[position]: tuple(sorted(silo_at[q] for q in harary_positions(position, n=n, degree=degree)))
        for position in range(n)
    }


def connected(nodes: frozenset[int], graph: dict[int, tuple[int, ...]]) -> bool:
    """Whether ``nodes`` induce a connected subgraph of ``graph``, a graph of [`round_graph`][privsilo.protocols.secure_aggregation.graph.round_graph]. The
    uploaders' pairwise masks hide each upload only inside the group the graph connects it to, so unmasking
    uploaders that are split into groups would reveal each group's sum (Bell et al. Sec. 3).

    ``H(n, K)`` is ``K``-connected (Harary, "The maximum connectivity of a graph", PNAS 1962), as is the complete
    graph (``K = n - 1``): without fewer than ``K`` of its nodes it stays connected, so only a larger removal
    takes the breadth-first search (over set intersections, one per node reached)."""
    if not nodes:
        return True
    degree = min(map(len, graph.values()))
    if nodes <= graph.keys() and len(graph) - len(nodes) < degree:
        return True
    start = min(nodes)
    unseen, frontier = set(nodes) - {start}, [start]
    while frontier and unseen:
        reached = unseen.intersection(graph[frontier.pop()])
        unseen -= reached
        frontier.extend(reached)
    return not unseen
