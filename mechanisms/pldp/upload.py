"""One client's perturbation of a whole upload with PDPM: every coordinate, or k sampled coordinates.

* ``coordinates = None`` (``coordinates: all``, the paper): every one of the d coordinates is perturbed with the
  client's eps. Each scalar is eps-LDP, so the upload is d * eps-LDP (basic composition, attained when every
  coordinate sits at an end of the range).
* ``coordinates = k``: k coordinates are sampled uniformly without replacement (independently of the data),
  each perturbed with eps / k, and reported as c + (d/k) (PDPM(w_j) - c); the other d - k report the centre c.
  The estimate stays unbiased (E = c + (k/d)(d/k)(w_j - c) = w_j), and for every sample S the upload is
  k * (eps/k) = eps-LDP; a mixture over the same data-independent S keeps that bound, so the upload is eps-LDP.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privsilo.mechanisms.pldp.sampler import pdpm


@dataclass(frozen=True)
class ClientPerturbation:
    """A client's PDPM parameters: safe range [center - length/2, center + length/2], budget ``epsilon`` (per
    coordinate with ``coordinates`` None, per upload with ``coordinates`` = k) and k (None = all)."""

    length: float
    center: float
    epsilon: float
    coordinates: int | None = None

    def __post_init__(self) -> None:
        for name in ("length", "epsilon"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name}: must be finite and > 0, got {value!r}")
        if not np.isfinite(self.center):
            raise ValueError(f"center: must be finite, got {self.center!r}")
        if self.coordinates is not None and self.coordinates < 1:
            raise ValueError(f"coordinates: must be >= 1, got {self.coordinates}")

    def perturbed_per_upload(self, dimension: int) -> int:
        """How many coordinates of a d-dimensional upload are perturbed (d, or k)."""
        if self.coordinates is None:
            return dimension
        if self.coordinates > dimension:
            raise ValueError(f"coordinates: k = {self.coordinates} exceeds the upload's {dimension} coordinates")
        return self.coordinates

    @property
    def epsilon_per_coordinate(self) -> float:
        """The LDP budget of one perturbed scalar: eps, or eps / k."""
        return self.epsilon if self.coordinates is None else self.epsilon / self.coordinates

    def epsilon_per_upload(self, dimension: int) -> float:
        """The LDP budget of one whole upload of d coordinates: d * eps, or eps (basic composition)."""
        return self.perturbed_per_upload(dimension) * self.epsilon_per_coordinate

    def extreme_input(self, direction: np.ndarray) -> np.ndarray:
        """The input in the safe range with the largest component along ``direction``: the vertex
        ``c + (L/2) sign(u)`` of the box [c - L/2, c + L/2]^d, which maximises ``<x, u>`` over it. Every coordinate
        sits at an end of the range, where PDPM's output probabilities differ most (the case in which basic
        composition over the coordinates is attained): an audit's strongest canary input (Andrew et al. 2024,
        Sec. 3, canary updates along a random direction, here kept inside the range PLDP-FL's guarantee covers)."""
        return self.center + (self.length / 2.0) * np.sign(np.asarray(direction, dtype=np.float64))

    def perturb(self, values: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """The perturbed upload of the flat vector ``values`` (all draws from ``rng``).

        A NaN (local training diverged, e.g. from a very noisy global model) is replaced by the centre and +-inf
        is clipped like any value outside the range, so every input PDPM sees lies in the safe range and the
        guarantee holds whatever the local training did."""
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 1:
            raise ValueError(f"values: expected a flat vector, got shape {values.shape}")
        values = np.where(np.isnan(values), self.center, values)
        dimension = values.size
        k = self.perturbed_per_upload(dimension)
        settings = {"center": self.center, "length": self.length, "epsilon": self.epsilon_per_coordinate}
        if self.coordinates is None:
            return pdpm(values, **settings, rng=rng)
        chosen = rng.choice(dimension, size=k, replace=False)
        upload = np.full(dimension, self.center)
        upload[chosen] = self.center + (dimension / k) * (pdpm(values[chosen], **settings, rng=rng) - self.center)
        return upload
