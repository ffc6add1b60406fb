"""FedAvg pieces shared by mechanisms that average model deltas (McMahan et al. 2017).

A silo's contribution is ``[n_i * delta_i, n_i]``: the server only needs the sum over participants to compute
the example-weighted mean delta ``sum(n_i delta_i) / sum(n_i)``, so the weights travel through secure
aggregation together with the deltas.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

from privsilo.mechanisms.base import (
    GlobalState,
    ServerMechanism,
    SiloContext,
    load_vector_into_model,
    model_to_vector,
    prediction_loss,
)
from privsilo.mechanisms.proximal import ProximalTerm

if TYPE_CHECKING:
    import torch


def weighted_delta_vector(delta: np.ndarray, weight: float) -> np.ndarray:
    """Contribution vector ``[weight * delta, weight]``."""
    return np.concatenate([np.asarray(delta, dtype=np.float64) * weight, [float(weight)]])


def local_sgd(
    context: SiloContext, start: np.ndarray, *, records: torch.Tensor | None = None, epochs: int | None = None
) -> tuple[np.ndarray, float]:
    """Mini-batch SGD from ``start`` on ``records`` (indices into the silo's data; default all of them): by default
    ``local_steps`` steps, each batch drawn without replacement from the silo's generator (McMahan et al. 2017);
    with ``epochs`` E instead E passes, each a fresh permutation cut into batches of ``batch_size``. With
    ``proximal_mu`` > 0 every step also descends FedProx's proximal term (:mod:`privsilo.mechanisms.proximal`). Returns
    the model delta and the mean training loss (of the data, without the proximal term); ``records`` must not
    be empty."""
    import torch  # not at the top of the module: see privsilo.mechanisms.registry

    ctx = context
    load_vector_into_model(ctx.model, start)
    ctx.model.train()
    proximal = ProximalTerm.at(ctx.model, ctx.training.proximal_mu)
    pool = torch.arange(ctx.labels.shape[0], device=ctx.device) if records is None else records
    batch = min(ctx.training.batch_size, len(pool))
    total_loss, steps = torch.zeros((), dtype=torch.float64, device=ctx.device), 0  # summed on the device: no wait per step
    batches = _batches(pool, batch=batch, generator=ctx.training_generator(), steps=ctx.training.local_steps, epochs=epochs)
    for idx in batches:
        loss = prediction_loss(ctx.model(ctx.features[idx]), ctx.labels[idx])
        ctx.model.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            if proximal is not None:
                for p, pull in zip(ctx.model.parameters(), proximal.gradients(list(ctx.model.parameters()))):
                    p.grad.add_(pull)
            for p in ctx.model.parameters():
                p.add_(p.grad, alpha=-ctx.training.lr)
        total_loss, steps = total_loss + loss.detach(), steps + 1
    return model_to_vector(ctx.model) - start, float(total_loss) / max(steps, 1)


def _batches(pool: torch.Tensor, *, batch: int, generator: torch.Generator, steps: int, epochs: int | None) -> Iterator[torch.Tensor]:
    """The record indices of each local step: ``steps`` independent batches, or ``epochs`` shuffled passes; the
    permutations are drawn on the generator's device."""
    import torch

    def permutation() -> torch.Tensor:
        return torch.randperm(len(pool), generator=generator, device=generator.device).to(pool.device)

    if epochs is None:
        for _ in range(steps):
            yield pool[permutation()[:batch]]
        return
    for _ in range(epochs):
        yield from torch.split(pool[permutation()], batch)


class FedAvgServer(ServerMechanism):
    """Applies the example-weighted mean of the participants' deltas to the single global model."""

    def aggregate(self, state: GlobalState, contribution_sum: np.ndarray, *, num_participants: int) -> GlobalState:
        (params,) = state
        total_weight = contribution_sum[-1]
        if total_weight <= 0:
            return state
        return (params + contribution_sum[:-1] / total_weight,)
