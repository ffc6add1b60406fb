"""``none``: plain FedAvg without any privacy protection (the PrivacyFree baseline)."""
from __future__ import annotations

from mechanisms.base import GlobalState, Mechanism, ServerMechanism, SiloContext, SiloContribution, SiloMechanism
from mechanisms.fedavg import FedAvgServer, local_sgd, weighted_delta_vector


class FedAvgSilo(SiloMechanism):
    """Local mini-batch SGD; batches drawn without replacement from the silo's generator."""

    def __init__(self, context: SiloContext) -> None:
        self.context = context

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        (start,) = state
        delta, mean_loss = local_sgd(self.context, start)
        weight = float(self.context.labels.shape[0])
        return SiloContribution(vector=weighted_delta_vector(delta, weight), metrics={"train_loss": mean_loss})


class NoPrivacy(Mechanism):
    """FedAvg with no privacy mechanism."""

    name = "none"
    supports_regression = True

    def silo(self, context: SiloContext) -> SiloMechanism:
        return FedAvgSilo(context)

    def server(self) -> ServerMechanism:
        return FedAvgServer()
