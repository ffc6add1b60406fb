"""Server optimisers applied to the aggregate (FedOpt: Reddi et al., "Adaptive Federated Optimization", ICLR 2021,
Algorithm 2; FedAvgM: Hsu et al. 2019).

The mechanism's server turns a round's contributions into its aggregate, the next global state it would apply;
the pseudo-gradient of hypothesis j is ``Delta = aggregate_j - x_j`` and the optimiser replaces ``x_j`` by

* ``sgd``: ``x + lr Delta`` (lr 1 gives the aggregate itself, i.e. FedAvg);
* ``momentum`` (FedAvgM): ``m = beta1 m + Delta``, ``x + lr m``;
* ``adagrad`` / ``adam`` / ``yogi``: ``m = beta1 m + (1 - beta1) Delta`` and
  ``v + Delta^2`` (FedAdagrad), ``beta2 v + (1 - beta2) Delta^2`` (FedAdam) or
  ``v - (1 - beta2) Delta^2 sign(v - Delta^2)`` (FedYogi), then ``x + lr m / (sqrt(v) + tau)``; ``m`` starts at 0,
  ``v`` at ``tau^2`` (Algorithm 2: ``v_{-1} >= tau^2``).

Each hypothesis of the global state has its own ``m`` and ``v``. A hypothesis the aggregate leaves exactly as it
was (nobody's update reached it: an empty IFCA cluster, a zero total weight) takes no step and keeps its state,
as a skipped round does. Pure numpy and deterministic: the optimiser only post-processes the aggregates.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

GlobalState = tuple[np.ndarray, ...]


class ServerOptimizer(ABC):
    """Turns (current global state, the mechanism's aggregate) into the next global state, one hypothesis at a time."""

    uses: ClassVar[tuple[str, ...]]  # the settings besides lr that this optimiser reads

    def __init__(self, *, lr: float) -> None:
        self.lr = lr
        self.slots: dict[int, dict[str, np.ndarray]] = {}  # per hypothesis: the optimiser's running vectors

    def step(self, current: GlobalState, aggregate: GlobalState) -> GlobalState:
        """The next global state: hypothesis j moves by the optimiser's rule on ``aggregate[j] - current[j]``."""
        return tuple(
            x if np.array_equal(x, target) else self._step(j, x, target)
            for j, (x, target) in enumerate(zip(current, aggregate, strict=True))
        )

    def _step(self, hypothesis: int, x: np.ndarray, target: np.ndarray) -> np.ndarray:
        direction = self.direction(self.slots.setdefault(hypothesis, {}), target - x)
        return x + self.lr * direction

    @abstractmethod
    def direction(self, slots: dict[str, np.ndarray], delta: np.ndarray) -> np.ndarray:
        """Update ``slots`` (empty at the first step) with the pseudo-gradient ``delta``; return the step direction."""


class Sgd(ServerOptimizer):
    """``x + lr Delta`` (Reddi et al.'s FedAvg with server learning rate)."""

    uses = ()

    def _step(self, hypothesis: int, x: np.ndarray, target: np.ndarray) -> np.ndarray:
        # x + 1 * (target - x) is the target in exact arithmetic; returning it keeps FedAvg bit for bit
        return target if self.lr == 1.0 else super()._step(hypothesis, x, target)

    def direction(self, slots: dict[str, np.ndarray], delta: np.ndarray) -> np.ndarray:
        return delta


class Momentum(ServerOptimizer):
    """FedAvgM (Hsu et al. 2019): ``m = beta1 m + Delta``, ``x + lr m``."""

    uses = ("beta1",)

    def __init__(self, *, lr: float, beta1: float) -> None:
        super().__init__(lr=lr)
        self.beta1 = beta1

    def direction(self, slots: dict[str, np.ndarray], delta: np.ndarray) -> np.ndarray:
        slots["m"] = self.beta1 * slots.get("m", np.zeros_like(delta)) + delta
        return slots["m"]


class Adaptive(ServerOptimizer):
    """FedAdagrad, FedAdam and FedYogi (Reddi et al., Algorithm 2): they differ only in the update of ``v``."""

    uses = ("beta1", "tau")

    def __init__(self, *, lr: float, beta1: float, tau: float) -> None:
        super().__init__(lr=lr)
        self.beta1, self.tau = beta1, tau

    def direction(self, slots: dict[str, np.ndarray], delta: np.ndarray) -> np.ndarray:
        m = slots.get("m", np.zeros_like(delta))
        v = slots.get("v", np.full_like(delta, self.tau**2))
        slots["m"] = self.beta1 * m + (1.0 - self.beta1) * delta
        slots["v"] = self.second_moment(v, delta * delta)
        return slots["m"] / (np.sqrt(slots["v"]) + self.tau)

    @abstractmethod
    def second_moment(self, v: np.ndarray, squared: np.ndarray) -> np.ndarray:
        """The next ``v`` given ``Delta^2``."""


class Adagrad(Adaptive):
    """FedAdagrad: ``v + Delta^2``."""

    def second_moment(self, v: np.ndarray, squared: np.ndarray) -> np.ndarray:
        return v + squared


class ExponentialAdaptive(Adaptive):
    """FedAdam and FedYogi: ``v`` forgets at rate ``beta2``."""

    uses = ("beta1", "beta2", "tau")

    def __init__(self, *, lr: float, beta1: float, beta2: float, tau: float) -> None:
        super().__init__(lr=lr, beta1=beta1, tau=tau)
        self.beta2 = beta2


class Adam(ExponentialAdaptive):
    """FedAdam: ``beta2 v + (1 - beta2) Delta^2``."""

    def second_moment(self, v: np.ndarray, squared: np.ndarray) -> np.ndarray:
        return self.beta2 * v + (1.0 - self.beta2) * squared


class Yogi(ExponentialAdaptive):
    """FedYogi: ``v - (1 - beta2) Delta^2 sign(v - Delta^2)``."""

    def second_moment(self, v: np.ndarray, squared: np.ndarray) -> np.ndarray:
        return v - (1.0 - self.beta2) * squared * np.sign(v - squared)


SERVER_OPTIMIZERS: dict[str, type[ServerOptimizer]] = {
    "sgd": Sgd, "momentum": Momentum, "adagrad": Adagrad, "adam": Adam, "yogi": Yogi,
}
# Defaults: lr 1 keeps FedAvg (sgd) and FedAvgM's usual server step; the adaptive optimisers step about lr per
# coordinate, so they need a smaller one (0.1; the paper tunes lr and tau per task). beta1 = 0.9 and beta2 = 0.99 are the values the paper fixes.
DEFAULT_LR = {"sgd": 1.0, "momentum": 1.0, "adagrad": 0.1, "adam": 0.1, "yogi": 0.1}
DEFAULT_SETTINGS = {"beta1": 0.9, "beta2": 0.99, "tau": 1e-3}
