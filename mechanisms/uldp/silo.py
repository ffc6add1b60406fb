"""Silo side of ``uldp``: one class per family of variants (see :mod:`privsilo.mechanisms.uldp.mechanism`).

All randomness (mini-batches, DP-SGD sampling, Gaussian noise) comes from the silo's ``context.generator``.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from privsilo.mechanisms.base import (
    GlobalState,
    PrivacyBudgetError,
    SiloContext,
    SiloContribution,
    SiloMechanism,
    load_vector_into_model,
    model_to_vector,
)
from privsilo.mechanisms.dp_sgd import noisy_local_training
from privsilo.mechanisms.fedavg import local_sgd
from privsilo.mechanisms.events import GroupDpSgdEvent, UserLevelGaussianEvent
from privsilo.mechanisms.uldp.variants import Variant, naive_noise_factor, naive_noise_multiplier
from privsilo.mechanisms.uldp.params import UldpParams
from privsilo.mechanisms.uldp.training import clip_rows, train_users
from privsilo.mechanisms.uldp.weights import plan_mask, resolve_group_k, round_robin_quota, user_weights
from privsilo.protocols.private_weighting.messages import UserDeltas


class _UldpSilo(SiloMechanism):
    """What every variant shares: the user histogram, the round plan and the Gaussian noise."""

    def __init__(self, context: SiloContext, params: UldpParams) -> None:
        if context.user_ids is None or context.user_histogram is None:
            raise ValueError("uldp needs record owners (data.users) in every silo")
        self.context = context
        self.params = params
        self.user_ids = np.asarray(context.user_ids)
        self.histogram = np.asarray(context.user_histogram)
        self.num_silos, self.num_users = self.histogram.shape

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        return self.contribute_with_plan(state, round_index=round_index, plan=None)

    def _noise(self, size: int, std: float) -> np.ndarray:
        """``N(0, std^2 I_size)``, drawn where the silo trains (``SiloContext.training_generator``)."""
        generator = self.context.training_generator()
        return torch.randn(size, generator=generator, device=generator.device, dtype=torch.float64).mul_(std).cpu().numpy()

    def _user_level_event(self, round_index: int, sampled: np.ndarray, *, noise_multiplier: float) -> UserLevelGaussianEvent:
        return UserLevelGaussianEvent(
            round_index=round_index,
            user_rate=self.params.user_rate,
            noise_multiplier=noise_multiplier,
            users_sampled=int(sampled.sum()),
        )


class PerUserSilo(_UldpSilo):
    """ULDP-AVG, AVG-w and SGD (Algorithm 3): per-user training, per-user clipping, weights, noise sigma C/sqrt|S|.

    With ``weighting: private`` (AVG-w) the silo never computes a weight: it hands its users' clipped deltas and its
    noise to the private weighting protocol (``Uldp.silo_protocol``), which weights them under encryption.
    """

    def __init__(self, context: SiloContext, params: UldpParams) -> None:
        super().__init__(context, params)
        self.variant = Variant(params.variant)
        self.private = params.weighting == "private"
        if self.private and context.canaries is not None:
            raise TypeError("an audit's canary users are weighted in the clear: the private weighting protocol takes none")
        if self.private:
            self._check_records_bound()
            self.weights = None
        else:
            self.weights = user_weights(self.histogram, silo=context.silo_id, proportional=self.variant is Variant.AVG_W)
        self.users = np.unique(self.user_ids)
        self.groups = [torch.as_tensor(np.flatnonzero(self.user_ids == u), device=context.device) for u in self.users]

    def _check_records_bound(self) -> None:
        """The simulator's check (it sees every silo; no silo could): every N_u <= max_records_per_user."""
        largest = int(self.histogram.sum(axis=0).max(initial=0))
        if largest > self.params.max_records_per_user:
            raise PrivacyBudgetError(
                f"mechanism.max_records_per_user: got {self.params.max_records_per_user}; a user has {largest} records "
                f"across the silos, and the private weighting protocol needs every user's total N_u <= N_max: set it to "
                f"at least {largest} (a larger N_max may need a larger paillier_key_bits)"
            )

    def clipped_user_deltas(self, start: np.ndarray, sampled: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
        """This silo's sampled users (ids) and their deltas ``clip_C(Delta^{s,u})`` as float64 rows."""
        ctx = self.context
        active = [i for i, user in enumerate(self.users) if sampled[user]]
        if not active:
            return self.users[active], torch.zeros(0, start.size, dtype=torch.float64)
        load_vector_into_model(ctx.model, start)
        groups = [self.groups[i] for i in active]
        if self.variant is Variant.SGD:  # one full-batch gradient per user: minus the delta of one step at lr 1
            rows = -train_users(ctx.model, features=ctx.features, labels=ctx.labels, groups=groups, steps=1, lr=1.0)
        else:
            rows = train_users(ctx.model, features=ctx.features, labels=ctx.labels, groups=groups, steps=ctx.training.local_steps,
                               lr=ctx.training.lr, mu=ctx.training.proximal_mu)
        return self.users[active], clip_rows(rows.double(), self.params.max_grad_norm)

    def weighted_sum(self, start: np.ndarray, sampled: np.ndarray) -> np.ndarray:
        """``sum_u w_{s,u} clip_C(Delta^{s,u})`` over this silo's sampled users (before noise), float64 (plain weighting)."""
        users, rows = self.clipped_user_deltas(start, sampled)
        if not len(users):
            return np.zeros_like(start)
        weights = torch.as_tensor(self.weights[users], dtype=torch.float64, device=rows.device)
        return (weights[:, None] * rows).sum(dim=0).cpu().numpy()

    def contribute_with_plan(self, state: GlobalState, *, round_index: int, plan: object) -> SiloContribution:
        (start,) = state
        sampled = plan_mask(plan, self.num_users)
        std = self.params.noise_multiplier * self.params.max_grad_norm / math.sqrt(self.num_silos)
        event = self._user_level_event(round_index, sampled, noise_multiplier=self.params.noise_multiplier)
        if self.private:
            users, rows = self.clipped_user_deltas(start, sampled)
            deltas = UserDeltas(users=users, deltas=rows.cpu().numpy(), noise=self._noise(start.size, std))
            return SiloContribution(vector=None, protocol_input=deltas, events=(event,))
        total = self.weighted_sum(start, sampled) + self.canary_sum(start.size, round_index)
        return SiloContribution(vector=total + self._noise(total.size, std), events=(event,))

    def canary_sum(self, dimension: int, round_index: int) -> np.ndarray:
        """An audit's canary users (:mod:`privsilo.mechanisms.canaries`): each sampled one adds ``w_{s,u} C u`` (its clipped
        delta is ``C u`` in every silo holding its records; SGD's rows are gradients, so ``-C u`` there)."""
        canaries = self.context.canaries
        if canaries is None or not len(canaries):
            return np.zeros(dimension)
        weights = canaries.weights * canaries.sampled(round_index, self.params.user_rate)
        row_sign = -1.0 if self.variant is Variant.SGD else 1.0
        return row_sign * self.params.max_grad_norm * (weights @ canaries.directions(dimension))


class NaiveSilo(_UldpSilo):
    """ULDP-NAIVE (Algorithm 1): local SGD on the sampled users' records, delta clipped to C, noise sigma C sqrt|S|."""

    def __init__(self, context: SiloContext, params: UldpParams) -> None:
        super().__init__(context, params)
        if context.canaries is not None:
            raise TypeError("ULDP-NAIVE clips the silo's whole delta: it takes no canary users")

    def clipped_delta(self, start: np.ndarray, sampled: np.ndarray) -> np.ndarray:
        ctx = self.context
        records = torch.as_tensor(np.flatnonzero(sampled[self.user_ids]), device=ctx.device)
        if len(records) == 0:
            return np.zeros_like(start)
        delta, _ = local_sgd(ctx, start, records=records)
        return delta * min(1.0, self.params.max_grad_norm / max(float(np.linalg.norm(delta)), np.finfo(np.float64).tiny))

    def contribute_with_plan(self, state: GlobalState, *, round_index: int, plan: object) -> SiloContribution:
        (start,) = state
        sampled = plan_mask(plan, self.num_users)
        delta = self.clipped_delta(start, sampled)
        sigma, clip = self.params.noise_multiplier, self.params.max_grad_norm
        std = naive_noise_factor(self.params.naive_noise) * sigma * clip * math.sqrt(self.num_silos)
        event = self._user_level_event(round_index, sampled, noise_multiplier=naive_noise_multiplier(sigma, self.params.naive_noise))
        return SiloContribution(vector=delta + self._noise(delta.size, std), events=(event,))


class GroupSilo(_UldpSilo):
    """ULDP-GROUP-k (Algorithm 2): record-level DP-SGD on the records kept under the k-per-user limit."""

    def __init__(self, context: SiloContext, params: UldpParams) -> None:
        super().__init__(context, params)
        self.group_k = resolve_group_k(params.group_k, self.histogram)
        quota = round_robin_quota(self.histogram, group_k=self.group_k)[context.silo_id]
        kept = np.sort(np.concatenate(
            [np.flatnonzero(self.user_ids == u)[: quota[u]] for u in np.unique(self.user_ids)] or [np.zeros(0, dtype=np.int64)]
        )).astype(np.int64)
        self.kept = kept
        self.local = self._kept_records()
        # A silo that keeps no record has none to sample (rate 0: no record-level loss) but still takes its noisy
        # steps, so its upload does not tell whether its users' records were kept elsewhere.
        self.rate = min(1.0, context.training.batch_size / len(kept)) if len(kept) else 0.0

    def _kept_records(self) -> SiloContext:
        """The silo's context restricted to the kept records (copies of them: rebuilt, never snapshotted)."""
        index = torch.as_tensor(self.kept, device=self.context.device)
        return dataclasses.replace(self.context, features=self.context.features[index], labels=self.context.labels[index])

    def __getstate__(self) -> dict:
        # a snapshot holds no records (privsilo.simulator.engine.snapshots): the kept copies are rebuilt from the context on load
        return {key: value for key, value in self.__dict__.items() if key != "local"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.local = self._kept_records()

    def contribute_with_plan(self, state: GlobalState, *, round_index: int, plan: object) -> SiloContribution:
        plan_mask(plan, self.num_users)  # group has no user sampling: only None passes for all users
        (start,) = state
        ctx, params = self.local, self.params
        load_vector_into_model(ctx.model, start)
        ctx.model.train()
        noisy_local_training(ctx, rates=self.rate, noise_multiplier=params.noise_multiplier,
                             max_grad_norm=params.max_grad_norm, divisor=float(ctx.training.batch_size))
        event = GroupDpSgdEvent(round_index=round_index, sampling_rate=self.rate, noise_multiplier=params.noise_multiplier,
                                steps=ctx.training.local_steps, group_k=self.group_k)
        return SiloContribution(vector=model_to_vector(ctx.model) - start, events=(event,))


def build_silo(context: SiloContext, params: UldpParams) -> SiloMechanism:
    """The silo object of ``params.variant``."""
    variant = Variant(params.variant)
    if variant is Variant.NAIVE:
        return NaiveSilo(context, params)
    if variant is Variant.GROUP:
        return GroupSilo(context, params)
    return PerUserSilo(context, params)
