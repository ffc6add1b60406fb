"""PDPM, the three-output perturbation of PLDP-FL (Shen et al., Entropy 2023, Algorithm 2 and Eq. 10).

A client with safe range tau = [c - L/2, c + L/2] and budget eps perturbs one scalar w as follows: with
v = w - c in [-L/2, L/2] and e = exp(eps), output

* ``c + L(e+3) / (2(e-1))`` with probability ``v(e-1) / (L(e+2)) + (e+1) / (2(e+2))``,
* ``c - L(e+1) / (e-1)`` with probability ``(e+3) / (4(e+2)) - v(e-1) / (2L(e+2))``,
* ``c`` with the same probability as the second output.

Guarantee (checked exactly in the tests): for any two inputs in tau the probability of the first output changes
by at most the factor e^eps (attained at the range's ends), that of the other two by at most (e+1)/2 < e^eps,
so one perturbed scalar is eps-LDP. The output is unbiased, E = w, with the exact variance of
[`pdpm_variance`][privsilo.mechanisms.pldp.sampler.pdpm_variance]; the paper's Theorem 1 bound (e+1)(e+3) / (L(e-1)^2) is wrong (it even falls as L grows):
at L = 2, eps = 0.5 the true maximum over tau is 40.52, the bound 14.63.

The paper leaves inputs outside tau undefined. Here they are **clipped** into tau first, so the guarantee holds
for every input; the price is bias: the output is unbiased for the clipped value, not for w.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike


class PdpmOutputs(NamedTuple):
    """The three values PDPM can output for v = w - c (add c for the released value), each an array."""

    high: np.ndarray  # L(e+3) / (2(e-1))
    low: np.ndarray  # -L(e+1) / (e-1)
    zero: np.ndarray  # 0


def _parameters(length: ArrayLike, epsilon: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    length, epsilon = np.asarray(length, dtype=np.float64), np.asarray(epsilon, dtype=np.float64)
    if not (np.isfinite(length).all() and (length > 0).all()):
        raise ValueError("length: every safe-range length L must be finite and > 0")
    if not (np.isfinite(epsilon).all() and (epsilon > 0).all()):
        raise ValueError("epsilon: every budget must be finite and > 0")
    return length, epsilon


def pdpm_outputs(*, length: ArrayLike, epsilon: ArrayLike) -> PdpmOutputs:
    """The output values of PDPM for v = w - c (Eq. 10), broadcast over ``length`` and ``epsilon``."""
    length, epsilon = _parameters(length, epsilon)
    em1 = np.expm1(epsilon)  # e - 1, accurate for small eps
    high = length * (em1 + 4.0) / (2.0 * em1)
    low = -length * (em1 + 2.0) / em1
    return PdpmOutputs(high=high, low=low, zero=np.zeros_like(high))


def pdpm_probabilities(offsets: ArrayLike, *, length: ArrayLike, epsilon: ArrayLike) -> PdpmOutputs:
    """Probabilities of the outputs ``high``, ``low`` and ``zero`` for offsets v = w - c already in [-L/2, L/2]
    (Eq. 10), broadcast over all three arguments. The sampler draws from exactly these."""
    length, epsilon = _parameters(length, epsilon)
    v = np.asarray(offsets, dtype=np.float64)
    em1 = np.expm1(epsilon)
    high = v * em1 / (length * (em1 + 3.0)) + (em1 + 2.0) / (2.0 * (em1 + 3.0))
    low = (1.0 - high) / 2.0  # = (e+3)/(4(e+2)) - v(e-1)/(2L(e+2))
    return PdpmOutputs(high=high, low=low, zero=low)


def pdpm(values: ArrayLike, *, center: ArrayLike, length: ArrayLike, epsilon: ArrayLike, rng: np.random.Generator) -> np.ndarray:
    """Perturb every entry of ``values`` with PDPM (Algorithm 2); returns an array of ``values``' shape.

    ``center`` (c), ``length`` (L > 0) and ``epsilon`` (> 0) are scalars or arrays broadcastable to ``values``
    (one per coordinate). Entries outside [c - L/2, c + L/2], infinite ones included, are clipped into it first
    (a bias, see the module docstring); NaN is refused. One uniform draw per entry from ``rng``.
    """
    values = np.asarray(values, dtype=np.float64)
    if np.isnan(values).any():
        raise ValueError("values: PDPM needs numbers, got NaN")
    center = np.broadcast_to(np.asarray(center, dtype=np.float64), values.shape)
    length = np.broadcast_to(np.asarray(length, dtype=np.float64), values.shape)
    epsilon = np.broadcast_to(np.asarray(epsilon, dtype=np.float64), values.shape)
    if not np.isfinite(center).all():
        raise ValueError("center: every centre must be finite")
    half = length / 2.0
    offsets = np.clip(values - center, -half, half)
    probabilities = pdpm_probabilities(offsets, length=length, epsilon=epsilon)
    outputs = pdpm_outputs(length=length, epsilon=epsilon)
    u = rng.random(values.shape)
    perturbed = np.where(
        u < probabilities.high,
        outputs.high,
        np.where(u < probabilities.high + probabilities.low, outputs.low, outputs.zero),
    )
    return perturbed + center


def pdpm_variance(offsets: ArrayLike, *, length: ArrayLike, epsilon: ArrayLike) -> np.ndarray:
    """Exact variance of PDPM at offset v = w - c in [-L/2, L/2], with e = exp(eps):
    L^2 (e+1)(e+3)(3e+5) / (8(e+2)(e-1)^2) + L v (7 + 2e - e^2) / (4(e-1)(e+2)) - v^2."""
    length, epsilon = _parameters(length, epsilon)
    v = np.asarray(offsets, dtype=np.float64)
    e, em1 = np.exp(epsilon), np.expm1(epsilon)
    constant = length**2 * (e + 1) * (e + 3) * (3 * e + 5) / (8 * (e + 2) * em1**2)
    return constant + length * v * (7 + 2 * e - e**2) / (4 * em1 * (e + 2)) - v**2


def pdpm_max_variance(*, length: ArrayLike, epsilon: ArrayLike) -> np.ndarray:
    """The largest variance over the safe range: the concave quadratic of [`pdpm_variance`][privsilo.mechanisms.pldp.sampler.pdpm_variance] at its vertex
    v* = L (7 + 2e - e^2) / (8(e-1)(e+2)), clamped to [-L/2, L/2]."""
    length, epsilon = _parameters(length, epsilon)
    e, em1 = np.exp(epsilon), np.expm1(epsilon)
    vertex = np.clip(length * (7 + 2 * e - e**2) / (8 * em1 * (e + 2)), -length / 2, length / 2)
    return pdpm_variance(vertex, length=length, epsilon=epsilon)


def paper_variance_bound(*, length: ArrayLike, epsilon: ArrayLike) -> np.ndarray:
    """The bound of the paper's Theorem 1, (e+1)(e+3) / (L(e-1)^2): **not** a bound (see [`pdpm_variance`][privsilo.mechanisms.pldp.sampler.pdpm_variance]);
    kept to show the correction."""
    length, epsilon = _parameters(length, epsilon)
    e, em1 = np.exp(epsilon), np.expm1(epsilon)
    return (e + 1) * (e + 3) / (length * em1**2)


def averaged_noise_std(offsets: ArrayLike, *, length: ArrayLike, epsilon: ArrayLike) -> float:
    """Standard deviation of the server's mean of n independent PDPM outputs, one per uploading client (arrays
    of the n clients' offsets v_i, lengths and budgets): sqrt(sum_i Var_i) / n (Eq. 7 averages the uploads)."""
    variances = np.broadcast_to(pdpm_variance(offsets, length=length, epsilon=epsilon), np.broadcast_shapes(
        np.shape(offsets), np.shape(length), np.shape(epsilon)))
    return float(np.sqrt(variances.sum()) / variances.size)
