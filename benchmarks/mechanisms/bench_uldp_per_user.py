"""Per-user local training of ULDP-AVG: all of a silo's users at once (``torch.func`` vmap over stacked
per-user parameters, :func:`privsilo.mechanisms.uldp.training.train_users`) against the user-by-user loop
(:func:`privsilo.mechanisms.uldp.training.train_users_loop`).

Run: ``python -m benchmarks.mechanisms.bench_uldp_per_user [--users 200] [--steps 10] [--repeats 5]``. The two agree
(checked before timing); the medians of interleaved repeats and their ratio, measured in the same run, are printed
for a heart-disease-sized logistic regression, the MLP and the paper's small MNIST CNN.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from privsilo.mechanisms.uldp.training import train_users, train_users_loop


def paper_cnn() -> torch.nn.Module:
    """The ULDP-FL paper's 21,840-parameter MNIST CNN: conv 1->10 k5, conv 10->20 k5, FC 320->50->10."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 10, kernel_size=5), torch.nn.MaxPool2d(2), torch.nn.ReLU(),
        torch.nn.Conv2d(10, 20, kernel_size=5), torch.nn.MaxPool2d(2), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(320, 50), torch.nn.ReLU(), torch.nn.Linear(50, 10),
    )


CASES = {
    "logistic regression, 13 features (heart disease)": (lambda: torch.nn.Sequential(torch.nn.Linear(13, 2)), (13,), 2),
    "MLP 13-200-200-2": (
        lambda: torch.nn.Sequential(torch.nn.Linear(13, 200), torch.nn.ReLU(), torch.nn.Linear(200, 200), torch.nn.ReLU(), torch.nn.Linear(200, 2)),
        (13,), 2,
    ),
    "paper CNN on 1x28x28 (MNIST)": (paper_cnn, (1, 28, 28), 10),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--steps", type=int, default=10, help="local epochs Q per user")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    print(f"{args.users} users, records per user ~ zipf over 1..20, Q = {args.steps}, torch threads = {torch.get_num_threads()}")
    for name, (build, shape, classes) in CASES.items():
        model = build()
        sizes = np.minimum(rng.zipf(2.0, size=args.users), 20)
        features = torch.randn(int(sizes.sum()), *shape)
        labels = torch.randint(0, classes, (int(sizes.sum()),))
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        groups = [torch.arange(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
        kwargs = dict(features=features, labels=labels, groups=groups, steps=args.steps, lr=0.01)
        torch.testing.assert_close(train_users(model, **kwargs), train_users_loop(model, **kwargs), rtol=1e-4, atol=1e-5)
        times: dict[str, list[float]] = {"vmap": [], "loop": []}
        for _ in range(args.repeats):
            for label, fn in (("vmap", train_users), ("loop", train_users_loop)):
                start = time.perf_counter()
                fn(model, **kwargs)
                times[label].append(time.perf_counter() - start)
        fast, slow = statistics.median(times["vmap"]), statistics.median(times["loop"])
        print(f"{name:50s} vmap {fast:8.3f} s   loop {slow:8.3f} s   speed-up {slow / fast:6.1f}x")


if __name__ == "__main__":
    main()
