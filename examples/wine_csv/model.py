"""A user's own model for tabular data: a small MLP with layer normalisation (no BatchNorm, which DP-SGD cannot
clip per record; LayerNorm treats each record on its own)."""
from __future__ import annotations

import math

from torch import nn


def tabular_mlp(*, feature_shape: tuple[int, ...], num_classes: int, hidden: int = 32) -> nn.Module:
    """``feature_shape`` and ``num_classes`` come from privsilo (the dataset's); ``hidden`` from ``model.kwargs``."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(feature_shape), hidden), nn.LayerNorm(hidden), nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


def tabular_mlp_with_batchnorm(*, feature_shape: tuple[int, ...], num_classes: int, hidden: int = 32) -> nn.Module:
    """The same with BatchNorm: fine for FedAvg, refused by the mechanisms that clip per-record gradients."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(feature_shape), hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )
