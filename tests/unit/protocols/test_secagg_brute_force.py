"""The ``may_lie`` failure bound of secure aggregation (``protocols/secure_aggregation/parameters.py``) against a
brute-force adversary on small graphs.

Every silo is in the round (``N = n``); the coalition is ``C = ceil(gamma n)`` silos and the graph's relabelling
is uniform, so the coalition sits on a uniformly random ``C``-subset of the positions of ``H(n, K)``: every
subset is enumerated, and for each one every strategy of the server that the silos' checks leave open
(``silo.py``) is searched:

* Exposing an honest silo ``v``: the server tells each honest silo a set of uploaders; a holder of ``v``'s shares
  reveals its share of ``b_v`` if ``v`` is in the set it signed, of ``s_v`` otherwise, and only once, for every
  silo ``w`` whose shares it holds, ``t`` of ``w``'s holders signed that same set (corrupt silos sign anything).
  ``v`` is exposed when corrupt and revealed shares reach ``t`` of both kinds. The search covers every split of
  the honest silos between "everybody uploaded" and "all but ``v`` did" (both sets a silo signs: at most ``d``
  missing and connected). Stories are not every strategy: a server that also withholds shares or forwards
  different signatures is searched in ``tests/unit/protocols/test_secagg_adversary.py``.
* Splitting the honest uploaders: the server places up to ``d`` dropouts among the honest silos (every placement
  is tried); it wins when the honest silos left are disconnected once the corrupt ones are removed, while the
  claimed uploaders (everybody but the placed dropouts) stay connected, as the silos require.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from privsilo.protocols.secure_aggregation.graph import connected, harary_positions, round_graph
from privsilo.protocols.secure_aggregation.parameters import (
    corrupt_silos,
    dropped_silos,
    exposure_threshold,
    failure_bounds,
    hypergeometric_tail,
)
from tests.support.secagg_adversary import reaches_all


def _exposes(victim: int, corrupt: set[int], neighbours: dict[int, set[int]], threshold: int, dropped: int) -> bool:
    """Whether some split of the honest silos between the two stories makes the holders of ``victim``'s shares
    reveal ``threshold`` shares of each kind (corrupt holders give both). A silo signs "all but the victim" only
    if ``dropped >= 1`` and those silos are connected; without it every honest silo signs "everybody"."""
    n = len(neighbours)
    holders = {w: neighbours[w] | {w} for w in range(n)}
    splittable = dropped >= 1 and reaches_all(set(range(n)) - {victim}, neighbours)
    others = [h for h in range(n) if h not in corrupt and h != victim] if splittable else []
    corrupt_holders = len(holders[victim] & corrupt)
    for told_it_dropped in itertools.product((False, True), repeat=len(others)):
        # True: "all but the victim uploaded"; False: "everybody did"
        stories = {**{h: False for h in range(n) if h not in corrupt}, **dict(zip(others, told_it_dropped))}
        revealed = {False: 0, True: 0}
        for holder in holders[victim] - corrupt:
            signers = {h for h, story in stories.items() if story == stories[holder]} | corrupt
            if all(len(holders[w] & signers) >= threshold for w in holders[holder]):
                revealed[stories[holder]] += 1
        if min(revealed.values()) + corrupt_holders >= threshold:
            return True
    return False


def _splits(corrupt: set[int], neighbours: dict[int, set[int]], dropped: int) -> bool:
    """Whether up to ``dropped`` placed dropouts disconnect the honest silos (the claimed uploaders connected)."""
    everyone = set(neighbours)
    honest = everyone - corrupt
    for size in range(dropped + 1):
        for placed in itertools.combinations(sorted(honest), size):
            if reaches_all(everyone - set(placed), neighbours) and not reaches_all(honest - set(placed), neighbours):
                return True
    return False


def brute_force_failure_rate(n: int, degree: int, threshold: int, corrupt: int, dropped: int) -> float:
    """The fraction of coalition placements on ``H(n, degree)`` in which some strategy of a lying server exposes
    an honest silo or splits the honest uploaders."""
    neighbours = {p: set(harary_positions(p, n=n, degree=degree)) for p in range(n)}
    wins = 0
    placements = list(itertools.combinations(range(n), corrupt))
    for placement in placements:
        bad = set(placement)
        wins += _splits(bad, neighbours, dropped) or any(
            _exposes(v, bad, neighbours, threshold, dropped) for v in range(n) if v not in bad)
    return wins / len(placements)


@pytest.mark.parametrize(("n", "degree", "threshold", "corrupt_fraction", "dropout_rate"), [
    (8, 4, 3, 0.25, 0.125),   # s = 5, 2t - s = 1: one corrupt neighbour of a silo lets the split through
    (8, 4, 4, 0.25, 0.125),   # 2t - s = 3
    (9, 4, 3, 0.2, 0.2),      # two dropouts placed by the server
    (10, 6, 4, 0.2, 0.1),     # s = 7, 2t - s = 1
    (10, 6, 5, 0.2, 0.1),     # 2t - s = 3
    (6, 5, 4, 0.34, 0.17),    # the complete graph: s = 6, 2t - s = 2
])
def test_the_may_lie_bound_is_never_below_a_brute_force_adversary(n, degree, threshold, corrupt_fraction, dropout_rate) -> None:
    corrupt, dropped = corrupt_silos(n, corrupt_fraction), dropped_silos(n, dropout_rate)
    bound = failure_bounds(n, degree=degree if degree < n - 1 else None, threshold=threshold,
                           corrupt_fraction=corrupt_fraction, dropout_rate=dropout_rate, server="may_lie").security
    worst = brute_force_failure_rate(n, degree, threshold, corrupt, dropped)
    assert worst <= bound, (worst, bound)


def test_the_brute_force_adversary_wins_where_it_can() -> None:
    """The search is not vacuous: with one corrupt neighbour enough (2t - s = 1) it exposes silos for some
    placements, with a threshold of the whole share set it never does, and an honest-but-curious threshold
    (2t <= s) falls to the split with no corrupt silo at all."""
    assert brute_force_failure_rate(8, 4, 3, corrupt=2, dropped=1) > 0
    assert brute_force_failure_rate(8, 4, 5, corrupt=1, dropped=0) == 0
    neighbours = {p: set(harary_positions(p, n=8, degree=4)) for p in range(8)}
    assert _exposes(0, set(), neighbours, threshold=2, dropped=1)
    assert not _exposes(0, set(), neighbours, threshold=3, dropped=1) and not _exposes(0, set(), neighbours, threshold=2, dropped=0)


@pytest.mark.parametrize(("n", "degree", "threshold", "corrupt"), [(8, 4, 3, 2), (8, 4, 4, 3), (10, 6, 4, 2), (10, 6, 5, 3), (12, 4, 4, 3)])
def test_one_silos_exposure_never_exceeds_its_hypergeometric_term(n, degree, threshold, corrupt) -> None:
    """The union bound's term for one honest silo, ``P[Hyp(n - 1, C, K) >= 2t - s]``, against the brute-force
    adversary's rate of exposing silo 0 over every placement of the coalition among the other silos (one
    placed dropout allowed, so the server can tell stories apart): a sharper check than the whole bound, which
    small graphs push to 1."""
    neighbours = {p: set(harary_positions(p, n=n, degree=degree)) for p in range(n)}
    placements = list(itertools.combinations(range(1, n), corrupt))
    exposed = sum(_exposes(0, set(bad), neighbours, threshold, dropped=1) for bad in placements) / len(placements)
    term = hypergeometric_tail(n - 1, corrupt, degree, exposure_threshold(threshold, degree + 1, "may_lie"))
    assert exposed <= term, (exposed, term)


@pytest.mark.parametrize(("n", "degree"), [(12, 4), (15, 6), (16, 5), (9, 8)])
def test_connected_agrees_with_a_plain_search_whatever_is_removed(n, degree) -> None:
    """``graph.connected`` skips the search when fewer than K silos are missing (Harary graphs are K-connected);
    on any removal it answers as a plain search does."""
    graph = round_graph(range(100, 100 + n), degree=degree, seed=7, round_index=3)
    neighbours = {silo: set(peers) for silo, peers in graph.items()}
    rng = np.random.default_rng(n)
    for kept_count in range(n + 1):
        for _ in range(20):
            kept = frozenset(int(i) for i in rng.choice(sorted(graph), size=kept_count, replace=False))
            assert connected(kept, graph) == reaches_all(set(kept), neighbours), sorted(kept)
