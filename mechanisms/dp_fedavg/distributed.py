"""``noise: distributed``: the distributed discrete Gaussian (Kairouz, Liu, Steinke, "The Distributed Discrete
Gaussian Mechanism for Federated Learning with Secure Aggregation", ICML 2021, Algorithm 1 and 2).

Each silo clips its update to C, scales it by 1/gamma, rotates it with a randomized Hadamard transform (signs
from the round's public seed, the same for every silo), rounds it to integers by conditional randomized rounding
(redrawn until its L2 norm is within Theorem 1's bound, see :func:`rounded_norm_bound`) and adds
``N_Z(0, sigma^2)`` per coordinate (the exact sampler of :mod:`privsilo.mechanisms.discrete_noise`). The integer vectors
are summed exactly by secure aggregation (integers pass its fixed-point codec unchanged); the server reduces the
sum modulo m = 2^bits into the signed range, un-rotates it and multiplies by gamma: post-processing of the sum.
Silos never reduce mod m themselves (a sum of residues would reveal the carries).

Parameters (:class:`DistributedSetting`), a rule of privsilo's, not the paper's (which picks the bits for
communication and gamma from them): ``gamma = C / (GRANULARITY_STEPS sqrt(d'))``, d' the model's size padded as
:func:`padded_dimension` says, so that rounding inflates the sensitivity by a factor of at most 1 + 1/GRANULARITY_STEPS; sigma =
z C / (gamma sqrt(N)), so that N silos together add the central noise z C; and the bits such that the sum of N
uploads never wraps around: ``2^(bits-1) > N (Delta_2 + NOISE_TAIL sigma)`` (each coordinate of a rounded update
is at most its norm Delta_2; a silo's noise exceeds NOISE_TAIL sigma with probability below 2 d' e^-200).
Accounting: :mod:`privsilo.mechanisms.dp_fedavg.distributed_accountant`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BLOCK = 1024
"""Beyond BLOCK coordinates the rotation is block-diagonal, one Hadamard transform per BLOCK coordinates, so that
padding adds fewer than BLOCK coordinates (rather than up to d) to what every silo uploads."""
GRANULARITY_STEPS = 100
"""C / gamma = GRANULARITY_STEPS sqrt(d'): a rounded update's norm bound exceeds C / gamma by at most 1 % (beta = 0;
about 0.01 % at beta = e^-1/2 and the digits MLP's d')."""
NOISE_TAIL = 20
"""A silo's noise coordinate is taken to lie within NOISE_TAIL sigma (P(|N_Z(0, sigma^2)| > 20 sigma) < 2 e^-200)."""
MIN_SIGMA = 0.5
"""Kairouz et al.'s Proposition 14 needs sigma >= 1/2 (in units of gamma)."""


def padded_dimension(size: int) -> int:
    """d': the next power of two >= ``size`` up to :data:`BLOCK`, beyond it the next multiple of :data:`BLOCK`."""
    if size <= BLOCK:
        return 1 << max(size - 1, 0).bit_length()
    return -(-size // BLOCK) * BLOCK


def hadamard(vector: np.ndarray) -> np.ndarray:
    """The orthonormal Walsh-Hadamard transform ``H x / sqrt(b)`` of each block of b = min(d, BLOCK) coordinates
    (b a power of two dividing d; its own inverse), by d log2 b butterflies."""
    size = vector.size
    block = min(size, BLOCK)
    out, half = np.array(vector, dtype=np.float64), 1
    while half < block:
        pairs = out.reshape(-1, 2, half)
        out = np.stack((pairs[:, 0] + pairs[:, 1], pairs[:, 0] - pairs[:, 1]), axis=1).reshape(size)
        half *= 2
    return out / math.sqrt(block)


def _signs(seed: int, size: int) -> np.ndarray:
    """The rotation's diagonal D: ``size`` signs drawn from the round's public seed."""
    return np.random.default_rng(seed).integers(0, 2, size) * 2.0 - 1.0


def rotate(vector: np.ndarray, seed: int) -> np.ndarray:
    """``H D x``, x padded with zeros to d' (Kairouz et al., Sec. 4: flattening before rounding; H block-diagonal
    beyond :data:`BLOCK` coordinates)."""
    size = padded_dimension(vector.size)
    padded = np.zeros(size)
    padded[: vector.size] = vector
    return hadamard(_signs(seed, size) * padded)


def unrotate(vector: np.ndarray, seed: int, size: int) -> np.ndarray:
    """``(H D)^-1 y = D H y``, cut back to the model's ``size``."""
    return (_signs(seed, vector.size) * hadamard(vector))[:size]


def rounded_norm_bound(scaled_clip: float, dimension: int, beta: float) -> float:
    """Delta_2 of Kairouz et al.'s Theorem 1: the L2 norm a conditionally rounded vector may have, given the
    norm ``c / gamma`` before rounding, d' and beta: ``min(c/gamma + sqrt(d), sqrt(c^2/gamma^2 + d/4 +
    sqrt(2 log(1/beta)) (c/gamma + sqrt(d)/2)))`` (the first alone at beta = 0). Randomized rounding moves each
    coordinate by less than 1, so the first always holds; one rounding meets the second with probability >= 1 - beta."""
    root_d = math.sqrt(dimension)
    always = scaled_clip + root_d
    if beta == 0.0:
        return always
    likely = math.sqrt(scaled_clip**2 + dimension / 4 + math.sqrt(2 * math.log(1 / beta)) * (scaled_clip + root_d / 2))
    return min(always, likely)


def conditional_round(vector: np.ndarray, bound: float, rng: np.random.Generator) -> np.ndarray:
    """Randomized rounding (each coordinate to floor(x) + Bernoulli(x - floor(x))), redrawn until the L2 norm is at
    most ``bound`` (Kairouz et al., Algorithm 1, conditional randomized rounding). The result's norm bound is what
    the privacy rests on; the rounding's distribution only affects the error."""
    low = np.floor(vector)
    fraction = vector - low
    while True:
        rounded = low + (rng.random(vector.size) < fraction)
        if float(np.linalg.norm(rounded)) <= bound:
            return rounded


@dataclass(frozen=True)
class DistributedSetting:
    """The distributed discrete Gaussian's public parameters for N silos and a model of d parameters (see the
    module docstring for the rule)."""

    gamma: float  # granularity: a silo's clipped update is divided by gamma before rounding
    dimension: int  # d', the padded dimension
    sigma: float  # each silo's noise N_Z(0, sigma^2) per coordinate, in units of gamma
    l2_bound: float  # Delta_2 (Theorem 1), in units of gamma
    bits: int  # the modulus m = 2^bits
    num_silos: int

    @classmethod
    def choose(cls, *, clip_norm: float, noise_multiplier: float, num_silos: int, num_parameters: int,
               beta: float) -> "DistributedSetting":
        dimension = padded_dimension(num_parameters)
        scaled_clip = GRANULARITY_STEPS * math.sqrt(dimension)
        gamma = clip_norm / scaled_clip
        sigma = noise_multiplier * scaled_clip / math.sqrt(num_silos)
        l2_bound = rounded_norm_bound(scaled_clip, dimension, beta)
        reach = num_silos * (l2_bound + NOISE_TAIL * sigma)  # the sum's largest coordinate, noise tails aside
        return cls(gamma=gamma, dimension=dimension, sigma=sigma, l2_bound=l2_bound,
                   bits=math.ceil(reach).bit_length() + 1, num_silos=num_silos)

    @property
    def modulus(self) -> int:
        return 1 << self.bits

    @property
    def l1_bound(self) -> float:
        """||x||_1 of a rounded update: at most sqrt(d') Delta_2, and at most Delta_2^2 (integer coordinates)."""
        return min(math.sqrt(self.dimension) * self.l2_bound, self.l2_bound**2)

    @property
    def upload_bound(self) -> float:
        """The largest |coordinate| one silo uploads (noise tails aside): Delta_2 + NOISE_TAIL sigma."""
        return self.l2_bound + NOISE_TAIL * self.sigma


def reduce_signed(total: np.ndarray, modulus: int) -> np.ndarray:
    """The exact integer sum (float64 carrying integers) reduced mod m into [-m/2, m/2)."""
    integers = np.rint(total).astype(np.int64)
    return (np.mod(integers + modulus // 2, modulus) - modulus // 2).astype(np.float64)
