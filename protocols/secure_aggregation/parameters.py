"""Graph degree ``K`` and Shamir threshold ``t`` of SecAgg+ (Bell et al., CCS 2020, Sec. 3-4), and the
failure probabilities they guarantee.

Model. Of the round's ``n`` participants at most ``c = ceil(gamma * n)`` are corrupt (honest-but-curious,
colluding with the server) and at most ``d = ceil(delta * n)`` drop out at any step; both sets are fixed
independently of the public seed, so after the uniformly random relabelling of ``H(n, K)`` (``graph.py``) the
corrupt and the dropped silos sit on uniformly random positions. A silo's share set is itself and its ``K``
neighbours.

Events (the conditions of Bell et al.'s Sec. 3-4 analysis, evaluated for the Harary graph; the paper's text was
not at hand when this was written, so the bounds below are derived here from first principles, each a union
bound over exactly stated events, not transcribed from its theorems):

* Security fails if some honest silo has ``>= t`` corrupt neighbours (the coalition could reconstruct both its
  mask seed and its self-mask seed), or if the silos that are honest and did not drop before uploading are
  disconnected in the graph (the server would learn the sums of the components, e.g. one silo whose honest
  neighbours all dropped). A silo's ``K`` neighbours are a uniformly random ``K``-subset of the other ``n - 1``
  silos, so its corrupt neighbours are hypergeometric ``Hyp(n - 1, c, K)``::

      P_sec <= n * P[Hyp(n - 1, c, K) >= t] + P_disconnected.

  In ``H(n, K)`` two consecutive survivors on the circle are adjacent when fewer than ``L = floor(K / 2)``
  removed silos lie between them, so the survivors are disconnected only if at least two gaps hold ``L``
  consecutive removed silos: two disjoint windows of ``L`` positions, all among the ``m = c + d`` removed ones.
  Over the at most ``C(n, 2)`` pairs of window starts::

      P_disconnected <= C(n, 2) * (m)_{2L} / (n)_{2L}      ((x)_k the falling factorial; 0 when m < 2L)

  (the opposite-node edges of odd ``K`` only add connections; the complete graph is never disconnected).
* Correctness fails if some silo keeps fewer than ``t`` share holders that answer the unmasking request, not
  counting itself (it may be the one that dropped)::

      P_cor <= n * P[Hyp(n - 1, d, K) >= K - t + 1].

``auto`` picks the smallest ``K`` (costs grow with ``K``) for which some ``t`` gives ``P_sec <= 2^-sigma`` and
then the smallest such ``t`` (Shamir's costs grow with ``t``; fewer holders need to answer), provided that
``P_cor <= 2^-eta``; defaults ``sigma = 40`` and ``eta = 20`` (common statistical security and correctness
parameters). When no
``K <= n - 3`` qualifies, the graph would be (nearly) complete, and ``auto`` uses the complete graph with the
smallest ``t > c`` (then ``P_sec = 0``, and ``P_cor = 0`` if ``n - 1 - d >= t``). All probabilities are computed
exactly in rational arithmetic before rounding to float.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Union

from protocols.secure_aggregation.graph import harary_degree

SECURITY_PARAMETER = 40
"""sigma: ``auto`` keeps the security failure probability at most ``2^-sigma``."""
CORRECTNESS_PARAMETER = 20
"""eta: ``auto`` keeps the probability that a round cannot be unmasked at most ``2^-eta``."""
DEFAULT_CORRUPT_FRACTION = 0.05
DEFAULT_DROPOUT_RATE = 0.05

Neighbours = Union[Literal["all", "auto"], int]


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


def _counts(n: int, corrupt_fraction: float, dropout_rate: float) -> tuple[int, int]:
    for name, value in (("corrupt_fraction", corrupt_fraction), ("dropout_rate", dropout_rate)):
        if not 0 <= value < 1:
            raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return math.ceil(corrupt_fraction * n), math.ceil(dropout_rate * n)


def _upper_tail(population: int, marked: int, draws: int, at_least: int) -> float:
    """``P[Hyp(population, marked, draws) >= at_least]``, exactly (then rounded to float)."""
    low = max(at_least, 0)
    numerator = sum(math.comb(marked, j) * math.comb(population - marked, draws - j) for j in range(low, min(marked, draws) + 1))
    return numerator / math.comb(population, draws)


def _falling(x: int, k: int) -> int:
    return math.perm(x, k) if 0 <= k <= x else 0


def _disconnection_bound(n: int, degree: int, removed: int) -> float:
    width = 2 * (degree // 2)
    return min(1.0, math.comb(n, 2) * _falling(removed, width) / _falling(n, width))


def failure_bounds(
    n: int, *, degree: int | None, threshold: int, corrupt_fraction: float, dropout_rate: float
) -> FailureBounds:
    """The module docstring's ``P_sec`` and ``P_cor`` for ``n`` participants, graph degree ``degree`` (``None``:
    complete) and threshold ``threshold``."""
    corrupt, dropped = _counts(n, corrupt_fraction, dropout_rate)
    draws = n - 1 if degree is None else degree
    disconnected = 0.0 if draws >= n - 1 else _disconnection_bound(n, draws, corrupt + dropped)
    security = n * _upper_tail(n - 1, min(corrupt, n - 1), draws, threshold) + disconnected
    correctness = n * _upper_tail(n - 1, min(dropped, n - 1), draws, draws - threshold + 1)
    return FailureBounds(security=min(1.0, security), correctness=min(1.0, correctness))


@lru_cache(maxsize=256)
def auto_parameters(
    n: int,
    *,
    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
    dropout_rate: float = DEFAULT_DROPOUT_RATE,
    sigma: int = SECURITY_PARAMETER,
    eta: int = CORRECTNESS_PARAMETER,
) -> tuple[RoundParameters, FailureBounds]:
    """``auto``'s degree and threshold for ``n`` participants (see the module docstring), with their bounds.

    Raises ``ValueError`` when even the complete graph cannot meet both (too many corrupt or dropped silos)."""
    if n < 3:
        raise ValueError(f"secure aggregation with dropout recovery needs at least 3 participants, got {n}")
    corrupt, dropped = _counts(n, corrupt_fraction, dropout_rate)
    fractions = {"corrupt_fraction": corrupt_fraction, "dropout_rate": dropout_rate}
    for degree in range(2, n - 2):
        if (n * degree) % 2 or _disconnection_bound(n, degree, corrupt + dropped) > 2.0**-sigma:
            continue
        for threshold in range(2, degree + 2):
            bounds = failure_bounds(n, degree=degree, threshold=threshold, **fractions)
            if bounds.security <= 2.0**-sigma:
                if bounds.correctness <= 2.0**-eta:
                    return RoundParameters(degree, threshold, degree + 1), bounds
                break
    threshold = max(2, corrupt + 1)
    bounds = failure_bounds(n, degree=None, threshold=threshold, **fractions)
    if threshold > n - 1 - dropped:
        raise ValueError(
            f"no safe threshold for {n} participants: more than {corrupt} corrupt and fewer than "
            f"{n - 1 - dropped} answering silos (corrupt_fraction {corrupt_fraction}, dropout_rate {dropout_rate})"
        )
    return RoundParameters(None, threshold, n), bounds


def check_settings(neighbours: Neighbours, threshold: int | None) -> None:
    """Raise ``ValueError`` unless ``neighbours`` is ``"all"``, ``"auto"`` or an int >= 1 and ``threshold`` is
    ``None`` or an int >= 2 (one share would be the secret), ``None`` with ``"auto"`` (which chooses it)."""
    if not (neighbours in ("all", "auto") or (isinstance(neighbours, int) and not isinstance(neighbours, bool) and neighbours >= 1)):
        raise ValueError(f"neighbours must be 'all', 'auto' or an int >= 1, got {neighbours!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 2):
        raise ValueError(f"threshold must be None or an int >= 2 (one share would be the secret), got {threshold!r}")
    if neighbours == "auto" and threshold is not None:
        raise ValueError("neighbours 'auto' chooses the threshold; leave threshold unset")


def round_parameters(
    n: int,
    *,
    neighbours: Neighbours,
    threshold: int | None,
    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION,
    dropout_rate: float = DEFAULT_DROPOUT_RATE,
) -> RoundParameters:
    """Degree, threshold and share-set size for a round of ``n`` participants.

    ``neighbours``: ``"all"`` (complete graph), ``"auto"`` ([`auto_parameters`][protocols.secure_aggregation.parameters.auto_parameters]; ``threshold`` must be
    ``None``) or ``K >= 1`` (``H(n, K)``, complete once ``K >= n - 1``). ``threshold`` ``None`` is a majority of
    the share set. Raises ``ValueError`` for parameters no round of ``n`` can run safely: a threshold below 2 (one
    share would be the secret) or above the share set (nothing could ever be recovered).
    """
    check_settings(neighbours, threshold)
    if neighbours == "auto":
        return auto_parameters(n, corrupt_fraction=corrupt_fraction, dropout_rate=dropout_rate)[0]
    degree = None if neighbours == "all" or neighbours >= n - 1 else harary_degree(n, neighbours)
    degree = None if degree == n - 1 else degree
    share_set = n if degree is None else degree + 1
    chosen = share_set // 2 + 1 if threshold is None else threshold
    if not 2 <= chosen <= share_set:
        raise ValueError(
            f"threshold {chosen!r} is unsafe for a share set of {share_set} silos ({n} participants): it must be "
            f"an int in [2, {share_set}]"
        )
    return RoundParameters(degree, chosen, share_set)


def parameter_report(
    n: int, *, neighbours: Neighbours, threshold: int | None, corrupt_fraction: float, dropout_rate: float
) -> dict[str, object]:
    """What the engine writes to ``summary.json`` before the run, for rounds of ``n`` participants:
    ``{"neighbours": K or "all", "threshold": t, "corrupt_fraction", "dropout_rate",
    "security_failure_probability", "correctness_failure_probability"}`` (the bounds above)."""
    fractions = {"corrupt_fraction": corrupt_fraction, "dropout_rate": dropout_rate}
    chosen = round_parameters(n, neighbours=neighbours, threshold=threshold, **fractions)
    bounds = failure_bounds(n, degree=chosen.degree, threshold=chosen.threshold, **fractions)
    return {
        "neighbours": "all" if chosen.degree is None else chosen.degree,
        "threshold": chosen.threshold,
        **fractions,
        "security_failure_probability": bounds.security,
        "correctness_failure_probability": bounds.correctness,
    }


@dataclass(frozen=True)
class GraphSettings:
    """One side's configuration of the graph and threshold; [`for_round`][protocols.secure_aggregation.parameters.GraphSettings.for_round] resolves it for a round of ``n``
    participants (both sides resolve it alike, and a silo refuses a round whose relayed threshold differs)."""

    neighbours: Neighbours = "all"
    threshold: int | None = None
    corrupt_fraction: float = DEFAULT_CORRUPT_FRACTION
    dropout_rate: float = DEFAULT_DROPOUT_RATE

    def __post_init__(self) -> None:
        check_settings(self.neighbours, self.threshold)
        _counts(1, self.corrupt_fraction, self.dropout_rate)

    def for_round(self, n: int) -> RoundParameters:
        """``round_parameters`` for ``n`` participants (``ValueError`` if no safe parameters exist)."""
        return round_parameters(
            n, neighbours=self.neighbours, threshold=self.threshold,
            corrupt_fraction=self.corrupt_fraction, dropout_rate=self.dropout_rate,
        )
