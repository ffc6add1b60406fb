"""Small in-memory datasets the tests pass to ``privsilo.run``."""
from __future__ import annotations

import numpy as np


def tabular(seed: int = 0):
    """60 random records of 20 features in 3 classes, as ((train features, labels), (test features, labels)): 45 and 15."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(60, 20)).astype(np.float32)
    y = rng.integers(0, 3, size=60)
    return (x[:45], y[:45]), (x[45:], y[45:])
