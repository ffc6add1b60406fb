"""The mask PRG of secure aggregation: ``masks.mask_sum`` (AES-256-CTR streams, each added to the total from one
reused row) against the ChaCha20 streams summed in blocks of 16 rows that it replaced, on a silo's masks of one
round: K + 1 streams of the model's length (default: ``may_lie``'s K = 78 at 1,000 silos and the digits MLP's
55,210 words). Then the two ciphers alone: one keystream of the same length written into an array. Everything
is timed in turns in this process; medians over ``--repeats`` and their ratio.

    python -m benchmarks.protocols.bench_mask_prg [--streams 79 30] [--length 55210] [--repeats 20]
"""
from __future__ import annotations

import argparse
import os

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from privsilo.protocols.secure_aggregation.masks import MaskStreams, mask_sum
from benchmarks.support.timing import median_seconds

_BLOCK_ROWS = 16


def _chacha20_nonce(round_index: int) -> bytes:
    return (0).to_bytes(4, "little") + round_index.to_bytes(12, "little")


def chacha20_block_sum(plus: list[bytes], minus: list[bytes], *, round_index: int, length: int) -> np.ndarray:
    """The replaced version: ChaCha20 keystreams (RFC 8439, nonce = round), 16 rows expanded, then summed."""
    total = np.zeros(length, dtype=np.uint64)
    zeros = bytes(8 * length)
    block = np.empty((min(_BLOCK_ROWS, max(len(plus), len(minus), 1)), length), dtype=np.uint64)
    nonce = _chacha20_nonce(round_index)
    for keys, add in ((plus, np.add), (minus, np.subtract)):
        for start in range(0, len(keys), len(block)):
            chunk = keys[start:start + len(block)]
            for row, key in zip(block, chunk):
                Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor().update_into(zeros, memoryview(row).cast("B"))
            add(total, block[:len(chunk)].sum(axis=0, dtype=np.uint64), out=total)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[79, 30], help="K + 1 (79: may_lie, 30: auto)")
    parser.add_argument("--length", type=int, default=55_210)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    print("| streams | words | AES-256-CTR, row by row (ms) | ChaCha20, blocks of 16 (ms) | ratio |")
    print("|---:|---:|---:|---:|---:|")
    for streams in args.streams:
        keys = [os.urandom(32) for _ in range(streams)]
        plus, minus = keys[: streams // 2], keys[streams // 2:]
        seconds = median_seconds({
            "new": lambda: mask_sum(plus, minus, round_index=1, length=args.length),
            "old": lambda: chacha20_block_sum(plus, minus, round_index=1, length=args.length)}, repeats=args.repeats)
        new_ms, old_ms = 1e3 * seconds["new"], 1e3 * seconds["old"]
        print(f"| {streams} | {args.length} | {new_ms:.2f} | {old_ms:.2f} | {new_ms / old_ms:.3f} |")
    key, row, zeros = os.urandom(32), np.empty(args.length, dtype=np.uint64), bytes(8 * args.length)
    writer = MaskStreams(args.length)
    seconds = median_seconds({
        "aes": lambda: writer.write(key, round_index=1, out=row),
        "chacha": lambda: Cipher(algorithms.ChaCha20(key, _chacha20_nonce(1)), mode=None).encryptor().update_into(
            zeros, memoryview(row).cast("B"))}, repeats=10 * args.repeats)
    aes_ms, chacha_ms = 1e3 * seconds["aes"], 1e3 * seconds["chacha"]
    print(f"\none keystream of {args.length} words: AES-256-CTR {aes_ms:.3f} ms, ChaCha20 {chacha_ms:.3f} ms, "
          f"ratio {aes_ms / chacha_ms:.3f}")


if __name__ == "__main__":
    main()
