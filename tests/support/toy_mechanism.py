"""A mechanism of the tests' own, outside the shipped registry, for ``tests/integration/test_toy_mechanism.py``: FedAvg whose
silos add Gaussian noise of a public standard deviation to their model change (no accounting: no guarantee).

Everything the simulator needs to know of it is its traits below. Importing this module registers it as ``toy``
(``privsilo.mechanisms.registry.register_mechanism``): Ray workers import it when they unpickle a scenario's ``ToyParams``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from pydantic import Field

from privsilo.mechanisms.base import (
    WEIGHTED_DELTA,
    GlobalState,
    Mechanism,
    MechanismParams,
    ServerMechanism,
    SiloContext,
    SiloContribution,
    SiloMechanism,
    numpy_generator,
)
from privsilo.mechanisms.canaries import with_canary_clients
from privsilo.mechanisms.fedavg import FedAvgServer, local_sgd, weighted_delta_vector
from privsilo.mechanisms.registry import register_mechanism

NAME = "toy"
CLAIM_NOTE = "the toy mechanism claims nothing"


class ToyParams(MechanismParams):
    noise_std: float = Field(default=0.0, ge=0.0)
    """Standard deviation of the Gaussian noise added to each coordinate of a silo's model change."""


class ToySilo(SiloMechanism):
    def __init__(self, context: SiloContext, noise_std: float) -> None:
        self.context, self.noise_std = context, noise_std

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        (start,) = state
        delta, mean_loss = local_sgd(self.context, start)
        if self.noise_std > 0:  # without noise the silo draws exactly what FedAvg's does
            delta = delta + numpy_generator(self.context.generator, words=2).normal(0.0, self.noise_std, delta.size)
        weight = float(self.context.labels.shape[0])
        vector = weighted_delta_vector(delta, weight)
        canaries = self.context.canaries
        if canaries is not None and len(canaries):  # canary clients upload |delta| u_c, as FedAvg's do
            vector = with_canary_clients(vector, canaries.directions(delta.size) * np.linalg.norm(delta), weight=weight)
        return SiloContribution(vector=vector, metrics={"train_loss": mean_loss})


class ToyMechanism(Mechanism):
    """Noisy FedAvg: attackable (its upload is FedAvg's), audited with canary clients."""

    name = NAME
    Params = ToyParams
    upload_form = WEIGHTED_DELTA
    audit_units = ("client",)

    def silo(self, context: SiloContext) -> SiloMechanism:
        return ToySilo(context, self.params.noise_std)

    def server(self) -> ServerMechanism:
        return FedAvgServer()

    @classmethod
    def audit_claims(cls, privacy: Mapping[str, Any], hosts: Sequence[str]) -> dict[str, Any]:
        return {"claim_note": CLAIM_NOTE}


def register() -> None:
    """Register ``toy`` in this process (again after a test removed it)."""
    register_mechanism(NAME, f"{__name__}:ToyMechanism")


register()
