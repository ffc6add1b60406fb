"""Per-sample gradient time, and the time of the clipped sum a DP-SGD step actually needs.

1. ``privsilo.mechanisms.per_sample.per_sample_gradients`` (torch.func vmap) against Opacus ``GradSampleModule`` (hooks);
2. the clipped sum ``sum_j g_j min(1, C/||g_j||)``: ``privsilo.mechanisms.fast_clipping`` (ghost norms for Linear layers,
   strided-view per-record gradients for Conv2d) against clipping the materialised torch.func gradients, with
   a plain (non-private) forward/backward pass of the same batch as the floor.

Run: ``python -m benchmarks.mechanisms.bench_per_sample_grads [--batch 64] [--repeats 20]``. Every pair is checked to agree
before timing; medians and ratios measured in the same run are printed.
"""
from __future__ import annotations

import argparse
import warnings
from typing import Callable

import torch
from opacus import GradSampleModule

from privsilo.mechanisms.fast_clipping import clipped_gradient_sum
from privsilo.mechanisms.per_sample import clip_and_sum, per_sample_gradients
from benchmarks.support.timing import median_seconds


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


def model_and_batch(build: Callable[[], torch.nn.Module], *, batch: int) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """A seeded model and a random MNIST-shaped batch."""
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)  # benchmark-only: model initialisation
    features = torch.randn(batch, 1, 28, 28, generator=generator)
    return build(), features, torch.randint(10, (batch,), generator=generator)


def bench(name: str, build: Callable[[], torch.nn.Module], *, batch: int, repeats: int) -> None:
    model, features, labels = model_and_batch(build, batch=batch)
    wrapped = GradSampleModule(build(), loss_reduction="sum")
    wrapped._module.load_state_dict(model.state_dict())

    ours = per_sample_gradients(model, features=features, labels=labels)
    theirs = opacus_per_sample_gradients(wrapped, features=features, labels=labels)
    worst = max(float((a - b).abs().max()) for a, b in zip(ours, theirs))
    assert worst < 1e-4, f"implementations disagree by {worst}"

    medians = median_seconds(
        {
            "func": lambda: per_sample_gradients(model, features=features, labels=labels),
            "hooks": lambda: opacus_per_sample_gradients(wrapped, features=features, labels=labels),
        },
        repeats=repeats,
    )
    func_time, hook_time = medians["func"], medians["hooks"]
    print(
        f"{name:10s} batch={batch} params={sum(p.numel() for p in model.parameters()):>9,d}  "
        f"torch.func {func_time * 1e3:8.1f} ms  opacus {hook_time * 1e3:8.1f} ms  "
        f"opacus/torch.func {hook_time / func_time:5.2f}  (max abs diff {worst:.1e})"
    )


def bench_clipped_sum(name: str, build: Callable[[], torch.nn.Module], *, batch: int, repeats: int) -> None:
    model, features, labels = model_and_batch(build, batch=batch)

    def materialised() -> list[torch.Tensor]:
        return clip_and_sum(per_sample_gradients(model, features=features, labels=labels), max_grad_norm=1.0)

    def fast() -> list[torch.Tensor]:
        sums = clipped_gradient_sum(model, features=features, labels=labels, max_grad_norm=1.0)
        assert sums is not None
        return sums

    def plain() -> None:
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(features), labels, reduction="sum").backward()

    worst = max(float((a - b).abs().max()) for a, b in zip(fast(), materialised()))
    assert worst < 1e-4, f"clipped sums disagree by {worst}"
    times = median_seconds({"materialised": materialised, "fast": fast, "plain": plain}, repeats=repeats)
    print(
        f"{name:10s} batch={batch} clipped sum: torch.func+clip {times['materialised'] * 1e3:8.1f} ms  "
        f"fast {times['fast'] * 1e3:8.1f} ms  plain backward {times['plain'] * 1e3:8.1f} ms  "
        f"speed-up {times['materialised'] / times['fast']:5.2f}  fast/plain {times['fast'] / times['plain']:5.2f}"
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
    for name, build in [("mnist_cnn", mnist_cnn), ("mlp", mlp)]:
        bench_clipped_sum(name, build, batch=args.batch, repeats=args.repeats)


if __name__ == "__main__":
    main()
