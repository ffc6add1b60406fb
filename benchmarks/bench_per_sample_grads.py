"""Per-sample gradient time: ``mechanisms.per_sample`` (torch.func vmap) against Opacus ``GradSampleModule`` (hooks).

Run: ``python benchmarks/bench_per_sample_grads.py [--batch 64] [--repeats 20]``. Both sides compute the gradients
of the per-record cross-entropy for the same model and batch and are checked to agree before timing.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Callable

import torch
from opacus import GradSampleModule

from mechanisms.per_sample import per_sample_gradients


def mnist_cnn() -> torch.nn.Module:
    """The MNIST CNN of the DP literature: conv5x5-32, pool, conv5x5-64, pool, fc512, fc10 on 1x28x28."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, kernel_size=5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, kernel_size=5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 7 * 7, 512),
        torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )


def mlp() -> torch.nn.Module:
    """A two-hidden-layer MLP on flattened MNIST."""
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )


def opacus_per_sample_gradients(
    module: GradSampleModule, *, features: torch.Tensor, labels: torch.Tensor
) -> list[torch.Tensor]:
    """Per-record gradients from Opacus' backward hooks (sum reduction, so no rescaling)."""
    module.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(module(features), labels, reduction="sum").backward()
    return [p.grad_sample for p in module.parameters()]


def median_seconds(fn: Callable[[], object], *, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(name: str, build: Callable[[], torch.nn.Module], *, batch: int, repeats: int) -> None:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)  # benchmark-only: model initialisation
    model = build()
    features = torch.randn(batch, 1, 28, 28, generator=generator)
    labels = torch.randint(10, (batch,), generator=generator)
    wrapped = GradSampleModule(build(), loss_reduction="sum")
    wrapped._module.load_state_dict(model.state_dict())

    ours = per_sample_gradients(model, features=features, labels=labels)
    theirs = opacus_per_sample_gradients(wrapped, features=features, labels=labels)
    worst = max(float((a - b).abs().max()) for a, b in zip(ours, theirs))
    assert worst < 1e-4, f"implementations disagree by {worst}"

    func_time = median_seconds(lambda: per_sample_gradients(model, features=features, labels=labels), repeats=repeats)
    hook_time = median_seconds(
        lambda: opacus_per_sample_gradients(wrapped, features=features, labels=labels), repeats=repeats
    )
    print(
        f"{name:10s} batch={batch} params={sum(p.numel() for p in model.parameters()):>9,d}  "
        f"torch.func {func_time * 1e3:8.1f} ms  opacus {hook_time * 1e3:8.1f} ms  "
        f"opacus/torch.func {hook_time / func_time:5.2f}  (max abs diff {worst:.1e})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="Full backward hook is firing")  # Opacus hooks on input-free graphs
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, medians of {args.repeats} repeats")
    for name, build in [("mnist_cnn", mnist_cnn), ("mlp", mlp)]:
        bench(name, build, batch=args.batch, repeats=args.repeats)


if __name__ == "__main__":
    main()
