"""Rotated images: the clustered benchmark of IFCA (Ghosh et al. 2020) that Galli et al. (ICISSP 2023) use on
FEMNIST. Silo i's images are all rotated by ``angles[i mod k]`` (k = number of angles), so the silos of one angle
form a true group; the test set holds one rotated copy of every test image per angle, labelled with its group.
Angles are multiples of 90 degrees (counter-clockwise), done exactly with ``np.rot90``.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from privsilo.simulator.data.types import Dataset


def rotate_silos(dataset: Dataset, parts: Sequence[np.ndarray], *, angles: Sequence[int]) -> Dataset:
    """``dataset`` with each silo's training images rotated by its group's angle and the test set replicated
    once per angle; ``train_groups`` / ``test_groups`` give each record's angle index."""
    if dataset.kind != "image" or dataset.x_train.ndim != 4:
        raise ValueError(f"rotations need an image dataset, got {dataset.name!r} ({dataset.kind})")
    if any(angle % 90 for angle in angles):
        raise ValueError(f"rotation angles must be multiples of 90 degrees, got {list(angles)}")
    x_train = dataset.x_train.copy()
    train_groups = np.full(len(x_train), -1, dtype=np.int64)
    for silo, records in enumerate(parts):
        group = silo % len(angles)
        x_train[records] = _rotate(dataset.x_train[records], angles[group])
        train_groups[records] = group
    x_test = np.concatenate([_rotate(dataset.x_test, angle) for angle in angles])
    return dataclasses.replace(
        dataset,
        x_train=x_train,
        x_test=x_test,
        y_test=np.tile(dataset.y_test, len(angles)),
        train_groups=train_groups,
        test_groups=np.repeat(np.arange(len(angles), dtype=np.int64), len(dataset.x_test)),
        group_names=tuple(f"{angle} deg" for angle in angles),
    )


def _rotate(images: np.ndarray, angle: int) -> np.ndarray:
    """Images shaped (n, channels, height, width) rotated counter-clockwise by ``angle`` degrees."""
    return np.ascontiguousarray(np.rot90(images, k=(angle // 90) % 4, axes=(-2, -1)))
