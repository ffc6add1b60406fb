"""The ULDP-FL variants and group-size roundings as Enums (light: no torch, no Opacus)."""
from __future__ import annotations

import enum


class Variant(str, enum.Enum):
    """The ULDP-FL algorithms (Algorithms 1-3, Eq. 3)."""

    NAIVE = "naive"
    GROUP = "group"
    AVG = "avg"
    AVG_W = "avg_w"
    SGD = "sgd"


class GroupRounding(str, enum.Enum):
    """How a group size ``k`` that is not a power of two is covered by Mironov's Prop. 2."""

    UP = "up"  # smallest 2^c >= k: a guarantee
    PAPER = "paper"  # the paper's code: largest 2^c <= k and its order grid; not a guarantee
