"""``dp_sgd``: record-level DP-SGD inside every silo, FedAvg at the server (Abadi et al. 2016, Algorithm 1).

Neighbouring relation: two federations are neighbours if one silo's dataset differs by adding or removing one
record (records of different silos are disjoint). Per local step a silo Poisson-samples its ``n`` records with
rate ``q = min(1, batch_size / n)``, clips every per-record gradient to L2 norm ``C`` (so the clipped sum has
sensitivity ``C``), adds ``N(0, (sigma C)^2 I)`` and divides by the public ``batch_size`` (the expected batch
size ``q n`` when ``batch_size <= n``; dividing by the realised size would make the divisor data-dependent).
Each round is therefore ``local_steps`` compositions of the Poisson-subsampled Gaussian mechanism with noise
multiplier ``sigma`` (Mironov et al. 2019), reported as one :class:`PoissonGaussianEvent` and accounted by
``mechanisms.accounting``. The upload is a post-processing of the noisy steps; silos are averaged with equal,
data-independent weights (a weight ``n`` would reveal the record count).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from mechanisms.base import (
    GlobalState,
    Mechanism,
    MechanismParams,
    PrivacyAccountant,
    ServerMechanism,
    SiloContext,
    SiloContribution,
    SiloMechanism,
    load_vector_into_model,
    model_to_vector,
)
from mechanisms.events import PoissonGaussianEvent
from mechanisms.fedavg import FedAvgServer, weighted_delta_vector

# torch, per-sample gradients and Opacus are imported where a silo trains or a run is accounted: validating a
# scenario needs DpSgdParams only (see mechanisms.registry).
if TYPE_CHECKING:
    import torch


# Every participating silo weighs the same in the average: weighting by the silo's record count would put an
# un-noised count in every upload, which tells add/remove-one neighbours apart.
SILO_WEIGHT = 1.0


class DpSgdParams(MechanismParams):
    """Parameters of ``dp_sgd``. ``noise_multiplier = 0`` is allowed but gives epsilon = inf."""

    noise_multiplier: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    max_grad_norm: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    delta: float = Field(default=1e-5, gt=0.0, lt=1.0)


def noisy_local_training(
    context: SiloContext,
    *,
    rates: float | torch.Tensor,
    noise_multiplier: float,
    max_grad_norm: float,
    divisor: float | None = None,
) -> None:
    """``local_steps`` DP-SGD steps on the silo's records, sampled at ``rates`` (uniform or per record)."""
    from mechanisms.per_sample import noisy_sgd_step

    for _ in range(context.training.local_steps):
        noisy_sgd_step(
            context.model,
            features=context.features,
            labels=context.labels,
            rates=rates,
            max_grad_norm=max_grad_norm,
            noise_multiplier=noise_multiplier,
            lr=context.training.lr,
            generator=context.generator,
            divisor=divisor,
        )


class DpSgdSilo(SiloMechanism):
    """Local DP-SGD steps; sampling and noise both drawn from ``context.generator``."""

    def __init__(self, context: SiloContext, params: DpSgdParams) -> None:
        if context.labels.shape[0] == 0:
            raise ValueError(f"silo {context.silo_id} holds no records; DP-SGD needs n >= 1")
        self.context = context
        self.params = params

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        ctx, params = self.context, self.params
        (start,) = state
        load_vector_into_model(ctx.model, start)
        ctx.model.train()
        n = ctx.labels.shape[0]
        rate = min(1.0, ctx.training.batch_size / n)
        noisy_local_training(
            ctx,
            rates=rate,
            noise_multiplier=params.noise_multiplier,
            max_grad_norm=params.max_grad_norm,
            divisor=float(ctx.training.batch_size),
        )
        delta = model_to_vector(ctx.model) - start
        event = PoissonGaussianEvent(
            sampling_rate=rate, noise_multiplier=params.noise_multiplier, steps=ctx.training.local_steps
        )
        return SiloContribution(vector=weighted_delta_vector(delta, SILO_WEIGHT), events=(event,))


class DpSgd(Mechanism):
    """FedAvg whose silos train with record-level DP-SGD (see the module docstring)."""

    name = "dp_sgd"
    Params = DpSgdParams

    def silo(self, context: SiloContext) -> SiloMechanism:
        return DpSgdSilo(context, self.params)

    def server(self) -> ServerMechanism:
        return FedAvgServer()

    def accountant(self) -> PrivacyAccountant:
        from mechanisms.accounting import RdpAccountant

        return RdpAccountant(delta=self.params.delta)
