"""FedProx's proximal term (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020, Eq. 2).

A silo's local objective becomes ``F(w) + mu/2 ||w - w_t||^2`` with ``w_t`` the global model the round started
from, so every local step adds ``mu (w - w_t)`` to the data gradient. That term depends on the global model and
the local iterate only, never on a record: in DP-SGD it is added after clipping and noising, a post-processing of
the noisy step that leaves the guarantee as it is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class ProximalTerm:
    """``mu/2 ||w - anchor||^2`` over a model's parameters (``anchor``: one tensor per ``model.parameters()``)."""

    mu: float
    anchor: tuple[torch.Tensor, ...]

    @classmethod
    def at(cls, model: torch.nn.Module, mu: float) -> ProximalTerm | None:
        """The term anchored at ``model``'s current parameters (the global model), or None for ``mu = 0``."""
        if mu == 0:
            return None
        return cls(mu=mu, anchor=tuple(p.detach().clone() for p in model.parameters()))

    def gradients(self, parameters: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """``mu (w - anchor)`` for each parameter tensor (detached)."""
        return [self.mu * (p.detach() - a) for p, a in zip(parameters, self.anchor, strict=True)]
