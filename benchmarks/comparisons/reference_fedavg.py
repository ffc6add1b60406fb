"""The shared FedAvg workload as a plain PyTorch loop: the reference ``bench_vs_flower.py`` checks every side against.

No framework: for each round, each silo copies the global weights, takes ``local_steps`` SGD steps on batches of
``batch_size`` records drawn without replacement from its own records (``torch.randperm`` on a generator seeded with
the silo's seed and kept across rounds, as privsilo, Flower's and pfl's scripts draw them), and the new global
weights are the silos' weights averaged by record count (in float64); the test accuracy is taken after each round.
``bench_vs_flower.py`` imports it and runs it on the workload it exports, before it times any side.
"""
from __future__ import annotations

import numpy as np
import torch


def mlp(features: int, hidden: int, classes: int) -> torch.nn.Module:
    """privsilo's ``mlp_128``: one hidden ReLU layer."""
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, classes))


def fedavg_accuracies(work: dict[str, np.ndarray]) -> list[float]:
    """The test accuracy after each round of the workload ``work`` (as ``bench_vs_flower.export_workload`` saves it)."""
    silos, rounds = int(work["silos"]), int(work["rounds"])
    steps, batch, lr = int(work["local_steps"]), int(work["batch_size"]), float(work["lr"])
    model = mlp(*(int(v) for v in work["layers"]))
    weights = torch.tensor(work["initial"], dtype=torch.float64)
    generators = [torch.Generator().manual_seed(int(seed)) for seed in work["seeds"][:silos]]
    records = [work["order"][work["offsets"][silo]:work["offsets"][silo + 1]] for silo in range(silos)]
    x_train, y_train = torch.tensor(work["x_train"]), torch.tensor(work["y_train"])
    x_test, y_test = torch.tensor(work["x_test"]), torch.tensor(work["y_test"])
    accuracies = []
    for _ in range(rounds):
        total = torch.zeros_like(weights)
        for silo in range(silos):
            torch.nn.utils.vector_to_parameters(weights.float(), model.parameters())
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            for _ in range(steps):
                chosen = torch.from_numpy(records[silo][torch.randperm(len(records[silo]), generator=generators[silo])[:batch].numpy()])
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x_train[chosen]), y_train[chosen]).backward()
                optimizer.step()
            total += len(records[silo]) * torch.nn.utils.parameters_to_vector(model.parameters()).double()
        weights = total / sum(len(r) for r in records)
        torch.nn.utils.vector_to_parameters(weights.float(), model.parameters())
        with torch.no_grad():
            accuracies.append(int((model(x_test).argmax(dim=1) == y_test).sum()) / len(y_test))
    return accuracies

