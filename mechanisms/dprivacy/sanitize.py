"""SanitizeUpdate (Galli et al., ICISSP 2023, Algorithm 2), with a safe default calibration.

A client that trained hypothesis ``theta_j`` into ``theta_j + delta`` uploads ``theta_j + delta' + rho``, where
``rho`` is Euclidean-Laplace noise (Prop. 3.1) of parameter eps and n is the number of model parameters:

* ``clipped`` (default): ``delta' = delta * min(1, R / ||delta||)`` for a public radius R and eps = n / (nu R).
  The clipped parameters ``x = theta_j + delta'`` lie in the ball of radius R around ``theta_j``, and the upload
  is eps-d-private in x: two possible uploads x, x' of the same hypothesis are told apart by at most
  ``exp(eps ||x - x'||) <= exp(2 R eps) = exp(2 n / nu)``.
* ``paper``: ``delta' = delta`` and eps = n / (nu ||delta||), so eps ||delta|| = n / nu (the paper's Sec. 3.2).
  The noise norm has mean n / eps = nu ||delta||: its scale is a function of the client's own update, which the
  server estimates from one upload (the norm of a Gamma(n) draw has relative spread 1 / sqrt(n)). Kept to
  reproduce the paper; it carries no guarantee.

nu = 0 is the no-noise baseline (eps = inf). Every draw comes from the generator passed in.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from privsilo.mechanisms.dprivacy.laplace import euclidean_laplace
from privsilo.mechanisms.dprivacy.params import Calibration, DPrivacyParams
from privsilo.mechanisms.events import EuclideanLaplaceEvent


def sanitize_update(
    start: np.ndarray, delta: np.ndarray, *, params: DPrivacyParams, rng: np.random.Generator, hypothesis_spread: float
) -> tuple[np.ndarray, EuclideanLaplaceEvent]:
    """The upload ``start + delta' + rho`` and the event describing it (see the module docstring)."""
    delta = np.asarray(delta, dtype=np.float64)
    norm = float(np.linalg.norm(delta))
    if params.calibration is Calibration.CLIPPED:
        radius = float(params.radius)
        if norm > radius:
            delta = delta * (radius / norm)
    else:
        radius = norm
    upload = np.asarray(start, dtype=np.float64) + delta
    epsilon = math.inf if params.nu == 0 or radius == 0 else delta.size / (params.nu * radius)
    if math.isfinite(epsilon):
        upload = upload + euclidean_laplace(delta.size, epsilon=epsilon, rng=rng)
    event = EuclideanLaplaceEvent(
        epsilon=epsilon, radius=radius, calibration=params.calibration.value, hypothesis_spread=hypothesis_spread
    )
    return upload, event


def hypothesis_spread(state: Sequence[np.ndarray]) -> float:
    """The largest Euclidean distance between two hypotheses (0 for one)."""
    vectors = [np.asarray(v, dtype=np.float64) for v in state]
    return max((float(np.linalg.norm(a - b)) for i, a in enumerate(vectors) for b in vectors[i + 1:]), default=0.0)
