"""FedAvg pieces shared by mechanisms that average model deltas (McMahan et al. 2017).

A silo's contribution is ``[n_i * delta_i, n_i]``: the server only needs the sum over participants to compute
the example-weighted mean delta ``sum(n_i delta_i) / sum(n_i)``, so the weights travel through secure
aggregation together with the deltas.
"""
from __future__ import annotations

import numpy as np

from mechanisms.base import GlobalState, ServerMechanism


def weighted_delta_vector(delta: np.ndarray, weight: float) -> np.ndarray:
    """Contribution vector ``[weight * delta, weight]``."""
    return np.concatenate([np.asarray(delta, dtype=np.float64) * weight, [float(weight)]])


class FedAvgServer(ServerMechanism):
    """Applies the example-weighted mean of the participants' deltas to the single global model."""

    def aggregate(self, state: GlobalState, contribution_sum: np.ndarray, *, num_participants: int) -> GlobalState:
        (params,) = state
        total_weight = contribution_sum[-1]
        if total_weight <= 0:
            return state
        return (params + contribution_sum[:-1] / total_weight,)
