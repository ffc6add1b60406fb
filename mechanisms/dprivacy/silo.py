"""The client side of Galli et al.'s Algorithm 1: pick the best hypothesis, train it, sanitize the parameters."""
from __future__ import annotations

import numpy as np

from mechanisms.base import (
    GlobalState,
    SiloContext,
    SiloContribution,
    SiloMechanism,
    load_vector_into_model,
    numpy_generator,
    prediction_loss,
)
from mechanisms.dprivacy.params import DPrivacyParams
from mechanisms.dprivacy.sanitize import hypothesis_spread, sanitize_update
from mechanisms.fedavg import local_sgd

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

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        ctx = self.context
        choice = best_hypothesis(ctx, state)
        start = np.asarray(state[choice], dtype=np.float64)
        delta, _ = local_sgd(ctx, start, epochs=self.params.local_epochs)
        upload, event = sanitize_update(
            start, delta, params=self.params, rng=numpy_generator(ctx.generator, words=NOISE_SEED_WORDS), hypothesis_spread=hypothesis_spread(state)
        )
        return SiloContribution(vector=upload, events=(event,))


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
    total = 0.0
    with torch.no_grad():
        for features, labels in zip(torch.split(context.features, EVALUATION_BATCH), torch.split(context.labels, EVALUATION_BATCH)):
            total += prediction_loss(context.model(features), labels).item() * len(labels)
    return total / context.labels.shape[0]
