"""Personalised privacy-budget distributions of the rPDP-FL experiments (Liu et al., CCS 2024, Sec. 7).

* :class:`ThreeLevels`: each record picks one of three budgets (paper: 0.1 / 1.0 / 5.0 for 70% / 20% / 10%).
* :class:`BoundedPareto`: Pareto with shape 1.0 truncated to [0.1, 10], sampled exactly by inverting its CDF.
* :class:`BoundedMixGauss`: mixture of N(0.1, 0.01), N(1.0, 0.05), N(5.0, 0.5) with weights 0.7 / 0.2 / 0.1,
  bounded to [0.1, 10] (the paper's range for both continuous distributions).

Every distribution is a frozen, validated dataclass whose ``sample(n, rng=...)`` draws only from the given
``numpy.random.Generator``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special


def _check(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field}: {message}")


def _finite_positive(value: float, field: str) -> None:
    _check(isinstance(value, (int, float)) and math.isfinite(value) and value > 0, field, f"{value!r} must be a finite number > 0")


def _bounds(eps_min: float, eps_max: float) -> None:
    _finite_positive(eps_min, "eps_min")
    _finite_positive(eps_max, "eps_max")
    _check(eps_max > eps_min, "eps_max", f"{eps_max} is below eps_min {eps_min}")


def _weights(values: tuple[float, ...], field: str, size: int) -> None:
    _check(len(values) == size, field, f"needs {size} entries, got {len(values)}")
    _check(all(math.isfinite(v) and v >= 0 for v in values), field, f"{values} must be >= 0")
    _check(abs(sum(values) - 1.0) < 1e-9, field, f"{values} must sum to 1")


def _count(n: int) -> int:
    _check(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0, "n", f"{n!r} must be >= 0")
    return int(n)


@dataclass(frozen=True)
class ThreeLevels:
    """A fixed budget per category: ``levels[k]`` with probability ``ratios[k]`` (Sec. 7, ThreeLevels)."""

    levels: tuple[float, ...] = (0.1, 1.0, 5.0)
    ratios: tuple[float, ...] = (0.7, 0.2, 0.1)

    def __post_init__(self) -> None:
        _check(len(self.levels) >= 1, "levels", "needs at least one level")
        for level in self.levels:
            _finite_positive(level, "levels")
        _weights(self.ratios, "ratios", len(self.levels))

    def sample(self, n: int, *, rng: np.random.Generator) -> np.ndarray:
        """``n`` i.i.d. budgets (categories drawn independently, not in fixed blocks)."""
        return np.asarray(self.levels, dtype=np.float64)[rng.choice(len(self.levels), size=_count(n), p=self.ratios)]


@dataclass(frozen=True)
class BoundedPareto:
    """Pareto(shape, scale=eps_min) conditioned on ``<= eps_max`` (Sec. 7, BoundedPareto).

    CDF ``F(x) = (1 - (eps_min / x)^shape) / (1 - (eps_min / eps_max)^shape)`` on [eps_min, eps_max]; samples are
    ``F^-1(U)`` for uniform ``U``, so no mass piles up at the bounds (unlike clipping an unbounded Pareto).
    """

    shape: float = 1.0
    eps_min: float = 0.1
    eps_max: float = 10.0

    def __post_init__(self) -> None:
        _finite_positive(self.shape, "shape")
        _bounds(self.eps_min, self.eps_max)

    def cdf(self, x: np.ndarray) -> np.ndarray:
        x = np.clip(np.asarray(x, dtype=np.float64), self.eps_min, self.eps_max)
        mass = -math.expm1(self.shape * math.log(self.eps_min / self.eps_max))
        return -np.expm1(self.shape * np.log(self.eps_min / x)) / mass

    def sample(self, n: int, *, rng: np.random.Generator) -> np.ndarray:
        mass = -math.expm1(self.shape * math.log(self.eps_min / self.eps_max))
        u = rng.random(_count(n))
        values = self.eps_min * np.exp(-np.log1p(-u * mass) / self.shape)
        return np.clip(values, self.eps_min, self.eps_max)


@dataclass(frozen=True)
class BoundedMixGauss:
    """Gaussian mixture truncated to [eps_min, eps_max] (Sec. 7, BoundedMixGauss; bounds [0.1, 10] as in the paper).

    Truncated, not clipped: each record's component is drawn by ``weights``, then its value from that Gaussian
    conditioned on the bounds (inverse-CDF sampling). Clipping, as the authors' code does, would put about 35% of
    all records exactly on 0.1 (half of the 0.7-weight component centred on 0.1); truncation keeps a continuous
    density, as the paper describes ("an arbitrary budget in [0.1, 10]"), and keeps the component weights.
    """

    means: tuple[float, ...] = (0.1, 1.0, 5.0)
    stds: tuple[float, ...] = (0.01, 0.05, 0.5)
    weights: tuple[float, ...] = (0.7, 0.2, 0.1)
    eps_min: float = 0.1
    eps_max: float = 10.0

    def __post_init__(self) -> None:
        _bounds(self.eps_min, self.eps_max)
        _check(len(self.means) >= 1, "means", "needs at least one component")
        _check(all(math.isfinite(m) for m in self.means), "means", f"{self.means} must be finite")
        _check(len(self.stds) == len(self.means), "stds", f"needs {len(self.means)} entries, got {len(self.stds)}")
        for std in self.stds:
            _finite_positive(std, "stds")
        _weights(self.weights, "weights", len(self.means))
        low, high = self._standardised_bounds()
        _check(
            bool(np.all(special.ndtr(high) - special.ndtr(low) > 1e-12)),
            "means",
            f"some component has no mass in [{self.eps_min}, {self.eps_max}]",
        )

    def _standardised_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        mean, std = np.asarray(self.means, dtype=np.float64), np.asarray(self.stds, dtype=np.float64)
        return (self.eps_min - mean) / std, (self.eps_max - mean) / std

    def sample(self, n: int, *, rng: np.random.Generator) -> np.ndarray:
        count = _count(n)
        component = rng.choice(len(self.means), size=count, p=self.weights)
        low, high = self._standardised_bounds()
        cdf_low, cdf_high = special.ndtr(low)[component], special.ndtr(high)[component]
        z = special.ndtri(cdf_low + rng.random(count) * (cdf_high - cdf_low))
        values = np.asarray(self.means)[component] + np.asarray(self.stds)[component] * z
        return np.clip(values, self.eps_min, self.eps_max)


def budgets_from_column(values: object) -> np.ndarray:
    """Validate user-provided per-record budgets: a 1-D array of finite numbers > 0 (float64 copy)."""
    budgets = np.array(values, dtype=np.float64)
    _check(budgets.ndim == 1, "values", f"must be one-dimensional, got shape {budgets.shape}")
    bad = ~np.isfinite(budgets) | (budgets <= 0)
    _check(not bad.any(), "values", f"{int(bad.sum())} of {budgets.size} budgets are not finite and > 0")
    return budgets


_FACTORIES: dict[str, Callable[..., object]] = {
    "three_levels": ThreeLevels,
    "bounded_pareto": BoundedPareto,
    "bounded_mix_gauss": BoundedMixGauss,
}


def make_distribution(name: str, **params: object) -> ThreeLevels | BoundedPareto | BoundedMixGauss:
    """Build a distribution by name ("three_levels", "bounded_pareto", "bounded_mix_gauss"); lists -> tuples."""
    _check(name in _FACTORIES, "name", f"{name!r} is not one of {sorted(_FACTORIES)}")
    params = {key: tuple(value) if isinstance(value, list) else value for key, value in params.items()}
    return _FACTORIES[name](**params)
