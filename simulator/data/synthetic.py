"""Galli et al.'s synthetic task (ICISSP 2023, Sec. 4.1 and appendix): two linear models in R^2.

Every user holds 10 records drawn from one of k = 2 distributions: ``y = x . theta_g + u`` with
``u ~ Uniform[0, 1)``, ``theta_1 = (5, 6)`` and ``theta_2 = (4, -4.5)`` (the paper prints ``[+4, 4.5]``; its
Figure 1 puts the second optimum below the axis, so we read a lost minus sign). The paper does not give the
distribution of x; we draw it standard normal. Users alternate between the groups (user u is in group
``u mod 2``), each user is one silo (``partition: natural``), and the test set holds 50 held-out users per group.
"""
from __future__ import annotations

import numpy as np

from privsilo.simulator.data.types import Dataset

THETAS = np.array([[5.0, 6.0], [4.0, -4.5]])
RECORDS_PER_USER = 10
TEST_USERS_PER_GROUP = 50
SEED_TAG = 0x5EED_11FE  # separates this dataset's stream from every other draw of the same seed


def load_synthetic_linear(*, users: int, seed: int) -> Dataset:
    """``users`` training users (one per silo) of 10 records each, and the held-out test users."""
    if users < 1:
        raise ValueError(f"users must be >= 1, got {users}")
    rng = np.random.default_rng([seed, SEED_TAG])
    train_groups = np.repeat(np.arange(users) % len(THETAS), RECORDS_PER_USER)
    test_groups = np.repeat(np.arange(len(THETAS)), TEST_USERS_PER_GROUP * RECORDS_PER_USER)
    x_train, y_train = _draw(train_groups, rng)
    x_test, y_test = _draw(test_groups, rng)
    natural = tuple(np.arange(u * RECORDS_PER_USER, (u + 1) * RECORDS_PER_USER, dtype=np.int64) for u in range(users))
    return Dataset(name="synthetic_linear", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test,
                   num_classes=1, feature_shape=(2,), kind="regression", natural_partition=natural,
                   train_groups=train_groups, test_groups=test_groups,
                   group_names=tuple(f"theta_{g + 1}" for g in range(len(THETAS))))


def _draw(groups: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.standard_normal((len(groups), THETAS.shape[1]))
    y = np.einsum("ij,ij->i", x, THETAS[groups]) + rng.random(len(groups))
    return x.astype(np.float32), y.astype(np.float32)
