"""Who counts how much in a ULDP-FL round: per-user weights, the server's user sample, GROUP-k's record limit.

Pure numpy. ``histogram`` is the ``(silos, users)`` matrix ``n_{s,u}``; in the simulator's trusted mode the
silos get it in the clear (the Private Weighting Protocol that hides it is a later issue).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class UserSample:
    """The server's round plan under user-level sub-sampling (Algorithm 4 / Remark 1): ``sampled[u]`` is True
    for the users whose weights stay; every other user's weights are set to 0 in every silo."""

    sampled: np.ndarray

    def __post_init__(self) -> None:
        mask = np.array(self.sampled, dtype=bool, copy=True)
        mask.flags.writeable = False
        object.__setattr__(self, "sampled", mask)


def sample_users(num_users: int, *, user_rate: float, rng: np.random.Generator) -> UserSample:
    """Poisson sampling: each user independently with probability ``user_rate``."""
    return UserSample(sampled=rng.random(num_users) < user_rate)


def plan_mask(plan: object, num_users: int) -> np.ndarray:
    """The sampled-users mask of a round plan (all users when there is no plan)."""
    if plan is None:
        return np.ones(num_users, dtype=bool)
    if not isinstance(plan, UserSample) or plan.sampled.shape != (num_users,):
        raise TypeError(f"uldp expects a UserSample over {num_users} users, got {plan!r}")
    return plan.sampled


def user_weights(histogram: np.ndarray, *, silo: int, proportional: bool) -> np.ndarray:
    """``w_{s,u}`` for every user ``u`` of silo ``silo``: ``1/|S|`` (ULDP-AVG, Algorithm 3) or, with
    ``proportional``, ``n_{s,u} / N_u`` (ULDP-AVG-w, Eq. 3). Users without records in the silo get 0. For every
    user the weights sum to at most 1 over silos (exactly 1 for AVG-w), which bounds the user's sensitivity by C."""
    counts = histogram[silo].astype(np.float64)
    if proportional:
        totals = histogram.sum(axis=0).astype(np.float64)
        return np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    return np.where(counts > 0, 1.0 / histogram.shape[0], 0.0)


def resolve_group_k(group_k: int | str, histogram: np.ndarray) -> int:
    """``k`` of ULDP-GROUP-k: a number, or the ``max`` / ``median`` (rounded up) of records per user."""
    if isinstance(group_k, int):
        return group_k
    per_user = histogram.sum(axis=0)
    per_user = per_user[per_user > 0]
    return int(per_user.max()) if group_k == "max" else int(math.ceil(float(np.median(per_user))))


def round_robin_quota(histogram: np.ndarray, *, group_k: int) -> np.ndarray:
    """``(silos, users)``: how many of its records each user keeps in each silo when at most ``group_k`` records
    per user are kept across silos, taken one per silo in turn (silo 0, 1, ...), as the paper's code does."""
    num_silos, num_users = histogram.shape
    quota = np.zeros_like(histogram)
    for user in range(num_users):
        counts = histogram[:, user]
        full_cycles = 0  # largest r with sum_s min(n_s, r) <= k
        while full_cycles < counts.max() and np.minimum(counts, full_cycles + 1).sum() <= group_k:
            full_cycles += 1
        taken = np.minimum(counts, full_cycles)
        left = group_k - taken.sum()
        for silo in range(num_silos):
            if left > 0 and counts[silo] > full_cycles:
                taken[silo] += 1
                left -= 1
        quota[:, user] = taken
    return quota
