"""Shamir sharing of secure aggregation's seeds: the prime field of ``sharing.py`` (p = 2^130 - 5, Python
integers) against GF(2^128) elements in pure Python (pycryptodome's ``Shamir.split``, and the recovery with cached
Lagrange coefficients the protocol used before), in the same run.

One silo's work per round is two splits (mask seed, self-mask seed) among its share set; the server's is one
recovery per seed. Sizes are ``auto``'s at 1,000 silos (K = 29, t = 17 with an honest-but-curious server; K = 52,
t = 37 when the server may lie). Medians of ``--repeats`` timings of ``--batch`` operations each.

    python -m benchmarks.protocols.bench_shamir_fields [--repeats 5] [--batch 200]
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

from Crypto.Protocol.SecretSharing import Shamir, _Element

from privsilo.protocols.crypto_random import CryptoRandom
from privsilo.protocols.secure_aggregation.sharing import recover, split


@functools.lru_cache(maxsize=64)
def _gf_lagrange(indices: tuple[int, ...]) -> tuple[_Element, ...]:
    points = [_Element(i) for i in indices]
    out = []
    for j, x_j in enumerate(points):
        numerator, denominator = _Element(1), _Element(1)
        for m, x_m in enumerate(points):
            if m != j:
                numerator *= x_m
                denominator *= x_j + x_m
        out.append(numerator * denominator.inverse())
    return tuple(out)


def gf_recover(shares, threshold: int) -> bytes:
    chosen = shares[:threshold]
    secret = _Element(0)
    for coefficient, (_, value) in zip(_gf_lagrange(tuple(i for i, _ in chosen)), chosen):
        secret += coefficient * _Element(value)
    return secret.encode()


def timed(function, batch: int) -> float:
    started = time.perf_counter()
    for _ in range(batch):
        function()
    return (time.perf_counter() - started) / batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    random = CryptoRandom()
    secret = os.urandom(16)
    print("| share set s | threshold t | GF(2^128) split ms | prime split ms | split ratio | GF(2^128) recover ms "
          "| prime recover ms | recover ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for share_set, threshold in ((30, 17), (53, 37)):
        holders = list(range(share_set))
        gf_shares = Shamir.split(threshold, share_set, secret)
        prime_shares = list(split(secret, threshold=threshold, holders=holders, random=random).values())
        assert gf_recover(gf_shares, threshold) == recover(prime_shares, threshold=threshold) == secret
        rows = {name: [] for name in ("gf split", "prime split", "gf recover", "prime recover")}
        for _ in range(args.repeats):  # interleaved, so both see the same load
            rows["gf split"].append(timed(lambda: Shamir.split(threshold, share_set, secret), args.batch))
            rows["prime split"].append(timed(lambda: split(secret, threshold=threshold, holders=holders, random=random), args.batch))
            rows["gf recover"].append(timed(lambda: gf_recover(gf_shares, threshold), args.batch))
            rows["prime recover"].append(timed(lambda: recover(prime_shares, threshold=threshold), args.batch))
        m = {name: statistics.median(values) * 1e3 for name, values in rows.items()}
        print(f"| {share_set} | {threshold} | {m['gf split']:.3f} | {m['prime split']:.3f} | "
              f"{m['gf split'] / m['prime split']:.0f}x | {m['gf recover']:.3f} | {m['prime recover']:.3f} | "
              f"{m['gf recover'] / m['prime recover']:.0f}x |")


if __name__ == "__main__":
    main()
