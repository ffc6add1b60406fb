"""Per-record budget enforcement of rPDP-FL (Liu et al., CCS 2024, Sec. 5.3, "budget accountant").

Enforcement uses the *realised* cost an honest-but-curious server can attribute to a record: ``n_j * rho_tau``
in RDP, where ``n_j`` counts the rounds in which record ``j`` was actually eligible in a round its silo took
part in (Theorem 1, server view, with the realised instead of the expected participation). Before a round,
every record whose cost after one more round would exceed its budget is excluded (its rate is 0 for the
round); after the round, the eligible records' counts grow by one. Invariant: no record's spent epsilon ever
exceeds its budget.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

EpsilonOfRounds = Callable[[np.ndarray, np.ndarray], np.ndarray]


class RecordBudgetAccountant:
    """Tracks, per record, rounds of participation and spent epsilon against its budget."""

    def __init__(self, *, budgets: np.ndarray, rates: np.ndarray, epsilon_of: EpsilonOfRounds) -> None:
        """``epsilon_of(rates, rounds)`` is the realised epsilon of ``rounds`` rounds at ``rates`` (vectorised)."""
        self.budgets = np.asarray(budgets, dtype=np.float64)
        self.rates = np.asarray(rates, dtype=np.float64)
        self.rounds = np.zeros(self.budgets.shape, dtype=np.int64)
        self.excluded_early = np.zeros(self.budgets.shape, dtype=bool)
        self._epsilon_of = epsilon_of

    def _epsilon(self, rounds: np.ndarray) -> np.ndarray:
        """Epsilon per record after ``rounds`` rounds, evaluated once per distinct (rate, rounds) pair."""
        pairs, inverse = np.unique(np.stack([self.rates, rounds.astype(np.float64)]), axis=1, return_inverse=True)
        return self._epsilon_of(pairs[0], pairs[1].astype(np.int64))[inverse.reshape(-1)]

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
