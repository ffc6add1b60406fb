"""``none``: plain FedAvg without any privacy protection (the PrivacyFree baseline).

In an audit (client level) the silo also carries the audit's canary clients: each one joins the round with the
silo and uploads its direction ``u_i`` scaled to the length of the silo's own update, with the silo's weight
(Andrew et al. 2024, Sec. 3: canary clients whose update is a random direction).
"""
from __future__ import annotations

import numpy as np

from privsilo.mechanisms.base import WEIGHTED_DELTA, GlobalState, Mechanism, ServerMechanism, SiloContext, SiloContribution, SiloMechanism
from privsilo.mechanisms.canaries import with_canary_clients
from privsilo.mechanisms.fedavg import FedAvgServer, local_sgd, weighted_delta_vector


class FedAvgSilo(SiloMechanism):
    """Local mini-batch SGD; batches drawn without replacement from the silo's generator."""

    def __init__(self, context: SiloContext) -> None:
        self.context = context

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        (start,) = state
        delta, mean_loss = local_sgd(self.context, start)
        weight = float(self.context.labels.shape[0])
        vector = weighted_delta_vector(delta, weight)
        canaries = self.context.canaries
        if canaries is not None and len(canaries):  # canary client c uploads |delta| u_c with the silo's weight
            vector = with_canary_clients(vector, canaries.directions(delta.size) * np.linalg.norm(delta), weight=weight)
        return SiloContribution(vector=vector, metrics={"train_loss": mean_loss})


class NoPrivacy(Mechanism):
    """FedAvg with no privacy mechanism."""

    name = "none"
    supports_regression = True
    upload_form = WEIGHTED_DELTA
    audit_units = ("client",)  # canary clients: no unit is protected, the audit measures the leak

    @classmethod
    def gdp_mu_star_basis(cls) -> str:
        return "none: no privacy claim"

    def silo(self, context: SiloContext) -> SiloMechanism:
        return FedAvgSilo(context)

    def server(self) -> ServerMechanism:
        return FedAvgServer()
