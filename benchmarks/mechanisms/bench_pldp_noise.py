"""PLDP-FL at the paper's scale without 100 actors: the server's average of 70 PDPM uploads of a trained model.

Run: ``python -m benchmarks.mechanisms.bench_pldp_noise [--dataset mnist|fashion_mnist] [--steps 3000] [--uploads 70]``.
Trains the paper's small_cnn centrally (seeded; ``--steps`` SGD steps of batch 20 at lr 0.01, the paper's local
settings) and evaluates it: the noise-free baseline of this run. Then, for every (tau, eps) setting of the paper and
for the fixed range [-1, 1] with eps2 (its Figure 6), ``--uploads`` of 100 clients upload (client i takes level
i mod the setting's levels, as the mechanism does) and the server averages their PDPM outputs once (Eq. 7):

* ``weights``: every client uploads PDPM of the trained weights (the paper);
* ``update``: every client uploads PDPM of the last 150 steps' update, added to the weights before them.

Every client holds the *same* trained model, the most favourable case for PLDP (no client drift, one round of
noise only). Printed per setting: the measured standard deviation of the averaged noise per weight, the exact one
(from ``privsilo.mechanisms.pldp.pdpm_variance``, pooled over the weights) and their ratio, and the test accuracy of the averaged model beside the
baseline's.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from privsilo.mechanisms.base import load_vector_into_model, model_to_vector
from privsilo.mechanisms.pldp import PAPER_BUDGETS, PAPER_RANGES, pdpm, pdpm_variance
from privsilo.simulator.data import load_dataset
from privsilo.simulator.models.builtin import build_model

CLIENTS, UPDATE_STEPS, BATCH, LR = 100, 150, 20, 0.01


def train(model: torch.nn.Module, features: torch.Tensor, labels: torch.Tensor, *, steps: int, seed: int) -> np.ndarray:
    """``steps`` of mini-batch SGD; returns the weights ``UPDATE_STEPS`` steps before the end."""
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.SGD(model.parameters(), lr=LR)
    before = model_to_vector(model)
    for step in range(steps):
        if step == steps - UPDATE_STEPS:
            before = model_to_vector(model)
        batch = torch.randint(0, labels.shape[0], (BATCH,), generator=generator)
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(model(features[batch]), labels[batch]).backward()
        optimiser.step()
    return before


@torch.no_grad()
def accuracy(model: torch.nn.Module, weights: np.ndarray, features: torch.Tensor, labels: torch.Tensor) -> float:
    load_vector_into_model(model, weights)
    logits = torch.cat([model(chunk) for chunk in torch.split(features, 2048)])
    return float((logits.argmax(dim=1) == labels).double().mean())


def settings() -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    cells = {f"{t}-{e}": (PAPER_RANGES[t], PAPER_BUDGETS[e]) for t in PAPER_RANGES for e in PAPER_BUDGETS}
    cells["[-1,1]-eps2"] = ((2.0,), PAPER_BUDGETS["eps2"])
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=("mnist", "fashion_mnist"))
    parser.add_argument("--steps", type=int, default=3000, help="central SGD steps of batch 20 (3000 = one epoch)")
    parser.add_argument("--uploads", type=int, default=70, help="clients averaged by the server (of 100)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    data = load_dataset(args.dataset, seed=args.seed)
    x_train, y_train = torch.tensor(data.x_train), torch.tensor(data.y_train)
    x_test, y_test = torch.tensor(data.x_test), torch.tensor(data.y_test)
    torch.manual_seed(args.seed)
    model = build_model("small_cnn", feature_shape=data.feature_shape, num_classes=data.num_classes)
    started = time.perf_counter()
    before = train(model, x_train, y_train, steps=args.steps, seed=args.seed)
    weights = model_to_vector(model)
    baseline = accuracy(model, weights, x_test, y_test)
    print(f"{args.dataset}: small_cnn ({weights.size} weights) trained centrally for {args.steps} steps of batch {BATCH} "
          f"at lr {LR} in {time.perf_counter() - started:.0f} s; noise-free test accuracy {baseline:.4f}; "
          f"|weight| median {np.median(np.abs(weights)):.3f}, max {np.abs(weights).max():.3f}")
    rng = np.random.default_rng(args.seed)
    clients = np.sort(rng.choice(CLIENTS, size=args.uploads, replace=False))
    print(f"one server average of {args.uploads} uploads (clients {clients[:5].tolist()}...; levels in turn by client id)")
    print("| setting | perturb | noise std per weight: measured | exact | ratio | accuracy | baseline |")
    print("|---|---|---|---|---|---|---|")
    for name, (ranges, budgets) in settings().items():
        lengths = np.array([ranges[i % len(ranges)] for i in clients])[:, None]
        epsilons = np.array([budgets[i % len(budgets)] for i in clients])[:, None]
        for perturb, start, target in (("weights", np.zeros_like(weights), weights), ("update", before, weights - before)):
            uploads = pdpm(np.broadcast_to(target, (args.uploads, target.size)), center=0.0, length=lengths,
                           epsilon=epsilons, rng=rng)
            averaged = start + uploads.mean(axis=0)
            offsets = np.clip(target, -lengths / 2, lengths / 2)  # what each client's PDPM estimates
            measured = float((averaged - start - offsets.mean(axis=0)).std())
            # pooled over the weights: the root mean square of each weight's exact std
            exact = float(np.sqrt(np.mean(pdpm_variance(offsets, length=lengths, epsilon=epsilons).sum(axis=0)) / args.uploads**2))
            print(f"| {name} | {perturb} | {measured:.3f} | {exact:.3f} | {measured / exact:.3f} | "
                  f"{accuracy(model, averaged, x_test, y_test):.4f} | {baseline:.4f} |")


if __name__ == "__main__":
    main()
