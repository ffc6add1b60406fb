"""A lying server against secure aggregation's ``may_lie`` checks: what each honest silo would reveal for a server
strategy, what the server can then compute, and a search over strategies.

The model follows ``protocols/secure_aggregation/silo.py`` rule by rule (and, for comparison, the checks the
silos made before the consistency check bound ``U`` to the shares a silo received: ``old=True``);
``tests/unit/protocols/test_secagg_adversary.py`` checks it against the real silo objects on sampled strategies and replays the
attacks it finds on them. Every silo of the round advertises, shares and uploads (a server gains nothing from a
silo that really drops: it may claim any silo dropped). The graph and the corrupt silos are given (the graph seed
cannot be ground: ``test_secure_aggregation.py``).

A strategy is what the server does at each stage:

* ``withheld[v]``: the honest neighbours whose encrypted shares it does not relay to honest silo ``v`` (``v``
  then masks without them); ciphertexts of corrupt silos are always relayed (the server knows their masks).
* ``told[h]``: the set ``U`` of uploaders it claims to honest silo ``h`` (any set; ``None``: asks nothing).
* ``shown[h]``: the signers of ``U`` whose signatures it forwards to ``h`` in the second exchange (``None``: all;
  it can only forward signatures it has). ``h`` signs ``U'``: those and itself.
* Corrupt silos sign anything and hand the server every share they hold, of both kinds.

In the last exchange the server forwards every signature of ``U'`` (forwarding fewer only makes silos refuse).

What the server learns: the uploads, every seed of which ``t`` shares reached it, and every mask of a corrupt
silo. A sum ``sum_{u in A} x_u`` over honest silos is computable when every ``u`` in ``A`` has its self-mask seed
recovered and every pairwise mask of a member of ``A`` cancels inside ``A`` or is known; the minimal such ``A``
are the unblocked components of the honest silos under unknown pairwise masks (``learnable_sets``). The server
*wins* when it can compute two such sums, or one that leaves out more than ``d`` honest silos: more than the sum
of the honest uploaders of one set a truthful server could claim.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

Graph = dict[int, frozenset[int]]


def harary(n: int, degree: int) -> Graph:
    """``H(n, degree)`` on positions ``0..n-1`` (``graph.harary_positions``), as sets."""
    from privsilo.protocols.secure_aggregation.graph import harary_positions
    return {p: frozenset(harary_positions(p, n=n, degree=degree)) for p in range(n)}


def reaches_all(nodes: frozenset[int] | set[int], graph: Graph | dict[int, set[int]]) -> bool:
    """A plain breadth-first search, apart from the protocol's own: whether ``nodes`` induce a connected subgraph."""
    if not nodes:
        return True
    start = min(nodes)
    seen, frontier = {start}, [start]
    while frontier:
        for peer in graph[frontier.pop()] & nodes - seen:
            seen.add(peer)
            frontier.append(peer)
    return seen == nodes


@dataclass(frozen=True)
class Setting:
    graph: Graph
    corrupt: frozenset[int]
    threshold: int
    dropped: int
    """``d``: how many silos a claim may miss."""
    _claims_ok: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def silos(self) -> frozenset[int]:
        return frozenset(self.graph)

    @property
    def honest(self) -> frozenset[int]:
        return self.silos - self.corrupt

    def share_set(self, w: int) -> frozenset[int]:
        return self.graph[w] | {w}

    def acceptable(self, claim: frozenset[int], silo: int) -> bool:
        """``silo._check_claim``: it is in the claim, at most ``d`` missing, the graph connects the rest."""
        if claim not in self._claims_ok:
            self._claims_ok[claim] = len(self.silos - claim) <= self.dropped and reaches_all(claim, self.graph)
        return silo in claim and self._claims_ok[claim]


@dataclass
class Strategy:
    withheld: dict[int, frozenset[int]] = field(default_factory=dict)
    told: dict[int, frozenset[int] | None] = field(default_factory=dict)
    shown: dict[int, frozenset[int] | None] = field(default_factory=dict)

    def received(self, setting: Setting, v: int) -> frozenset[int]:
        """The neighbours whose shares honest silo ``v`` received, i.e. masked with."""
        return setting.graph[v] - self.withheld.get(v, frozenset())

    def uploaders(self, setting: Setting) -> frozenset[int]:
        """The honest silos that upload: a silo left with fewer than ``t`` holders of shares (itself included)
        stops at ``COLLECT_SHARES``, as a dropout would."""
        return frozenset(v for v in setting.honest
                         if len(setting.graph[v]) - len(self.withheld.get(v, ())) + 1 >= setting.threshold)


@dataclass(frozen=True)
class Outcome:
    revealing: frozenset[int]
    """The honest silos that reveal shares."""
    self_masks: frozenset[int]
    """Honest silos whose self-mask seed ``b`` the server recovers."""
    mask_seeds: frozenset[int]
    """Honest silos whose mask seed ``s`` the server recovers."""
    learnable: tuple[frozenset[int], ...]
    """The minimal sets of honest silos whose sum the server computes (``learnable_sets``)."""
    uploaders: frozenset[int]

    def wins(self, setting: Setting) -> bool:
        return len(self.learnable) > 1 or any(len(self.uploaders - a) > setting.dropped for a in self.learnable)


def outcome(setting: Setting, strategy: Strategy, *, old: bool = False) -> Outcome:
    """What the honest silos reveal under ``strategy`` (``old``: the checks before the fix: a silo signs any claim
    it finds acceptable and reveals ``b`` for every member of it), and what the server then learns."""
    honest, t, uploaders = setting.honest, setting.threshold, strategy.uploaders(setting)
    received = {h: strategy.received(setting, h) for h in honest}
    told = {h: strategy.told.get(h) for h in uploaders}
    signed1 = {h for h in uploaders if told[h] is not None and setting.acceptable(told[h], h) and (
        old or not (told[h] & setting.graph[h]) - received[h])}
    by_claim: dict[frozenset[int], set[int]] = {}
    for h in signed1:
        by_claim.setdefault(told[h], set()).add(h)
    final: dict[int, frozenset[int]] = {}
    for h in signed1:
        if old:
            final[h] = told[h]
            continue
        signers = by_claim[told[h]] | (setting.corrupt & told[h])
        shown = strategy.shown.get(h)
        confirmed = frozenset((signers if shown is None else signers & shown) | {h})
        if setting.acceptable(confirmed, h):
            final[h] = confirmed
    by_statement: dict[frozenset[int], set[int]] = {}
    for h, statement in final.items():
        by_statement.setdefault(statement, set()).add(h)
    revealing, counts = set(), {w: {"b": 0, "s": 0} for w in honest}
    for h, statement in final.items():
        agreeing = by_statement[statement] | setting.corrupt
        if all(len(agreeing & setting.share_set(w)) >= t for w in received[h] | {h}):
            revealing.add(h)
            for w in received[h] & honest | {h}:
                counts[w]["b" if w in statement else "s"] += 1
    corrupt_holders = {w: len(setting.corrupt & setting.share_set(w)) for w in honest}
    self_masks = frozenset(w for w in honest if counts[w]["b"] + corrupt_holders[w] >= t)
    mask_seeds = frozenset(w for w in honest if counts[w]["s"] + corrupt_holders[w] >= t)
    learnable = learnable_sets(setting, received, uploaders, self_masks, mask_seeds)
    return Outcome(frozenset(revealing), self_masks, mask_seeds, learnable, uploaders)


def learnable_sets(setting: Setting, received: dict[int, frozenset[int]], uploaders: frozenset[int],
                   self_masks: frozenset[int], mask_seeds: frozenset[int]) -> tuple[frozenset[int], ...]:
    """Components of the honest uploaders joined by pairwise masks the server cannot compute (neither end's mask
    seed recovered) that both ends added; a component is learnable when every member's self-mask seed is recovered
    and no member carries an unknown mask its partner did not add (the partner never received its shares, or
    never uploaded): such a mask cancels against nothing."""
    honest = setting.honest
    masks = {u: received[u] & honest if u in uploaders else frozenset() for u in honest}
    unknown = {u: {w for w in masks[u] if u not in mask_seeds and w not in mask_seeds} for u in honest}
    blocked = {u for u in honest if u not in self_masks or any(u not in masks[w] for w in unknown[u])}
    components, seen = [], set(honest - uploaders)
    for start in sorted(uploaders):
        if start in seen:
            continue
        component, frontier = {start}, [start]
        while frontier:
            u = frontier.pop()
            for w in {w for w in unknown[u] if u in unknown.get(w, ())}:  # masks both ends added: they cancel only together
                if w not in component:
                    component.add(w)
                    frontier.append(w)
        seen |= component
        if not component & blocked:
            components.append(frozenset(component))
    return tuple(components)


# --- the search ---------------------------------------------------------------------------------------------------


def claims(setting: Setting) -> list[frozenset[int]]:
    """Every claim an honest silo may sign: missing at most ``d`` silos, connected (any other is refused by every
    silo, so the server gains nothing from it)."""
    silos = sorted(setting.silos)
    every = [frozenset(silos) - set(missing) for size in range(setting.dropped + 1)
             for missing in itertools.combinations(silos, size)]
    return [claim for claim in every if setting.acceptable(claim, min(claim))]


def arcs(setting: Setting, order: list[int]) -> list[frozenset[int]]:
    """Every run of consecutive honest silos along ``order`` (the ring of ``H(n, K)``), up to half of them."""
    honest = [v for v in order if v in setting.honest]
    return [frozenset(honest[(start + k) % len(honest)] for k in range(size))
            for size in range(1, len(honest) // 2 + 1) for start in range(len(honest))]


def exhaustive_strategies(setting: Setting, order: list[int]):
    """Every strategy of these shapes (each a family some attack needs), ``order`` the ring of the graph:

    * withholding: for one target ``v``, any subset of its honest neighbours' ciphertexts withheld from ``v``; or
      every ciphertext across the two ends of an arc of honest silos withheld both ways (the arcs of a split);
      each with every honest silo told the same claim, any claim missing at most ``d`` silos;
    * two stories: each holder of the target's shares told either a claim with the target or the same claim
      without it (every split), the others the first;
    * signatures: every honest silo told one claim, the target's signature withheld from any subset of its
      share holders in the second exchange.
    """
    honest = sorted(setting.honest)
    every_claim = claims(setting)
    withholdings = [{}]
    for v in honest:
        neighbours = sorted(setting.graph[v] & setting.honest)
        for size in range(1, len(neighbours) + 1):
            for subset in itertools.combinations(neighbours, size):
                withholdings.append({v: frozenset(subset)})
    for side in arcs(setting, order):
        withholdings.append({v: setting.graph[v] & (setting.honest - side if v in side else side) for v in honest})
    for withheld in withholdings:
        for claim in every_claim:
            yield Strategy(withheld=withheld, told={h: claim for h in honest})
    for v in honest:
        holders = sorted(setting.share_set(v) & setting.honest - {v})
        for first in every_claim:
            second = first - {v}
            if v not in first or len(setting.silos - second) > setting.dropped:
                continue
            for size in range(1, len(holders) + 1):
                for part in itertools.combinations(holders, size):
                    yield Strategy(told={h: second if h in part else first for h in honest})
            for size in range(1, len(holders) + 1):
                for part in itertools.combinations(holders, size):
                    yield Strategy(told={h: first for h in honest}, shown={h: second if h in part else None for h in honest})


def random_strategy(setting: Setting, rng) -> Strategy:
    """Any strategy: each ciphertext to each honest silo withheld with a random rate, each honest silo told its
    own claim (mostly from a few claims, so that signers can agree), each shown a random part of the signers."""
    honest = sorted(setting.honest)
    every_claim = claims(setting)
    pool = [every_claim[int(i)] for i in rng.integers(len(every_claim), size=int(rng.integers(1, 4)))]
    rate = float(rng.choice([0.0, 0.1, 0.3, 0.6]))
    withheld = {v: frozenset(w for w in sorted(setting.graph[v] & setting.honest) if rng.random() < rate) for v in honest}
    told = {h: pool[int(rng.integers(len(pool)))] for h in honest}
    shown_rate = float(rng.choice([0.0, 0.0, 0.1, 0.4]))
    shown = {h: (None if not shown_rate else frozenset(j for j in sorted(setting.silos) if rng.random() >= shown_rate))
             for h in honest}
    return Strategy(withheld=withheld, told=told, shown=shown)


def search(setting: Setting, order: list[int], *, old: bool = False, random_tries: int = 0, rng=None) -> Strategy | None:
    """The first winning strategy: exhaustively over ``exhaustive_strategies``, then ``random_tries`` random ones."""
    for strategy in exhaustive_strategies(setting, order):
        if outcome(setting, strategy, old=old).wins(setting):
            return strategy
    for _ in range(random_tries):
        strategy = random_strategy(setting, rng)
        if outcome(setting, strategy, old=old).wins(setting):
            return strategy
    return None


def bound_event(setting: Setting, positions: dict[int, int], degree: int) -> bool:
    """The events the printed ``may_lie`` bound counts (``parameters.py``), for this placement of the corrupt
    silos: some honest silo has at least ``2t - s`` corrupt neighbours, or two disjoint windows of ``L = K // 2``
    consecutive ring positions hold at least ``2L - d`` corrupt silos."""
    n, t, s = len(setting.graph), setting.threshold, degree + 1
    if any(len(setting.graph[v] & setting.corrupt) >= 2 * t - s for v in setting.honest):
        return True
    width = degree // 2
    corrupt_at = {positions[c] for c in setting.corrupt}
    windows = [frozenset((start + k) % n for k in range(width)) for start in range(n)]
    return any(len((a | b) & corrupt_at) >= 2 * width - setting.dropped
               for a, b in itertools.combinations(windows, 2) if not a & b)
