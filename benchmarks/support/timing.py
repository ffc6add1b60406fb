"""Timing shared by the in-process micro-benchmarks (``bench_per_sample_grads.py``, ``bench_mask_prg.py``)."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def median_seconds(candidates: dict[str, Callable[[], object]], *, repeats: int) -> dict[str, float]:
    """Median time of each candidate; repeats are interleaved so that load changes on a shared machine hit
    every candidate alike."""
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for fn in candidates.values():
        fn()  # warm-up
    for _ in range(repeats):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}
