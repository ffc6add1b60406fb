"""Graph degree ``K`` and Shamir threshold ``t`` of SecAgg+ (Bell et al., CCS 2020, Sec. 3-4), and the
failure probabilities they guarantee.

Model. The federation has ``N`` silos, at most ``C = ceil(gamma * N)`` of them corrupt (colluding with the
server), fixed before the run. A round samples ``n`` of the ``N`` silos independently of who is corrupt, so the
round holds ``Hyp(N, C, n)`` corrupt silos, not ``ceil(gamma * n)``. At most ``d = ceil(delta * n)`` of the
round's participants drop out. The graph ``H(n, K)`` is relabelled by a uniformly random permutation drawn from
a seed fixed only after every participant's keys of the round exist (``graph.py``), so the corrupt and the
dropped silos sit on uniformly random positions. A silo's share set is itself and its ``K`` neighbours
(``s = K + 1``; ``s = n`` for the complete graph, ``K = n - 1``).

Given that an honest silo ``v`` takes part, the other participants are a uniformly random subset of the other
``N - 1`` silos and its ``K`` neighbours a uniformly random ``K``-subset of them, so ``v``'s corrupt neighbours
are ``Hyp(N - 1, C, K)``, whatever the round's size. (With every silo in every round, ``N = n``.)

Events (union bounds over exactly stated events, derived here from first principles rather than transcribed from
Bell et al.'s theorems):

* Security fails if some honest silo is *exposed* or the honest uploaders are disconnected in the graph (the
  server would learn the sum of each part).

  - ``honest_but_curious`` server: exposed means ``>= t`` corrupt neighbours (the coalition holds ``t`` shares
    of both of its seeds).
  - ``honest_but_curious`` gives no protection against a server that lies: by telling each holder "only you and
    ``v`` uploaded" it makes the holders reveal both seeds of ``v`` whenever ``t < s``, with no corrupt silo.
  - ``may_lie`` server (it may withhold or forge messages, tell each silo its own story about who uploaded and
    signed, and claim any silos dropped; ``silo.py`` gives the checks). Each honest holder reveals at most one
    kind of share of a silo ``v`` in a round, and only after ``t`` of ``v``'s ``s`` share holders signed the
    same set ``U'`` it signed. The server recovers both seeds of ``v`` only with ``t`` shares of each kind, so
    with ``>= 2t - s`` corrupt holders. Otherwise it recovers at most one seed of every honest silo, and what it
    computes is a sum over a set ``A`` of honest uploaders whose self-mask seeds it holds and whose unknown
    pairwise masks cancel inside ``A``. A silo ``u`` whose ``b_u`` is revealed signed ``U'`` (it is in it), and
    it signed only a ``U`` naming no neighbour whose shares it did not receive; each holder accepts a ``U'``
    missing at most ``d`` silos and connected in the one graph every signer agrees on (the statements name the
    graph seed, and the commitment list fixes that seed before any key is seen). So the honest silos outside
    ``A`` that ``A`` borders are all missing from ``U'`` or corrupt: cutting ``A`` from the other honest uploaders
    takes two windows of ``L`` ring positions filled by corrupt silos and at most ``d`` silos the server places,
    the disconnection event below. ``tests/unit/protocols/test_secagg_adversary.py`` searches the server's moves on small
    graphs and finds no win outside these two events::

      P_sec <= n * P[Hyp(N - 1, C, K) >= e] + P_disconnected,      e = t, or 2t - s for may_lie.

    The ``may_lie`` bound assumes (``SERVER_ASSUMPTIONS``, printed in ``summary.json``): the registry of identity
    keys is authentic (set-up before the server may lie); the coalition is fixed before the run; the round's
    participants are sampled independently of who is corrupt (a server that picks them could run a round of one
    honest silo and corrupt ones); and a committed silo that reveals no keys ends the round.

  In ``H(n, K)`` two consecutive survivors on the circle are adjacent when fewer than ``L = floor(K / 2)``
  removed silos lie between them, so the survivors are disconnected only if at least two gaps hold ``L``
  consecutive removed silos: two disjoint windows of ``L`` positions, all among the ``m = c + d`` removed ones
  (``c`` the round's corrupt participants). Over the at most ``C(n, 2)`` pairs of window starts, and averaged
  over ``c ~ Hyp(N, C, n)``::

      P_disconnected <= sum_c P[Hyp(N, C, n) = c] * min(1, C(n, 2) * (c + d)_{2L} / (n)_{2L})

  (``(x)_k`` the falling factorial, 0 when ``x < k``; the opposite-node edges of odd ``K`` only add
  connections; the complete graph is never disconnected).

  A server that may lie chooses which silos it claims dropped, after seeing the graph. Each silo therefore signs
  a claimed set of uploaders only if at most ``d`` of the round's silos are missing from it and it is connected
  in the graph (``silo.py``). The honest uploaders can then be split only where the randomly placed corrupt
  silos fill two windows up to the ``d`` silos the server places::

      P_disconnected <= sum_c P[Hyp(N, C, n) = c] * min(1, C(n, 2) * P[Hyp(n, c, 2L) >= 2L - d])   (may_lie).
* Correctness fails if some silo keeps fewer than ``t`` share holders that answer the unmasking request, not
  counting itself (it may be the one that dropped). (With ``may_lie`` a silo lost between committing to its keys
  and revealing them also ends the round, which this bound does not count; an uploader that does not sign
  counts as dropped.)::

      P_cor <= n * P[Hyp(n - 1, d, K) >= K - t + 1].

``auto`` picks the smallest ``K`` (costs grow with ``K``; the complete graph last) for which some ``t`` gives
``P_sec <= 2^-sigma``, then the smallest such ``t`` (Shamir's costs grow with ``t``; fewer holders need to
answer), provided that ``P_cor <= 2^-eta``; defaults ``sigma = 40`` and ``eta = 20`` (common statistical
security and correctness parameters). All probabilities are computed exactly in rational arithmetic before
rounding to float.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Iterable, Literal, Union

from privsilo.protocols.secure_aggregation.graph import harary_degree

SECURITY_PARAMETER = 40
"""sigma: ``auto`` keeps the security failure probability at most ``2^-sigma``."""
CORRECTNESS_PARAMETER = 20
"""eta: ``auto`` keeps the probability that a round cannot be unmasked at most ``2^-eta``."""
DEFAULT_CORRUPT_FRACTION = 0.05
DEFAULT_DROPOUT_RATE = 0.05
SERVER_MODELS = ("honest_but_curious", "may_lie")
SERVER_ASSUMPTIONS = {
    "honest_but_curious": (
        "the server follows the protocol (it only reads what it receives); it gives no protection against a server "
        "that lies, which unmasks any silo whenever threshold < share set"),
    "may_lie": (
        "the server may lie (withhold, replay or forge messages, claim any dropouts); the bound assumes an authentic "
        "registry of identity keys from set-up, a coalition of at most corrupt_fraction of the federation fixed "
        "before the run, and round participants sampled independently of who is corrupt"),
}
"""What each server model assumes, as ``summary.json`` prints it."""
"""What the silos assume of the server (``protocol.server``): it follows the protocol, or it may lie to silos
about who advertised, shared and uploaded (then keys are signed and unmasking waits for the consistency round)."""

Neighbours = Union[Literal["all", "auto"], int, None]
"""``"all"``, ``"auto"``, a degree ``K``, or ``None``: the default, [`default_neighbours`][privsilo.protocols.secure_aggregation.parameters.default_neighbours]'s choice."""
ServerModel = Literal["honest_but_curious", "may_lie"]


@dataclass(frozen=True)
class RoundParameters:
    """What both sides use in a round of ``n`` participants: the graph degree (``None``: complete graph), the
    Shamir threshold and the size of a silo's share set (itself and its neighbours)."""

    degree: int | None
    threshold: int
    share_set: int


@dataclass(frozen=True)
class FailureBounds:
    """Upper bounds on the probabilities that a round leaks more than the sum (to the server and the corrupt
    silos) and that it cannot be unmasked."""

    security: float
    correctness: float


def _check_fractions(corrupt_fraction: float, dropout_rate: float) -> None:
    for name, value in (("corrupt_fraction", corrupt_fraction), ("dropout_rate", dropout_rate)):
        if not 0 <= value < 1:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def corrupt_silos(federation: int, corrupt_fraction: float) -> int:
    """``C = ceil(gamma * N)``: the corrupt silos assumed in a federation of ``N``."""
    return math.ceil(corrupt_fraction * federation)


def dropped_silos(n: int, dropout_rate: float) -> int:
    """``d = ceil(delta * n)``: the dropouts assumed in a round of ``n`` participants."""
    return math.ceil(dropout_rate * n)


def hypergeometric_tail(population: int, marked: int, draws: int, at_least: int) -> float:
    """``P[Hyp(population, marked, draws) >= at_least]``, exactly (then rounded to float)."""
    low = max(at_least, 0)
    numerator = sum(math.comb(marked, j) * math.comb(population - marked, draws - j) for j in range(low, min(marked, draws) + 1))
    return numerator / math.comb(population, draws)


def _hypergeometric_pmf(population: int, marked: int, draws: int) -> list[Fraction]:
    total = math.comb(population, draws)
    return [Fraction(math.comb(marked, j) * math.comb(population - marked, draws - j), total) for j in range(min(marked, draws) + 1)]


def _disconnection_bound(n: int, degree: int, removed: int) -> Fraction:
    width = 2 * (degree // 2)
    falling = math.perm(removed, width) if width <= removed else 0
    return min(Fraction(1), Fraction(math.comb(n, 2) * falling, math.perm(n, width)))


def _placed_disconnection_bound(n: int, degree: int, corrupt: int, dropped: int) -> Fraction:
    """The window bound when the ``dropped`` silos are placed by the server (``may_lie``): two given windows of
    ``L`` positions can be emptied only if they hold at least ``2L - d`` of the randomly placed corrupt silos."""
    width = 2 * (degree // 2)
    pmf = _hypergeometric_pmf(n, corrupt, width)
    filled = sum((p for j, p in enumerate(pmf) if j >= width - dropped), Fraction(0))
    return min(Fraction(1), math.comb(n, 2) * filled)


def _disconnection(n: int, degree: int, *, federation: int, corrupt: int, dropped: int,
                   server: ServerModel = "honest_but_curious") -> float:
    """``P_disconnected`` of the module docstring: the window bound averaged over the round's corrupt count."""
    pmf = _hypergeometric_pmf(federation, corrupt, n)
    if server == "honest_but_curious":
        return float(sum(p * _disconnection_bound(n, degree, c + dropped) for c, p in enumerate(pmf) if p))
    return float(sum(p * _placed_disconnection_bound(n, degree, c, dropped) for c, p in enumerate(pmf) if p))


def exposure_threshold(threshold: int, share_set: int, server: ServerModel) -> int:
    """The number of corrupt neighbours that exposes an honest silo (module docstring): ``t``, or ``2t - s``
    when the server may lie."""
    return threshold if server == "honest_but_curious" else 2 * threshold - share_set


def failure_bounds(
    n: int, *, degree: int | None, threshold: int, corrupt_fraction: float, dropout_rate: float,
    federation: int | None = None, server: ServerModel = "honest_but_curious",
) -> FailureBounds:
    """The module docstring's ``P_sec`` and ``P_cor`` for a round of ``n`` participants drawn from a federation
    of ``federation`` silos (default ``n``: every silo takes part), graph degree ``degree`` (``None``: complete)
    and threshold ``threshold``."""
    _check_fractions(corrupt_fraction, dropout_rate)
    total = n if federation is None else federation
    if total < n:
        raise ValueError(f"a round of {n} participants cannot come from a federation of {total} silos")
    corrupt, dropped = corrupt_silos(total, corrupt_fraction), dropped_silos(n, dropout_rate)
    draws = n - 1 if degree is None else degree
    exposed_at = exposure_threshold(threshold, draws + 1, server)
    exposure = 1.0 if exposed_at <= 0 else hypergeometric_tail(total - 1, min(corrupt, total - 1), draws, exposed_at)
    disconnected = 0.0 if draws >= n - 1 else _disconnection(n, draws, federation=total, corrupt=corrupt, dropped=dropped,
                                                               server=server)
    correctness = n * hypergeometric_tail(n - 1, min(dropped, n - 1), draws, draws - threshold + 1)
    return FailureBounds(security=min(1.0, n * exposure + disconnected), correctness=min(1.0, correctness))


@lru_cache(maxsize=1024)
def auto_parameters(
    n: int,
    *,
    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
    dropout_rate: float = DEFAULT_DROPOUT_RATE,
    federation: int | None = None,
    server: ServerModel = "honest_but_curious",
    sigma: int = SECURITY_PARAMETER,
    eta: int = CORRECTNESS_PARAMETER,
) -> tuple[RoundParameters, FailureBounds]:
    """``auto``'s degree and threshold for a round of ``n`` participants out of ``federation`` silos (default
    ``n``), see the module docstring, with their bounds.

    Raises ``ValueError`` when even the complete graph cannot meet both (too many corrupt or dropped silos)."""
    if n < 3:
        raise ValueError(f"secure aggregation with dropout recovery needs at least 3 participants, got {n}")
    total = n if federation is None else federation
    settings = dict(corrupt_fraction=corrupt_fraction, dropout_rate=dropout_rate, federation=total, server=server)
    corrupt, dropped = corrupt_silos(total, corrupt_fraction), dropped_silos(n, dropout_rate)
    for degree in [*range(2, n - 2), None]:
        if degree is not None and ((n * degree) % 2 or _disconnection(
                n, degree, federation=total, corrupt=corrupt, dropped=dropped, server=server) > 2.0**-sigma):
            continue
        draws = n - 1 if degree is None else degree
        for threshold in range(2, draws + 2):
            bounds = failure_bounds(n, degree=degree, threshold=threshold, **settings)
            if bounds.security <= 2.0**-sigma:
                if bounds.correctness <= 2.0**-eta:
                    return RoundParameters(degree, threshold, draws + 1), bounds
                break
    raise ValueError(
        f"no safe threshold for a round of {n} participants out of {total} silos: up to {corrupt} corrupt "
        f"(corrupt_fraction {corrupt_fraction}) and {dropped} dropped (dropout_rate {dropout_rate}) leave no "
        f"threshold with security failure <= 2^-{sigma} and correctness failure <= 2^-{eta}"
        + ("" if server == "honest_but_curious" else " against a server that may lie")
    )


def check_settings(neighbours: Neighbours, threshold: int | None, server: str = "honest_but_curious") -> None:
    """Raise ``ValueError`` unless ``neighbours`` is ``None``, ``"all"``, ``"auto"`` or an int >= 1, ``threshold`` is
    ``None`` or an int >= 2 (one share would be the secret), ``None`` with ``"auto"`` (which chooses it), and
    ``server`` one of ``SERVER_MODELS``."""
    if not (neighbours is None or neighbours in ("all", "auto")
            or (isinstance(neighbours, int) and not isinstance(neighbours, bool) and neighbours >= 1)):
        raise ValueError(f"neighbours must be None, 'all', 'auto' or an int >= 1, got {neighbours!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 2):
        raise ValueError(f"threshold must be None or an int >= 2 (one share would be the secret), got {threshold!r}")
    if neighbours == "auto" and threshold is not None:
        raise ValueError("neighbours 'auto' chooses the threshold; leave threshold unset")
    if server not in SERVER_MODELS:
        raise ValueError(f"server must be one of {SERVER_MODELS}, got {server!r}")


def default_neighbours(
    federation: int, *, threshold: int | None, corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
    dropout_rate: float = DEFAULT_DROPOUT_RATE, server: ServerModel = "honest_but_curious",
) -> tuple[Literal["all", "auto"], str]:
    """The graph an unset ``neighbours`` stands for in a federation of ``federation`` silos, and why.

    ``auto`` wherever it has safe parameters for a round of every silo: its share sets are never larger than the
    complete graph's (it tries the complete graph last) and its threshold is the smallest that meets the bounds,
    so ``all`` would cost at least as much, quadratically more at scale. ``all`` where a ``threshold`` is given
    (``auto`` chooses its own) or ``auto`` finds no safe parameters (the rounds then run with the bounds that
    ``summary.json`` reports for ``all``)."""
    if threshold is not None:
        return "all", f"protocol.threshold = {threshold} is set, which only the complete graph or a fixed K takes"
    try:
        chosen, _ = auto_parameters(federation, corrupt_fraction=corrupt_fraction, dropout_rate=dropout_rate,
                                    federation=federation, server=server)
    except ValueError as error:
        return "all", f"auto has no safe parameters for a round of all {federation} silos ({error})"
    majority = federation // 2 + 1
    if chosen.degree is None:
        return "auto", (f"auto's complete graph with threshold {chosen.threshold} meets the bounds; all would take a "
                        f"majority of {majority}")
    return "auto", (f"auto's share sets of {chosen.share_set} silos (K = {chosen.degree}, threshold {chosen.threshold}) "
                    f"meet the bounds; all would share among all {federation} silos with threshold {majority}")


def round_parameters(
    n: int,
    *,
    neighbours: Neighbours,
    threshold: int | None,
    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
    dropout_rate: float = DEFAULT_DROPOUT_RATE,
    federation: int | None = None,
    server: ServerModel = "honest_but_curious",
) -> RoundParameters:
    """Degree, threshold and share-set size for a round of ``n`` participants.

    ``neighbours``: ``None`` (``default_neighbours`` for the federation), ``"all"`` (complete graph), ``"auto"`` ([`auto_parameters`][privsilo.protocols.secure_aggregation.parameters.auto_parameters]; ``threshold`` must be
    ``None``) or ``K >= 1`` (``H(n, K)``, complete once ``K >= n - 1``). ``threshold`` ``None`` is a majority of
    the share set. Raises ``ValueError`` for parameters no round of ``n`` can run safely: a threshold below 2 (one
    share would be the secret), above the share set (nothing could ever be recovered) or, when the server may
    lie, not above half the share set (two disjoint groups of honest holders could each sign a different story).
    """
    check_settings(neighbours, threshold, server)
    if neighbours is None:
        neighbours = default_neighbours(n if federation is None else federation, threshold=threshold,
                                        corrupt_fraction=corrupt_fraction, dropout_rate=dropout_rate, server=server)[0]
    if neighbours == "auto":
        return auto_parameters(n, corrupt_fraction=corrupt_fraction, dropout_rate=dropout_rate, federation=federation,
                               server=server)[0]
    degree = None if neighbours == "all" or neighbours >= n - 1 else harary_degree(n, neighbours)
    degree = None if degree == n - 1 else degree
    share_set = n if degree is None else degree + 1
    chosen = share_set // 2 + 1 if threshold is None else threshold
    if not 2 <= chosen <= share_set:
        raise ValueError(
            f"threshold {chosen!r} is unsafe for a share set of {share_set} silos ({n} participants): it must be "
            f"an int in [2, {share_set}]"
        )
    if server == "may_lie" and 2 * chosen <= share_set:
        raise ValueError(
            f"threshold {chosen!r} is unsafe against a server that may lie, for a share set of {share_set} silos "
            f"({n} participants): it must exceed {share_set / 2:g}"
        )
    return RoundParameters(degree, chosen, share_set)


@dataclass(frozen=True)
class GraphSettings:
    """One side's configuration of the graph and threshold; [`for_round`][privsilo.protocols.secure_aggregation.parameters.GraphSettings.for_round] resolves it for a round of ``n``
    participants (both sides resolve it alike, and a silo refuses a round whose relayed threshold differs).
    ``federation``: the number of silos rounds are sampled from (``None``: every round holds all of them)."""

    neighbours: Neighbours = None
    threshold: int | None = None
    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION
    dropout_rate: float = DEFAULT_DROPOUT_RATE
    federation: int | None = None
    server: ServerModel = "honest_but_curious"

    def __post_init__(self) -> None:
        check_settings(self.neighbours, self.threshold, self.server)
        _check_fractions(self.corrupt_fraction, self.dropout_rate)

    def for_round(self, n: int) -> RoundParameters:
        """``round_parameters`` for ``n`` participants (``ValueError`` if no safe parameters exist)."""
        return round_parameters(
            n, neighbours=self.neighbours, threshold=self.threshold, corrupt_fraction=self.corrupt_fraction,
            dropout_rate=self.dropout_rate, federation=self.federation, server=self.server,
        )

    def graph_choice(self, n: int) -> dict[str, object]:
        """What ``summary.json`` says of the graph setting for rounds of up to ``n`` participants: ``{"setting": K,
        "all" or "auto"}``, or, left unset, ``{"setting": "default", "chosen": "auto" or "all", "why": ...}``."""
        if self.neighbours is not None:
            return {"setting": self.neighbours}
        chosen, why = default_neighbours(
            n if self.federation is None else self.federation, threshold=self.threshold,
            corrupt_fraction=self.corrupt_fraction, dropout_rate=self.dropout_rate, server=self.server,
        )
        return {"setting": "default", "chosen": chosen, "why": why}

    def report(self, n: int) -> dict[str, object]:
        """What ``summary.json`` says of rounds of ``n`` participants: ``{"round_size", "neighbours": K or "all",
        "threshold", "security_failure_probability", "correctness_failure_probability"}`` (the bounds above), or
        ``{"round_size", "unsafe": why}`` when no safe parameters exist (such rounds are abandoned)."""
        try:
            chosen = self.for_round(n)
        except ValueError as error:
            return {"round_size": n, "unsafe": str(error)}
        bounds = failure_bounds(n, degree=chosen.degree, threshold=chosen.threshold, corrupt_fraction=self.corrupt_fraction,
                                dropout_rate=self.dropout_rate, federation=self.federation, server=self.server)
        return {
            "round_size": n,
            "neighbours": "all" if chosen.degree is None else chosen.degree,
            "threshold": chosen.threshold,
            "security_failure_probability": bounds.security,
            "correctness_failure_probability": bounds.correctness,
        }


def parameter_report(
    n: int, *, neighbours: Neighbours, threshold: int | None, corrupt_fraction: float, dropout_rate: float,
    federation: int | None = None, server: ServerModel = "honest_but_curious",
) -> dict[str, object]:
    """``GraphSettings.report`` for rounds of ``n`` participants out of ``federation`` silos."""
    return GraphSettings(neighbours, threshold, corrupt_fraction, dropout_rate, federation, server).report(n)


def excess_dropouts(rounds: Iterable[tuple[int, int, int]], *, dropout_rate: float) -> list[dict[str, int]]:
    """The rounds ``(round_index, participants, dropped)`` that lost more silos than ``dropout_rate`` assumed
    (``> ceil(dropout_rate * n)``): the bounds reported for them do not hold."""
    return [
        {"round": index, "participants": n, "dropped": dropped, "assumed_at_most": dropped_silos(n, dropout_rate)}
        for index, n, dropped in rounds if dropped > dropped_silos(n, dropout_rate)
    ]


def run_report(settings: GraphSettings, rounds: Iterable[tuple[int, int, int]]) -> dict[str, object]:
    """``summary.json``'s ``secure_aggregation``: the server model and what it assumes, the graph setting (``graph_choice``: with the
    default, which graph it chose and why), the parameters and bounds of every round size that ran (with how many
    rounds had it), and the rounds ``(round_index, participants, dropped)`` that lost
    more silos than assumed (``excess_dropouts``)."""
    rounds = list(rounds)
    sizes = Counter(n for _, n, _ in rounds if n)
    return {
        "server": settings.server,
        "assumes": SERVER_ASSUMPTIONS[settings.server],
        "graph": settings.graph_choice(max(sizes, default=2)),
        "federation": settings.federation,
        "corrupt_fraction": settings.corrupt_fraction,
        "dropout_rate": settings.dropout_rate,
        "by_round_size": [{**settings.report(n), "rounds": count} for n, count in sorted(sizes.items())],
        "dropouts_beyond_assumption": excess_dropouts(rounds, dropout_rate=settings.dropout_rate),
    }


def excess_warning(excess: list[dict[str, int]], *, dropout_rate: float) -> str | None:
    """One line on the rounds ``excess_dropouts`` named (``None`` when there are none)."""
    if not excess:
        return None
    worst = max(excess, key=lambda r: r["dropped"] / r["participants"])
    return (
        f"secure aggregation: {len(excess)} round(s) lost more silos than protocol.dropout_rate = {dropout_rate} "
        f"assumes (worst: round {worst['round']}, {worst['dropped']} of {worst['participants']}); the failure "
        "bounds in summary.json do not cover them"
    )
