"""A silo's noise for one upload: the exact discrete Gaussian (``privsilo.mechanisms.discrete_noise``) against the
continuous Gaussian draw the mechanisms make today (``torch.randn`` in float64 on a CPU generator, as ULDP's silos),
and numpy's ``standard_normal`` beside it, for ``--length`` coordinates at each ``--sigmas``: the exact sampler from
numpy words and from os.urandom (``CryptoRandom``), with its numba-compiled loop and with the numpy passes that stand
in where numba is missing. Timed in turns in this process; medians over ``--repeats`` and the ratios to torch. The
first call's time (numba's compile, or the load of its on-disk cache) is printed apart.

    python -m benchmarks.mechanisms.bench_discrete_noise [--length 1000000] [--sigmas 1 10 1000] [--repeats 15]
"""
from __future__ import annotations

import argparse
import os
import time
from unittest import mock

import numpy as np
import torch

from privsilo.mechanisms import discrete_noise
from privsilo.mechanisms.discrete_noise import discrete_gaussian
from privsilo.protocols.crypto_random import CryptoRandom
from benchmarks.support.timing import median_seconds


def numpy_passes(sigma: float, length: int, rng: np.random.Generator) -> np.ndarray:
    """The sampler as it runs without numba."""
    with mock.patch.object(discrete_noise, "_compiled_loop", lambda: None):
        return discrete_gaussian(sigma, length, rng)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=1_000_000)
    parser.add_argument("--sigmas", type=float, nargs="+", default=[1.0, 10.0, 1000.0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator, rng, crypto = torch.Generator().manual_seed(0), np.random.default_rng(0), CryptoRandom()
    start = time.perf_counter()
    discrete_gaussian(1.0, 1, rng)
    discrete_gaussian(1.0, 1, crypto)  # read-only words: a second compiled signature
    print(f"first calls (numba's compile or cache load): {time.perf_counter() - start:.2f} s; "
          f"load average {os.getloadavg()[0]:.1f}")
    for sigma in args.sigmas:
        times = median_seconds(
            {
                "torch.randn float64": lambda: torch.randn(args.length, generator=generator, dtype=torch.float64).mul_(sigma),
                "numpy standard_normal": lambda: rng.standard_normal(args.length) * sigma,
                "exact discrete (numpy words)": lambda: discrete_gaussian(sigma, args.length, rng),
                "exact discrete (os.urandom)": lambda: discrete_gaussian(sigma, args.length, crypto),
                "exact, numpy passes (no numba)": lambda: numpy_passes(sigma, args.length, rng),
            },
            repeats=args.repeats,
        )
        base = times["torch.randn float64"]
        print(f"sigma {sigma:g}, {args.length:,} coordinates (median of {args.repeats}), "
              f"load average {os.getloadavg()[0]:.1f}:")
        for name, seconds in times.items():
            print(f"  {name:32s} {1e3 * seconds:8.1f} ms   {seconds / base:5.2f}x")


if __name__ == "__main__":
    main()
