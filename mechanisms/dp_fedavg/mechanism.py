"""``dp_fedavg``: client-level DP-FedAvg (McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private
Recurrent Language Models", ICLR 2018, Algorithm 1).

Neighbouring relation: one silo's noised coordinates zeroed out (its update and, with adaptive clipping, its
centred clipped-count bit: 0, not +1/2; the silo is still sampled; Kairouz et al. 2021's
zero-out relation, which the add/remove-one analysis of the Poisson-subsampled Gaussian covers). Per round the
server Poisson-samples silos at rate q (``federation.client_rate``); each sampled silo trains locally from the
global model (FedAvg's local SGD, with FedProx's term where ``federation.proximal_mu`` > 0), clips its model delta
to L2 norm C and uploads it. The server adds ``N(0, (z C)^2 I)`` to the sum and divides by the *expected* number of
participants ``q N`` (McMahan et al.'s fixed-denominator estimator, Sec. 3): dividing by the realised number would
publish how many silos took part, which forfeits the amplification by sampling. The silos upload the public q
(as a multiple of 2^-20, see ``public_rate``) beside their update, so that the server learns it without the realised
count entering the model. The noise is
drawn from the generator the server hands to ``round_plan`` (OS entropy with ``secure_rng``), in float64.
Accounting: :mod:`privsilo.mechanisms.dp_fedavg.accountant`.

``noise: distributed`` (Kairouz, Liu, Steinke, ICML 2021): each silo adds its share of exact discrete Gaussian
noise to its rotated, rounded update and secure aggregation sums them (:mod:`privsilo.mechanisms.dp_fedavg.distributed`;
accounting :mod:`privsilo.mechanisms.dp_fedavg.distributed_accountant`); the server post-processes the sum.

Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive Clipping",
NeurIPS 2021, Algorithm 1): the server sends the round's clip norm C_t as the round plan; each silo also uploads
``b_i - 1/2``, with ``b_i = 1`` where its update's norm is at most C_t (centred, so one silo moves the sum by 1/2);
the server adds N(0, sigma_b^2) to that sum, estimates the unclipped fraction ``b = sum / (q N) + 1/2`` and sets
``C_{t+1} = C_t exp(-eta_C (b - gamma))``. The update's noise is ``z_delta C_t`` with z_delta from
``DpFedAvgParams.update_noise_multiplier``, so that the round is one Gaussian mechanism of multiplier z.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from privsilo.mechanisms.base import (
    GlobalState,
    Mechanism,
    PrivacyAccountant,
    ServerMechanism,
    SiloContext,
    SiloContribution,
    SiloMechanism,
    numpy_generator,
)
from privsilo.mechanisms.dp_fedavg.distributed import conditional_round, reduce_signed, rotate, unrotate
from privsilo.mechanisms.dp_fedavg.params import DpFedAvgParams, public_rate
from privsilo.mechanisms.events import ClientLevelGaussianEvent, DistributedDiscreteGaussianEvent
from privsilo.mechanisms.fedavg import local_sgd

SILO_COUNT_PUBLIC = "the number of silos N (data.silos: the server divides the noisy sum by q N)"
NOISE_SEED_WORDS = 4  # a silo's rounding and discrete noise come from a numpy generator keyed by 4 x 62 bits of its own


def clip_to_norm(vector: np.ndarray, bound: float) -> np.ndarray:
    """``vector * min(1, bound / ||vector||_2)``."""
    norm = float(np.linalg.norm(vector))
    return vector if norm <= bound else vector * (bound / norm)


@dataclass(frozen=True)
class ClipNorm:
    """Adaptive clipping's round plan: the clip norm C_t of the round (public: computed from noisy sums)."""

    value: float


class DpFedAvgSilo(SiloMechanism):
    """Local SGD from the global model; uploads ``[clip(delta, C), q]``, or ``[clip(delta, C_t), b - 1/2, q]``
    with adaptive clipping."""

    def __init__(self, context: SiloContext, params: DpFedAvgParams) -> None:
        self.context, self.params = context, params

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        return self.contribute_with_plan(state, round_index=round_index, plan=None)

    def contribute_with_plan(self, state: GlobalState, *, round_index: int, plan: ClipNorm | None) -> SiloContribution:
        ctx, params = self.context, self.params
        clip = params.clip_norm if plan is None else plan.value
        (start,) = state
        delta, _ = local_sgd(ctx, start)
        update = clip_to_norm(delta, clip)
        unclipped, members = float(np.linalg.norm(delta) <= clip), 1
        if ctx.canaries is not None and len(ctx.canaries):  # canary client c uploads C u_c with its host silo
            update = update + clip * ctx.canaries.directions(delta.size).sum(axis=0)
            unclipped, members = unclipped + len(ctx.canaries), members + len(ctx.canaries)  # norm C: unclipped
        rate = ctx.training.client_rate
        count = [unclipped - members / 2] if params.clipping == "adaptive" else []
        event = ClientLevelGaussianEvent(round_index=round_index, sampling_rate=rate, noise_multiplier=params.noise_multiplier)
        vector = np.concatenate([update, count, [public_rate(rate)]])
        return SiloContribution(vector=vector, events=(event,))  # no training loss: it is not privatised


class DpFedAvgServer(ServerMechanism):
    """Adds ``N(0, (z_delta C)^2 I)`` to the sum of the clipped updates and applies it divided by ``q N``; with
    adaptive clipping also updates C from the noisy count of unclipped updates."""

    def __init__(self, params: DpFedAvgParams, *, num_silos: int) -> None:
        self.params, self.num_silos = params, num_silos
        self.clip_norm = params.clip_norm  # C_t
        self.rng: np.random.Generator | None = None

    def round_plan(self, rng: np.random.Generator, *, round_index: int) -> ClipNorm | None:
        self.rng = rng  # the server's generator: this round's noise is drawn from it
        return ClipNorm(self.clip_norm) if self.params.clipping == "adaptive" else None

    def aggregate(self, state: GlobalState, contribution_sum: np.ndarray, *, num_participants: int) -> GlobalState:
        (params,) = state
        params_ = self.params
        expected = contribution_sum[-1] / num_participants * self.num_silos  # q N: every upload carries the public q
        scale = params_.update_noise_multiplier() * self.clip_norm
        noisy = contribution_sum[: params.size] + self.rng.normal(0.0, scale, params.size)
        if params_.clipping == "adaptive":
            unclipped = (contribution_sum[params.size] + self.rng.normal(0.0, params_.clipped_count_stddev)) / expected + 0.5
            self.clip_norm *= math.exp(-params_.clip_learning_rate * (unclipped - params_.target_quantile))
        return (params + noisy / expected,)


@dataclass(frozen=True)
class DistributedPlan:
    """Distributed noise's round plan (public): the rotation's seed, shared by every silo. Each silo derives its
    noise from the number of silos N it knows itself (``data.silos``), never from the server: a server that claimed
    a larger N would otherwise shrink every silo's share of the noise."""

    rotation_seed: int


class DistributedDpFedAvgSilo(SiloMechanism):
    """Kairouz et al.'s Algorithm 1: clip to C, scale by 1/gamma, rotate, round conditionally, add N_Z(0, sigma^2);
    uploads the integers (as float64, which secure aggregation's codec carries exactly), never reduced mod m."""

    def __init__(self, context: SiloContext, params: DpFedAvgParams) -> None:
        self.context, self.params = context, params

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        raise TypeError("distributed dp_fedavg needs the server's round plan (the rotation seed)")

    def contribute_with_plan(self, state: GlobalState, *, round_index: int, plan: DistributedPlan) -> SiloContribution:
        from privsilo.mechanisms.discrete_noise import discrete_gaussian

        (start,) = state
        if self.context.training.num_silos is None:
            raise TypeError("distributed dp_fedavg needs the federation's number of silos (LocalTraining.num_silos)")
        setting = self.params.distributed_setting(self.context.training.num_silos, start.size)
        delta, _ = local_sgd(self.context, start)
        rng = numpy_generator(self.context.generator, words=NOISE_SEED_WORDS)
        rotated = rotate(clip_to_norm(delta, self.params.clip_norm) / setting.gamma, plan.rotation_seed)
        noisy = conditional_round(rotated, setting.l2_bound, rng) + discrete_gaussian(setting.sigma, setting.dimension, rng)
        event = DistributedDiscreteGaussianEvent(round_index=round_index, sigma=setting.sigma, l2_bound=setting.l2_bound,
                                                 l1_bound=setting.l1_bound, dimension=setting.dimension)
        return SiloContribution(vector=noisy, events=(event,))  # no training loss: it is not privatised


class DistributedDpFedAvgServer(ServerMechanism):
    """Draws the round's rotation seed; reduces the exact integer sum mod m into the signed range, un-rotates it,
    multiplies by gamma and applies it divided by N (post-processing of the sum)."""

    def __init__(self, params: DpFedAvgParams, *, num_silos: int) -> None:
        self.params, self.num_silos = params, num_silos
        self.rotation_seed: int | None = None

    def round_plan(self, rng: np.random.Generator, *, round_index: int) -> DistributedPlan:
        self.rotation_seed = int(rng.integers(2**63))
        return DistributedPlan(rotation_seed=self.rotation_seed)

    def aggregate(self, state: GlobalState, contribution_sum: np.ndarray, *, num_participants: int) -> GlobalState:
        (params,) = state
        setting = self.params.distributed_setting(self.num_silos, params.size)
        total = reduce_signed(contribution_sum, setting.modulus)
        update = unrotate(total, self.rotation_seed, params.size) * setting.gamma
        return (params + update / self.num_silos,)


class DpFedAvg(Mechanism):
    """DP-FedAvg (see the module docstring)."""

    name = "dp_fedavg"
    privacy_unit = "client"
    Params = DpFedAvgParams
    audit_units = ("client",)

    def silo(self, context: SiloContext) -> SiloMechanism:
        if self.params.noise == "distributed":
            return DistributedDpFedAvgSilo(context, self.params)
        return DpFedAvgSilo(context, self.params)

    def server(self) -> ServerMechanism:
        raise TypeError("dp_fedavg's server divides by q N; use server_for(num_silos=..., num_users=...)")

    def server_for(self, *, num_silos: int, num_users: int | None) -> ServerMechanism:
        if self.params.noise == "distributed":
            return DistributedDpFedAvgServer(self.params, num_silos=num_silos)
        return DpFedAvgServer(self.params, num_silos=num_silos)

    def accountant(self) -> PrivacyAccountant:
        from privsilo.mechanisms.dp_fedavg.accountant import ClientLevelAccountant
        from privsilo.mechanisms.dp_fedavg.distributed_accountant import DistributedAccountant

        if self.params.noise == "distributed":
            return DistributedAccountant(delta=self.params.delta)
        return ClientLevelAccountant(delta=self.params.delta, noise_multiplier=self.params.noise_multiplier,
                                     accountant=self.params.accountant)

    @classmethod
    def gdp_mu_star(cls, events: Mapping[int, Sequence[Any]], *, rounds: int, claims: Mapping[str, Any],
                    budget: float | None = None) -> float | None:
        """Every round the server held (as the accountant counts them), one Poisson-subsampled Gaussian of
        multiplier z at the client rate the silos report (audits run at rate 1: exactly sqrt(T) / z); None where the
        silos' events disagree."""
        from privsilo.mechanisms.gdp import schedule_mu

        settings = {(e.sampling_rate, e.noise_multiplier) for silo in events.values() for e in silo
                    if isinstance(e, ClientLevelGaussianEvent)}
        if len(settings) != 1:
            return None
        ((rate, noise_multiplier),) = settings
        return schedule_mu(((rate, noise_multiplier, rounds),))

    @classmethod
    def gdp_mu_star_basis(cls) -> str:
        from privsilo.mechanisms.gdp import UPPER_ESTIMATE

        return f"every held round, a Poisson-subsampled Gaussian at the client rate; {UPPER_ESTIMATE} (exact at rate 1)"

    def assumed_public(self) -> tuple[str, ...]:
        return (SILO_COUNT_PUBLIC,)
