"""Per-record budget enforcement of rPDP-FL (Liu et al., CCS 2024, Sec. 5.3, "budget accountant").

Enforcement uses the *realised* cost an honest-but-curious server can attribute to a record: ``n_j * rho_tau``
in RDP, where ``n_j`` counts the rounds in which record ``j`` was actually eligible in a round its silo took
part in (Theorem 1, server view, with the realised instead of the expected participation). Before a round,
every record whose cost after one more round would exceed its budget is excluded (its rate is 0 for the
round); after the round, the eligible records' counts grow by one. Invariant: no record's spent epsilon ever
exceeds its budget.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from mechanisms.rpdp.accountant import epsilon


def realised_epsilon(rates: np.ndarray, participations: np.ndarray, **settings: Any) -> np.ndarray:
    """Per record, the epsilon of ``participations`` realised rounds at ``rates`` (Theorem 1, server view).

    ``settings`` are :func:`~mechanisms.rpdp.accountant.epsilon`'s training parameters; the accountant runs once
    per distinct (rate, rounds) pair, which is few for the estimator's grid rates.
    """
    keys = np.stack([np.asarray(rates, dtype=np.float64), np.asarray(participations, dtype=np.float64)])
    pairs, inverse = np.unique(keys, axis=1, return_inverse=True)
    unique = epsilon(pairs[0], **settings, adversary="server", participations=pairs[1].astype(np.int64))
    return unique[inverse.reshape(-1)]


class RecordBudgetAccountant:
    """Tracks, per record, rounds of participation and spent epsilon against its budget."""

    def __init__(self, *, budgets: np.ndarray, rates: np.ndarray, settings: Mapping[str, Any]) -> None:
        """``settings``: the training parameters of :func:`realised_epsilon` (sigma, T, tau, lambda, delta, ...)."""
        self.budgets = np.asarray(budgets, dtype=np.float64)
        self.rates = np.asarray(rates, dtype=np.float64)
        self.rounds = np.zeros(self.budgets.shape, dtype=np.int64)
        self.excluded_early = np.zeros(self.budgets.shape, dtype=bool)
        self._settings = dict(settings)

    def _epsilon(self, rounds: np.ndarray) -> np.ndarray:
        return realised_epsilon(self.rates, rounds, **self._settings)

    def spent(self) -> np.ndarray:
        return self._epsilon(self.rounds)

    def rates_for_next_round(self) -> np.ndarray:
        """The pre-check: each record's rate, or 0 if one more round would exceed its budget."""
        allowed = (self.rates > 0) & (self._epsilon(self.rounds + 1) <= self.budgets)
        self.excluded_early |= (self.rates > 0) & ~allowed
        return np.where(allowed, self.rates, 0.0)

    def commit(self, used_rates: np.ndarray) -> None:
        """Count one more round for every record that was eligible in it."""
        self.rounds += np.asarray(used_rates) > 0
