"""``none``: plain FedAvg without any privacy protection (the PrivacyFree baseline)."""
from __future__ import annotations

from mechanisms.base import (
    GlobalState,
    Mechanism,
    ServerMechanism,
    SiloContext,
    SiloContribution,
    SiloMechanism,
    load_vector_into_model,
    model_to_vector,
)
from mechanisms.fedavg import FedAvgServer, weighted_delta_vector


class FedAvgSilo(SiloMechanism):
    """Local mini-batch SGD; batches drawn without replacement from the silo's generator."""

    def __init__(self, context: SiloContext) -> None:
        self.context = context

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        import torch  # not at the top of the module: see mechanisms.registry

        ctx = self.context
        (start,) = state
        load_vector_into_model(ctx.model, start)
        ctx.model.train()
        n = ctx.labels.shape[0]
        batch = min(ctx.training.batch_size, n)
        loss_sum = 0.0
        for _ in range(ctx.training.local_steps):
            idx = torch.randperm(n, generator=ctx.generator)[:batch]
            loss = torch.nn.functional.cross_entropy(ctx.model(ctx.features[idx]), ctx.labels[idx])
            ctx.model.zero_grad(set_to_none=True)
            loss.backward()
            with torch.no_grad():
                for p in ctx.model.parameters():
                    p.add_(p.grad, alpha=-ctx.training.lr)
            loss_sum += loss.item()
        delta = model_to_vector(ctx.model) - start
        return SiloContribution(
            vector=weighted_delta_vector(delta, float(n)),
            metrics={"train_loss": loss_sum / max(ctx.training.local_steps, 1)},
        )


class NoPrivacy(Mechanism):
    """FedAvg with no privacy mechanism."""

    name = "none"

    def silo(self, context: SiloContext) -> SiloMechanism:
        return FedAvgSilo(context)

    def server(self) -> ServerMechanism:
        return FedAvgServer()
