"""The Laplace mechanism under the Euclidean distance in R^n (Galli et al., ICISSP 2023, Prop. 3.1).

Its density around ``x0`` is ``K exp(-eps ||x - x0||_2)``: it is ``eps``-d-private for the Euclidean distance d
(``P[R(x) in S] <= exp(eps d(x, x')) P[R(x') in S]``, Chatzikokolakis et al. 2013). The density depends on the
noise only through its norm, so a draw factors into a norm with density ``eps^n r^(n-1) exp(-eps r) / Gamma(n)``,
i.e. Gamma(shape n, scale 1/eps) (Prop. 3.1, item 2), times a direction uniform on the unit sphere (a normalised
standard Gaussian vector). Each coordinate then has mean 0 and variance ``(n + 1) / eps^2`` (item 3).
"""
from __future__ import annotations

import math

import numpy as np


def euclidean_laplace(dim: int, *, epsilon: float, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
    """Draw Euclidean-Laplace noise in R^dim: shape ``(dim,)``, or ``(size, dim)`` given ``size``.

    ``epsilon`` is the d-privacy parameter per unit of Euclidean distance; the noise norm has mean
    ``dim / epsilon``. Every draw comes from ``rng`` (norms first, then the Gaussian directions).
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
    if not (isinstance(epsilon, (int, float, np.floating)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    if size is not None and (isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0):
        raise ValueError(f"size must be None or an integer >= 0, got {size!r}")
    count = 1 if size is None else int(size)
    norms = rng.gamma(shape=float(dim), scale=1.0 / float(epsilon), size=count)
    directions = rng.standard_normal((count, int(dim)))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    noise = directions * norms[:, None]
    return noise[0] if size is None else noise
