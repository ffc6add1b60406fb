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

from privsilo.mechanisms.rpdp.accountant import Adversary, epsilon_from_rdp, rdp_curve


class RealisedCost:
    """Epsilon of ``k`` realised rounds at sampling rate ``q`` (Theorem 1, server view), for many records.

    RDP composes additively, so ``k`` rounds cost ``k * rho_tau(a, q)``: the one-round curve is computed once per
    distinct rate (and kept for later queries), and every query is a minimum over orders of
    ``k * rho_tau + offset``. These are the values :func:`~privsilo.mechanisms.rpdp.accountant.epsilon` minimises with
    ``participations=k``, so the results are the same; a round's query costs milliseconds instead of a fresh
    accountant evaluation.

    ``settings`` are :func:`~privsilo.mechanisms.rpdp.accountant.epsilon`'s: ``noise_multiplier``, ``rounds``,
    ``local_steps``, ``client_rate``, ``delta``, optionally ``conversion`` and ``orders``.
    """

    def __init__(self, **settings: Any) -> None:
        training = dict(settings)
        self._conversion = {key: training.pop(key) for key in ("delta", "conversion", "orders") if key in training}
        self._training = training
        self.rounds = int(training["rounds"])
        self._rates = np.zeros(0)
        # Validates every setting now: one round at rate 0 (and an empty conversion).
        self._curves = self._round_rdp(self._rates)
        epsilon_from_rdp(self._curves, **self._conversion)

    def _round_rdp(self, rates: np.ndarray) -> np.ndarray:
        orders = self._conversion.get("orders")
        return rdp_curve(rates, **self._training, adversary=Adversary.SERVER, participations=1, orders=orders)

    def _rate_index(self, rates: np.ndarray) -> np.ndarray:
        """Index of every rate in the cache, after computing the one-round curves of rates not seen before."""
        new = np.setdiff1d(rates, self._rates)
        if new.size:
            merged = np.concatenate([self._rates, new])
            order = np.argsort(merged, kind="stable")
            self._rates = merged[order]
            self._curves = np.concatenate([self._curves, self._round_rdp(new)], axis=1)[:, order]
        return np.searchsorted(self._rates, rates)

    def epsilon(self, rates: np.ndarray, participations: np.ndarray) -> np.ndarray:
        """Per record, the epsilon of ``participations[j]`` realised rounds (integers in [0, rounds]) at ``rates[j]``."""
        rates, k = np.asarray(rates, dtype=np.float64).reshape(-1), np.asarray(participations)
        if k.shape != rates.shape or k.dtype.kind not in "iu" or np.any(k < 0) or np.any(k > self.rounds):
            raise ValueError(f"participations must be {rates.size} integers in [0, rounds={self.rounds}], got {k!r}")
        pairs, inverse = np.unique(self._rate_index(rates) * (self.rounds + 1) + k, return_inverse=True)
        rate_index, rounds = np.divmod(pairs, self.rounds + 1)
        value = epsilon_from_rdp(rounds * self._curves[:, rate_index], **self._conversion)
        value = np.where((self._rates[rate_index] == 0.0) | (rounds == 0), 0.0, value)
        return value[inverse.reshape(-1)]


class RecordBudgetAccountant:
    """Tracks, per record, rounds of participation and spent epsilon against its budget."""

    def __init__(self, *, budgets: np.ndarray, rates: np.ndarray, settings: Mapping[str, Any]) -> None:
        """``settings``: the training parameters of :class:`RealisedCost` (sigma, T, tau, lambda, delta, ...)."""
        self.budgets = np.asarray(budgets, dtype=np.float64)
        self.rates = np.asarray(rates, dtype=np.float64)
        self.rounds = np.zeros(self.budgets.shape, dtype=np.int64)
        self.excluded_early = np.zeros(self.budgets.shape, dtype=bool)
        self._cost = RealisedCost(**settings)

    def spent(self) -> np.ndarray:
        return self._cost.epsilon(self.rates, self.rounds)

    def rates_for_next_round(self) -> np.ndarray:
        """The pre-check: each record's rate, or 0 if one more round would exceed its budget."""
        allowed = (self.rates > 0) & (self._cost.epsilon(self.rates, self.rounds + 1) <= self.budgets)
        self.excluded_early |= (self.rates > 0) & ~allowed
        return np.where(allowed, self.rates, 0.0)

    def commit(self, used_rates: np.ndarray) -> None:
        """Count one more round for every record that was eligible in it."""
        self.rounds += np.asarray(used_rates) > 0
