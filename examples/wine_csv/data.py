"""Loader of ``wine.csv``: the UCI Wine data (Aeberhard and Forina, 1991; 178 wines of three cultivars, 13
chemical measurements; CC BY 4.0), as a user's own CSV would be read. Returns privsilo's loader format."""
from __future__ import annotations

from pathlib import Path

import numpy as np

CSV = Path(__file__).with_name("wine.csv")


def load_wine_csv(*, path: str | None = None, label: str = "cultivar", test_fraction: float = 0.25, seed: int = 0):
    """``((x_train, y_train), (x_test, y_test))`` from a CSV with a header row and an integer class column
    ``label``: a seeded split, features standardised with the training split's mean and standard deviation."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    table = np.genfromtxt(path or CSV, delimiter=",", names=True)
    columns = [name for name in table.dtype.names if name != label]
    features = np.stack([table[name] for name in columns], axis=1)
    labels = table[label]  # read as floats; privsilo checks they are integer classes
    order = np.random.default_rng(seed).permutation(len(labels))
    cut = int(round(len(labels) * (1.0 - test_fraction)))
    train, test = order[:cut], order[cut:]
    mean, std = features[train].mean(axis=0), features[train].std(axis=0)
    scaled = (features - mean) / np.where(std > 0, std, 1.0)
    return (scaled[train], labels[train]), (scaled[test], labels[test])
