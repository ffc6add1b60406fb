"""``dp_sgd``: record-level DP-SGD inside every silo, FedAvg at the server (Abadi et al. 2016, Algorithm 1).

Neighbouring relation: two federations are neighbours if one silo's dataset differs by adding or removing one
record (records of different silos are disjoint). Per local step a silo Poisson-samples its ``n`` records with
rate ``q``, clips every per-record gradient to L2 norm ``C`` (so the clipped sum has sensitivity ``C``), adds
``N(0, (sigma C)^2 I)`` and divides by the public ``batch_size`` (dividing by the realised batch size would make
the divisor data-dependent). By default ``q = min(1, batch_size / n)`` (Abadi et al.; the divisor is then the
expected batch size ``q n``): the rate depends on the record count ``n``, which the events reveal and the
guarantee treats as public. ``sampling_rate`` fixes ``q`` instead; nothing in a step then depends on ``n``
(``batch_size`` is only the public divisor, best set near ``q n``). Each round is therefore ``local_steps``
compositions of the Poisson-subsampled Gaussian mechanism with noise multiplier ``sigma`` (Mironov et al. 2019),
reported as one :class:`PoissonGaussianEvent` and accounted by ``privsilo.mechanisms.accounting``. The upload is a
post-processing of the noisy steps; silos are averaged with equal, data-independent weights (a weight ``n`` would
reveal the record count).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

import numpy as np

from pydantic import Field, field_validator

from privsilo.mechanisms.base import (
    WEIGHTED_DELTA,
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
    pld_needs_its_smallest_delta,
)
from privsilo.mechanisms.events import PoissonGaussianEvent
from privsilo.mechanisms.fedavg import FedAvgServer, weighted_delta_vector

# torch, per-sample gradients and Opacus are imported where a silo trains or a run is accounted: validating a
# scenario needs DpSgdParams only (see privsilo.mechanisms.registry).
if TYPE_CHECKING:
    import torch


# Every participating silo weighs the same in the average: weighting by the silo's record count would put an
# un-noised count in every upload, which tells add/remove-one neighbours apart.
SILO_WEIGHT = 1.0
RECORD_COUNTS_PUBLIC = "records per silo (q = federation.batch_size / records; the events and placement show it)"


class DpSgdParams(MechanismParams):
    """Parameters of ``dp_sgd``. ``noise_multiplier = 0`` is allowed but gives epsilon = inf."""

    noise_multiplier: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    """Noise multiplier sigma (0 gives no guarantee)."""
    max_grad_norm: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    """Per-record clipping norm C."""
    delta: float = Field(default=1e-5, gt=0.0, lt=1.0)
    """Delta of the reported (epsilon, delta)."""
    sampling_rate: float | None = Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    """Poisson rate q of every silo's local steps, public and the same for all silos; the noisy sum is divided by `federation.batch_size` (set it near q times a typical silo's records), so no step depends on a record count. `null`: q = batch_size / records (Abadi et al.; treats record counts as public)."""
    accountant: Literal["rdp", "pld"] = "rdp"
    """`rdp` (Renyi DP, Mironov et al. 2019) or `pld` (privacy loss distributions via Google's dp_accounting: a tighter upper bound, reported as `epsilon` beside the RDP figure, `epsilon_rdp` and `epsilon_pld`)."""

    _pld_needs_its_smallest_delta = field_validator("accountant")(pld_needs_its_smallest_delta)

    def clips_record_gradients(self) -> bool:
        return True

    def rate(self, *, batch_size: int, num_records: int) -> float:
        """Poisson rate q of a local step: ``sampling_rate`` if set, else ``min(1, batch_size / n)``."""
        if self.sampling_rate is not None:
            return self.sampling_rate
        return min(1.0, batch_size / num_records)


def noisy_local_training(
    context: SiloContext,
    *,
    rates: float | torch.Tensor,
    noise_multiplier: float,
    max_grad_norm: float,
    divisor: float | None = None,
    canary_rates: np.ndarray | float | None = None,
) -> None:
    """``local_steps`` DP-SGD steps on the silo's records, sampled at ``rates`` (uniform or per record), from the
    global model ``context.model`` holds; with ``proximal_mu`` > 0 each step also descends FedProx's term. In an
    audit the silo's canary records (``context.canaries``) take part, each at its ``canary_rates``."""
    from privsilo.mechanisms.canaries import CanaryGradients
    from privsilo.mechanisms.per_sample import noisy_sgd_steps
    from privsilo.mechanisms.proximal import ProximalTerm

    proximal = ProximalTerm.at(context.model, context.training.proximal_mu)
    dimension = sum(p.numel() for p in context.model.parameters())
    canaries = CanaryGradients.of(context.canaries, dimension=dimension, rates=canary_rates, device=context.device)
    noisy_sgd_steps(
        context.model,
        features=context.features,
        labels=context.labels,
        rates=rates,
        steps=context.training.local_steps,
        max_grad_norm=max_grad_norm,
        noise_multiplier=noise_multiplier,
        lr=context.training.lr,
        generator=context.training_generator(),
        divisor=divisor,
        proximal=proximal,
        canaries=canaries,
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
        rate = params.rate(batch_size=ctx.training.batch_size, num_records=ctx.labels.shape[0])
        noisy_local_training(
            ctx,
            rates=rate,
            noise_multiplier=params.noise_multiplier,
            max_grad_norm=params.max_grad_norm,
            divisor=float(ctx.training.batch_size),
            canary_rates=rate,
        )
        delta = model_to_vector(ctx.model) - start
        event = PoissonGaussianEvent(
            sampling_rate=rate, noise_multiplier=params.noise_multiplier, steps=ctx.training.local_steps
        )
        return SiloContribution(vector=weighted_delta_vector(delta, SILO_WEIGHT), events=(event,))


class DpSgd(Mechanism):
    """FedAvg whose silos train with record-level DP-SGD (see the module docstring)."""

    name = "dp_sgd"
    privacy_unit = "record"
    Params = DpSgdParams
    upload_form = WEIGHTED_DELTA  # each record's gradient clipped to the public max_grad_norm, plus noise
    audit_units = ("record",)
    input_canaries = True
    likelihood_scores = True

    def silo(self, context: SiloContext) -> SiloMechanism:
        return DpSgdSilo(context, self.params)

    def server(self) -> ServerMechanism:
        return FedAvgServer()

    def accountant(self) -> PrivacyAccountant:
        from privsilo.mechanisms.accounting import RdpAccountant

        return RdpAccountant(delta=self.params.delta, accountant=self.params.accountant)

    @classmethod
    def gdp_mu_star(cls, events: Mapping[int, Sequence[Any]], *, rounds: int, claims: Mapping[str, Any],
                    budget: float | None = None) -> float:
        """Each silo's Poisson-subsampled Gaussian steps (start-up and round events merged as its accountant merges
        them), mu* of their PLD; the largest over the silos, as the claim is."""
        from privsilo.mechanisms.gdp import merged_schedule, schedule_mu

        return max((schedule_mu(merged_schedule(e for e in silo if isinstance(e, PoissonGaussianEvent)))
                    for silo in events.values()), default=0.0)

    @classmethod
    def gdp_mu_star_basis(cls) -> str:
        from privsilo.mechanisms.gdp import UPPER_ESTIMATE

        return f"each silo's Poisson-subsampled Gaussian steps, the largest over silos; {UPPER_ESTIMATE} (exact at rate 1)"

    def assumed_public(self) -> tuple[str, ...]:
        if self.params.sampling_rate is None:
            return (RECORD_COUNTS_PUBLIC,)
        return ()
