"""FedAvg pieces shared by mechanisms that average model deltas (McMahan et al. 2017).

A silo's contribution is ``[n_i * delta_i, n_i]``: the server only needs the sum over participants to compute
the example-weighted mean delta ``sum(n_i delta_i) / sum(n_i)``, so the weights travel through secure
aggregation together with the deltas.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mechanisms.base import GlobalState, ServerMechanism, SiloContext, load_vector_into_model, model_to_vector

if TYPE_CHECKING:
    import torch


def weighted_delta_vector(delta: np.ndarray, weight: float) -> np.ndarray:
    """Contribution vector ``[weight * delta, weight]``."""
    return np.concatenate([np.asarray(delta, dtype=np.float64) * weight, [float(weight)]])


def local_sgd(context: SiloContext, start: np.ndarray, *, records: torch.Tensor | None = None) -> tuple[np.ndarray, float]:
    """``local_steps`` steps of mini-batch SGD from ``start`` on ``records`` (indices into the silo's data; default
    all of them), each batch drawn without replacement from the silo's generator (McMahan et al. 2017). Returns
    the model delta and the mean training loss; ``records`` must not be empty."""
    import torch  # not at the top of the module: see mechanisms.registry

    ctx = context
    load_vector_into_model(ctx.model, start)
    ctx.model.train()
    pool = torch.arange(ctx.labels.shape[0], device=ctx.device) if records is None else records
    batch = min(ctx.training.batch_size, len(pool))
    loss_sum = 0.0
    for _ in range(ctx.training.local_steps):
        idx = pool[torch.randperm(len(pool), generator=ctx.generator)[:batch].to(ctx.device)]
        loss = torch.nn.functional.cross_entropy(ctx.model(ctx.features[idx]), ctx.labels[idx])
        ctx.model.zero_grad(set_to_none=True)
        loss.backward()
        with torch.no_grad():
            for p in ctx.model.parameters():
                p.add_(p.grad, alpha=-ctx.training.lr)
        loss_sum += loss.item()
    return model_to_vector(ctx.model) - start, loss_sum / max(ctx.training.local_steps, 1)


class FedAvgServer(ServerMechanism):
    """Applies the example-weighted mean of the participants' deltas to the single global model."""

    def aggregate(self, state: GlobalState, contribution_sum: np.ndarray, *, num_participants: int) -> GlobalState:
        (params,) = state
        total_weight = contribution_sum[-1]
        if total_weight <= 0:
            return state
        return (params + contribution_sum[:-1] / total_weight,)
