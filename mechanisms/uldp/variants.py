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


# ULDP-NAIVE (Algorithm 1): removing one user's records changes a silo's clipped delta from v to another v' in the
# C-ball, so a silo's sensitivity is 2C, not C as the paper takes it (that holds only when each user is a summand
# of their own, as in DP-FedAvg). ``safe`` noise: sigma * 2C * sqrt|S| per silo, accounted at sigma. ``paper``
# noise: sigma * C * sqrt|S| per silo (the paper's), honestly accounted at sigma / 2.
def naive_noise_factor(mode: str) -> float:
    """Multiplier of sigma * C * sqrt|S| in ULDP-NAIVE's per-silo noise std."""
    return 2.0 if mode == "safe" else 1.0


def naive_noise_multiplier(sigma: float, mode: str) -> float:
    """The user-level noise multiplier (noise std over sensitivity) that ULDP-NAIVE's rounds are accounted at."""
    return sigma if mode == "safe" else sigma / 2.0
