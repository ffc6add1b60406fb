"""The client side of Galli et al.'s Algorithm 1: pick the best hypothesis, train it, sanitize the parameters.

In an audit (client level) a silo also carries the audit's canary clients (Andrew et al. 2024, Sec. 3): canary c
starts from the hypothesis its host picked, takes the update ``r u_c`` along its direction, with r the public
radius R under ``clipped`` (the clip bound: the largest update the guarantee covers) and the host's own update
norm ||delta|| under ``paper`` (the scale a client of this silo has), and uploads it sanitized as a client does
(Algorithm 2, ``sanitize_update``), with fresh noise from the round's generator after the silo's own upload.
The silo sends its upload and its canaries' uploads end to end; the server clusters each of them as one client
(``privsilo.mechanisms.dprivacy.ifca``). Canary clients report no privacy events.
"""
from __future__ import annotations

import numpy as np

from privsilo.mechanisms.base import (
    GlobalState,
    SiloContext,
    SiloContribution,
    SiloMechanism,
    load_vector_into_model,
    numpy_generator,
    prediction_loss,
)
from privsilo.mechanisms.dprivacy.params import Calibration, DPrivacyParams
from privsilo.mechanisms.dprivacy.sanitize import hypothesis_spread, sanitize_update
from privsilo.mechanisms.fedavg import local_sgd

EVALUATION_BATCH = 4096
NOISE_SEED_WORDS = 2  # each round's noise generator is keyed by 2 x 62 bits from the silo's generator


class DPrivacySilo(SiloMechanism):
    """Evaluates every hypothesis on the client's records, trains the best (E epochs, or ``local_steps`` steps)
    and uploads its sanitized parameters, not the update, without the hypothesis id."""

    def __init__(self, context: SiloContext, params: DPrivacyParams) -> None:
        if context.labels.shape[0] == 0:
            raise ValueError(f"client {context.silo_id} holds no records")
        self.context = context
        self.params = params
        dimension = sum(p.numel() for p in context.model.parameters())
        canaries = context.canaries
        self.canary_directions = () if canaries is None else canaries.directions(dimension).astype(np.float64)

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        ctx = self.context
        choice = best_hypothesis(ctx, state)
        start = np.asarray(state[choice], dtype=np.float64)
        delta, _ = local_sgd(ctx, start, epochs=self.params.local_epochs)
        rng, spread = numpy_generator(ctx.generator, words=NOISE_SEED_WORDS), hypothesis_spread(state)
        upload, event = sanitize_update(start, delta, params=self.params, rng=rng, hypothesis_spread=spread)
        if len(self.canary_directions):
            upload = np.concatenate([upload, *self.canary_uploads(start, delta, rng=rng, hypothesis_spread=spread)])
        return SiloContribution(vector=upload, events=(event,))

    def canary_uploads(self, start: np.ndarray, delta: np.ndarray, *, rng: np.random.Generator,
                       hypothesis_spread: float) -> list[np.ndarray]:
        """One sanitized upload per hosted canary client, ``start + r u_c + noise`` (see the module docstring),
        each with fresh noise from ``rng``; the host's own update ``delta`` sets r under ``paper``."""
        paper = self.params.calibration is Calibration.PAPER
        length = float(np.linalg.norm(delta)) if paper else float(self.params.radius)
        return [sanitize_update(start, length * u, params=self.params, rng=rng, hypothesis_spread=hypothesis_spread)[0]
                for u in self.canary_directions]


def best_hypothesis(context: SiloContext, state: GlobalState) -> int:
    """argmin_j of the mean loss of hypothesis j on the client's records (ties: the lowest j); with one
    hypothesis there is nothing to compare, so no pass over the records."""
    if len(state) == 1:
        return 0
    losses = [mean_loss(context, vector) for vector in state]
    return int(np.argmin(losses))


def mean_loss(context: SiloContext, vector: np.ndarray) -> float:
    """The mean loss of the model ``vector`` on all the client's records."""
    import torch

    load_vector_into_model(context.model, vector)
    context.model.eval()
    total = torch.zeros((), dtype=torch.float64, device=context.device)  # summed on the device: one wait at the end
    with torch.no_grad():
        for features, labels in zip(torch.split(context.features, EVALUATION_BATCH), torch.split(context.labels, EVALUATION_BATCH)):
            total += prediction_loss(context.model(features), labels).double() * len(labels)
    return float(total) / context.labels.shape[0]
