"""Per-record sampling probabilities for personalised budgets (rPDP-FL, Liu et al., CCS 2024, Sec. 6).

Given training parameters, find for each record's budget ``epsilon_ij`` a sampling probability ``q_ij`` whose
Theorem 1 epsilon (``privsilo.mechanisms.rpdp.accountant.epsilon``) does not exceed it. Three methods:

* ``"exact"`` (default): an adaptive grid of rates whose epsilons are computed exactly, refined by bisection only
  where budgets fall, so that consecutive epsilons differ by a factor <= 1 + ``max_waste``; each record gets the
  largest grid rate whose epsilon is <= its budget. Never exceeds a budget; wastes at most ``max_waste`` of it
  wherever ``q < 1``.
* ``"scf"``: the paper's Simulation-CurveFitting (Sec. 6.1, Algorithm 2): fit ``eps(q) = exp(a q + b) + c`` on a
  grid and invert it. Reproduces the paper, but the fit is not a bound: it can overspend budgets (see
  ``overspend``), so a caller enforcing budgets must not use it.
* ``"bisect"``: per-record binary search on the exact accountant (the slow baseline of Boenisch et al. that the
  paper compares to, Sec. 7.1.2); as safe as ``"exact"``.

Rates below ``q_min`` (default 1e-6) are not supported: a budget below ``epsilon(q_min)`` (the RDP-to-DP
conversion's floor, roughly 0.03-0.1 for the usual delta and orders) gets ``q = 0`` and is flagged in the
``infeasible`` mask of :meth:`SamplingProbabilityEstimator.sampling_probability`'s last call, so the caller can
exclude the record or refuse to start.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize

from privsilo.mechanisms.rpdp.accountant import Adversary, Conversion, epsilon

METHODS = ("exact", "scf", "bisect")
# The candidate rates of the authors' SCF code: 0.001..0.099 by 0.001, 0.01..0.99 by 0.01, and 1.
SCF_GRID = np.unique(np.round(np.concatenate([np.arange(1, 100) / 1000, np.arange(1, 100) / 100, [1.0]]), 6))
_INITIAL_POINTS = 65
_MAX_REFINEMENTS = 80


def _budgets(budgets: object) -> np.ndarray:
    values = np.asarray(budgets, dtype=np.float64)
    bad = ~np.isfinite(values) | (values <= 0.0)
    if bad.any():
        raise ValueError(
            f"budgets must be finite and > 0: {int(bad.sum())} of {values.size} are not (e.g. {values[bad].flat[0]!r})"
        )
    return values


def _scf_model(q: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    return np.exp(a * q + b) + c


class SamplingProbabilityEstimator:
    """Map privacy budgets to per-record sampling probabilities for one training configuration.

    Attributes for reports and plots: ``grid_q`` / ``grid_epsilon`` (the rates evaluated so far and their exact
    epsilons; the exact method refines them on demand), ``q_min``, ``epsilon_floor`` (= epsilon(q_min)),
    ``epsilon_max`` (= epsilon(1)), ``infeasible`` (mask of the last call's budgets below ``epsilon_floor``) and,
    for ``"scf"``, ``fit_params`` (a, b, c) and ``r_squared`` of the fit on ``SCF_GRID``.
    """

    def __init__(
        self,
        *,
        noise_multiplier: float,
        rounds: int,
        local_steps: int,
        client_rate: float,
        delta: float,
        adversary: Adversary | str = Adversary.THIRD_PARTY,
        conversion: Conversion | str = Conversion.OPACUS,
        method: str = "exact",
        max_waste: float = 0.01,
        q_min: float = 1e-6,
        orders: object = None,
    ) -> None:
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if not (isinstance(max_waste, float | int) and 0.0 < max_waste < 1.0):
            raise ValueError(f"max_waste must lie in (0, 1), got {max_waste!r}")
        if not (isinstance(q_min, float | int) and 0.0 < q_min < 1.0):
            raise ValueError(f"q_min must lie in (0, 1), got {q_min!r}")
        self._settings = dict(
            noise_multiplier=noise_multiplier,
            rounds=rounds,
            local_steps=local_steps,
            client_rate=client_rate,
            delta=delta,
            adversary=adversary,
            conversion=conversion,
            orders=orders,
        )
        self.method, self.max_waste, self.q_min = method, float(max_waste), float(q_min)
        initial = np.unique(np.concatenate([np.geomspace(self.q_min, 1.0, _INITIAL_POINTS), [1.0]]))
        self.grid_q, self.grid_epsilon = initial, self.epsilon(initial)
        self.epsilon_floor, self.epsilon_max = float(self.grid_epsilon[0]), float(self.grid_epsilon[-1])
        self.infeasible = np.zeros(0, dtype=bool)
        self.fit_params: tuple[float, float, float] | None = None
        self.r_squared: float | None = None
        if method == "scf":
            self._fit()

    def epsilon(self, q: object) -> np.ndarray:
        """Theorem 1 epsilon of rate(s) ``q`` under this estimator's settings."""
        return epsilon(q, **self._settings)

    def sampling_probability(self, budgets: object) -> np.ndarray:
        """Sampling probability per budget (same shape); 0 where the budget is below ``epsilon_floor``."""
        values = _budgets(budgets)
        self.infeasible = values < self.epsilon_floor
        flat = values.ravel()
        if self.method == "exact":
            rates = self._exact(flat)
        elif self.method == "scf":
            rates = self._scf(flat)
        else:
            rates = np.array([self._bisect(budget) for budget in flat])
        return rates.reshape(values.shape)

    # exact ------------------------------------------------------------------------------------------------------
    def _envelope(self) -> np.ndarray:
        """Running maximum of the grid epsilons: monotone even if rounding makes epsilon wobble by 1e-15."""
        return np.maximum.accumulate(self.grid_epsilon)

    def _refine(self, sorted_budgets: np.ndarray) -> None:
        """Bisect (geometric midpoints) every grid interval ``[E_k, E_k+1)`` holding a budget until
        ``E_k+1 <= (1 + max_waste) E_k``, so a budget there wastes less than ``max_waste``."""
        for _ in range(_MAX_REFINEMENTS):
            env = self._envelope()
            counts = np.searchsorted(sorted_budgets, env, side="left")
            holds = counts[1:] > counts[:-1]
            wide = env[1:] > (1.0 + self.max_waste) * env[:-1]
            split = np.flatnonzero(holds & wide)
            if split.size == 0:
                return
            mid = np.sqrt(self.grid_q[split] * self.grid_q[split + 1])
            order = np.argsort(np.concatenate([self.grid_q, mid]), kind="stable")
            self.grid_q = np.concatenate([self.grid_q, mid])[order]
            self.grid_epsilon = np.concatenate([self.grid_epsilon, self.epsilon(mid)])[order]
        raise RuntimeError(f"grid refinement did not reach max_waste={self.max_waste} in {_MAX_REFINEMENTS} rounds")

    def _exact(self, budgets: np.ndarray) -> np.ndarray:
        self._refine(np.sort(budgets))
        env = self._envelope()
        index = np.searchsorted(env, budgets, side="right") - 1
        feasible = index >= 0
        rates = np.where(feasible, self.grid_q[np.maximum(index, 0)], 0.0)
        spent = np.where(feasible, self.grid_epsilon[np.maximum(index, 0)], 0.0)
        if np.any(spent > budgets):
            raise RuntimeError(f"{int(np.sum(spent > budgets))} sampling probabilities would exceed their budgets")
        return rates

    # scf --------------------------------------------------------------------------------------------------------
    def _fit(self) -> None:
        """Simulation (epsilon on ``SCF_GRID``) and curve fitting (Algorithm 2, lines 3-7)."""
        self.scf_q = SCF_GRID[SCF_GRID >= self.q_min]
        self.scf_epsilon = self.epsilon(self.scf_q)
        params, _ = optimize.curve_fit(_scf_model, self.scf_q, self.scf_epsilon, p0=(1.0, 1.0, 1.0), maxfev=5000)
        residual = self.scf_epsilon - _scf_model(self.scf_q, *params)
        total = self.scf_epsilon - self.scf_epsilon.mean()
        self.fit_params = tuple(float(p) for p in params)
        self.r_squared = float(1.0 - residual @ residual / (total @ total))

    def _scf(self, budgets: np.ndarray) -> np.ndarray:
        """Inverse of the fit, clipped to [0, 1]; 1 at or above epsilon(1) (Algorithm 2, line 8)."""
        a, b, c = self.fit_params
        with np.errstate(invalid="ignore", divide="ignore"):
            inverse = (np.log(budgets - c) - b) / a
        rates = np.clip(np.nan_to_num(inverse, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
        rates = np.where(budgets >= self.epsilon_max, 1.0, rates)
        return np.where(budgets < self.epsilon_floor, 0.0, rates)

    def overspend(self, budgets: object, rates: object) -> np.ndarray:
        """``epsilon(rate) / budget`` per record: > 1 where a rate overspends its budget (use it to audit scf)."""
        return self.epsilon(rates) / _budgets(budgets)

    # bisect -----------------------------------------------------------------------------------------------------
    def _bisect(self, budget: float) -> float:
        """Largest rate found by bisection (geometric midpoints) with epsilon <= budget and, where q < 1,
        epsilon >= (1 - max_waste) * budget."""
        if budget >= self.epsilon_max:
            return 1.0
        if budget < self.epsilon_floor:
            return 0.0
        low, high = self.q_min, 1.0
        for _ in range(200):
            mid = math.sqrt(low * high)
            spent = float(self.epsilon(mid))
            if spent <= budget:
                low = mid
                if spent >= (1.0 - self.max_waste) * budget:
                    return mid
            else:
                high = mid
        return low
