"""Record-level RDP accounting of the events reported by silos (Mironov 2017; Mironov, Talwar, Zhang 2019).

Each silo's [`PoissonGaussianEvent`][privsilo.mechanisms.events.PoissonGaussianEvent]s are composed by adding their Renyi-DP curves of the Sampled Gaussian
Mechanism ([`privsilo.mechanisms.rdp.poisson_gaussian_rdp`][privsilo.mechanisms.rdp.poisson_gaussian_rdp]: exact at integer orders, checked at fractional ones) and
converted to ``(epsilon, delta)`` by [`privsilo.mechanisms.rdp.epsilon_from_rdp`][privsilo.mechanisms.rdp.epsilon_from_rdp] (Balle et al. 2020, Thm. 21, as
Opacus' ``get_privacy_spent``; a curve no correct evaluation gives is an error), over the same orders as Opacus'
``RDPAccountant`` (the tests check both against Opacus, Google's dp_accounting and a 50-digit evaluation). RDP composes additively and ``k`` steps of one ``(q, sigma)`` cost ``k`` times one
step, so the accountant computes the one-step curve once per distinct ``(q, sigma)`` and keeps a running RDP
curve per silo: recording an event and reading epsilon cost microseconds, not a recomputation of the history
(the history, merged like Opacus' accountant merges it, is kept for inspection).

Across silos: silos hold disjoint records and a record's neighbouring relation (add/remove one record) touches
one silo only, so by parallel composition the federation's record-level epsilon is the **maximum** over silos of
each silo's composed epsilon. A silo that did not take part in a round reports no event and adds nothing: we
account the realised participation and claim **no** amplification from the server's sampling of silos.

``accountant="pld"`` (``mechanism.accountant: pld``) also evaluates each silo's merged history with the privacy
loss distribution of [`privsilo.mechanisms.pld`][privsilo.mechanisms.pld], a tighter upper bound, and reports it as ``epsilon`` beside the RDP
figure (``epsilon_rdp``, ``epsilon_pld`` and their per-silo tables); with ``rdp`` (the default) the report is
RDP's alone, as it always was.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Iterable

import numpy as np
from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.mechanisms.events import PoissonGaussianEvent
from privsilo.mechanisms.pld import pld_epsilon
from privsilo.mechanisms.rdp import DEFAULT_ORDERS, epsilon_from_rdp, poisson_gaussian_rdp


def _validate_event(event: PoissonGaussianEvent) -> None:
    if not isinstance(event, PoissonGaussianEvent):
        raise TypeError(f"RdpAccountant supports PoissonGaussianEvent only, got {type(event).__name__}")
    for name in ("sampling_rate", "noise_multiplier"):
        value = getattr(event, name)
        if isinstance(value, bool) or not isinstance(value, Real):
            raise TypeError(f"{name} must be a real number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
    if isinstance(event.steps, bool) or not isinstance(event.steps, Integral):
        raise TypeError(f"steps must be an integer, got {event.steps!r}")
    if not 0.0 <= event.sampling_rate <= 1.0:
        raise ValueError(f"sampling_rate must lie in [0, 1], got {event.sampling_rate}")
    if event.noise_multiplier < 0.0:
        raise ValueError(f"noise_multiplier must be >= 0, got {event.noise_multiplier}")
    if event.steps < 0:
        raise ValueError(f"steps must be >= 0, got {event.steps}")


def _validate_delta(delta: float) -> None:
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")


def _silo_id(silo_id: object) -> int:
    if isinstance(silo_id, bool) or not isinstance(silo_id, Integral):
        raise TypeError(f"silo_id must be an integer, got {silo_id!r}")
    return int(silo_id)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


class RdpAccountant(PrivacyAccountant):
    """Per-silo RDP composition of Poisson-subsampled Gaussian events; epsilon = max over silos.

    ``delta`` is the target of [`report`][privsilo.mechanisms.accounting.RdpAccountant.report]; [`epsilon`][privsilo.mechanisms.accounting.RdpAccountant.epsilon] and friends take any delta (and are RDP's). Silos
    made known by [`enrol`][privsilo.mechanisms.accounting.RdpAccountant.enrol] (the federation's silos, at start-up) are reported with epsilon 0 until they record
    an event. ``accountant="pld"`` adds the PLD figures to the report (see the module docstring).
    """

    def __init__(self, *, delta: float, orders: tuple[float, ...] = DEFAULT_ORDERS, accountant: str = "rdp") -> None:
        _validate_delta(delta)
        if accountant not in ("rdp", "pld"):
            raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
        self.delta = delta
        self.accountant = accountant
        self.orders = np.asarray(orders, dtype=np.float64)
        self._history: dict[int, list[tuple[float, float, int]]] = {}
        self._rdp: dict[int, np.ndarray] = {}
        self._one_step: dict[tuple[float, float], np.ndarray] = {}

    def enrol(self, silo_ids: Iterable[int]) -> None:
        """Make the federation's silos known, so a silo never sampled is reported (it spent 0)."""
        for silo in [_silo_id(silo) for silo in silo_ids]:  # all checked before any is added
            self._history.setdefault(silo, [])

    def _one_step_rdp(self, rate: float, sigma: float) -> np.ndarray:
        """RDP of one step at every order, computed once per ``(q, sigma)``; inf everywhere for sigma = 0."""
        key = (rate, sigma)
        if key not in self._one_step:
            if sigma == 0.0:
                self._one_step[key] = np.full(self.orders.size, np.inf)
            else:
                self._one_step[key] = poisson_gaussian_rdp(np.array([rate]), sigma, self.orders)[:, 0]
        return self._one_step[key]

    def record(self, silo_id: int, event: PoissonGaussianEvent) -> None:
        """Add ``event`` to ``silo_id``'s composition. Validates before changing any state.

        Events that cannot release anything (``steps == 0`` or ``sampling_rate == 0``) are validated and ignored.
        """
        silo = _silo_id(silo_id)
        _validate_event(event)
        if event.steps == 0 or event.sampling_rate == 0.0:
            return
        rate, sigma, steps = float(event.sampling_rate), float(event.noise_multiplier), int(event.steps)
        added = steps * self._one_step_rdp(rate, sigma)
        self._rdp[silo] = self._rdp[silo] + added if silo in self._rdp else added
        history = self._history.setdefault(silo, [])
        if history and history[-1][:2] == (rate, sigma):
            history[-1] = (rate, sigma, history[-1][2] + steps)
        else:
            history.append((rate, sigma, steps))

    def history(self, silo_id: int) -> tuple[tuple[float, float, int], ...]:
        """Merged ``(sampling_rate, noise_multiplier, steps)`` entries recorded for ``silo_id``."""
        return tuple(self._history.get(silo_id, ()))

    def _silo_epsilon_and_order(self, silo_id: int, delta: float) -> tuple[float, float]:
        rdp = self._rdp.get(silo_id)
        if rdp is None:  # enrolled, never took part: its records were never used
            return 0.0, math.nan
        return epsilon_from_rdp(self.orders, rdp, delta)

    def epsilon_per_silo(self, delta: float) -> dict[int, float]:
        """Composed epsilon of every enrolled silo and every silo that recorded an event, at ``delta``."""
        _validate_delta(delta)
        return {silo: self._silo_epsilon_and_order(silo, delta)[0] for silo in sorted(self._history)}

    def epsilon(self, delta: float) -> float:
        """Record-level epsilon of the federation at ``delta``: max over silos (0.0 if nothing recorded)."""
        return max(self.epsilon_per_silo(delta).values(), default=0.0)

    def best_order(self, delta: float) -> float:
        """RDP order attaining [`epsilon`][privsilo.mechanisms.accounting.RdpAccountant.epsilon] (for the silo with the largest epsilon); nan if none applies."""
        return self._worst(delta)[1]

    def _worst(self, delta: float) -> tuple[dict[int, float], float]:
        """Epsilon per silo and the best order of the silo with the largest epsilon (nan if none applies)."""
        per_silo = self.epsilon_per_silo(delta)
        if not per_silo:
            return per_silo, math.nan
        worst = max(per_silo, key=per_silo.__getitem__)
        return per_silo, self._silo_epsilon_and_order(worst, delta)[1]

    def pld_epsilon_per_silo(self, delta: float) -> dict[int, float]:
        """Each silo's epsilon at ``delta`` from the PLD of its merged history ([`privsilo.mechanisms.pld.pld_epsilon`][privsilo.mechanisms.pld.pld_epsilon])."""
        _validate_delta(delta)
        return {silo: pld_epsilon(tuple(history), delta) for silo, history in sorted(self._history.items())}

    def report(self) -> dict[str, Any]:
        """JSON-ready summary at the target delta; epsilon is None when it is infinite (sigma = 0). With the PLD
        accountant ``epsilon`` and ``epsilon_per_silo`` are PLD's, beside ``*_rdp`` and ``*_pld``; ``best_order``
        stays the RDP order."""
        per_silo, best_order = self._worst(self.delta)
        epsilon_rdp, per_silo_rdp = _epsilon_and_table(per_silo)
        report = {
            "guarantee": "record-level (epsilon, delta)-DP, RDP of Poisson-subsampled Gaussian, max over silos",
            "epsilon": epsilon_rdp,
            "delta": self.delta,
            "best_order": None if math.isnan(best_order) else best_order,
            "epsilon_per_silo": per_silo_rdp,
        }
        if self.accountant == "pld":
            epsilon_pld, per_silo_pld = _epsilon_and_table(self.pld_epsilon_per_silo(self.delta))
            report.update(
                guarantee="record-level (epsilon, delta)-DP, PLD (RDP beside it) of Poisson-subsampled Gaussian, max over silos",
                accountant="pld",
                epsilon=epsilon_pld,
                epsilon_rdp=epsilon_rdp,
                epsilon_pld=epsilon_pld,
                epsilon_per_silo=per_silo_pld,
                epsilon_per_silo_rdp=per_silo_rdp,
                epsilon_per_silo_pld=per_silo_pld,
            )
        return report


def schedule_epsilon(schedule: Iterable[tuple[float, float, int]], delta: float, accountant: str) -> float:
    """Epsilon of one unit's ``(sampling rate, noise multiplier, steps)`` entries composed one after another, by
    RDP (the curves add over entries, then [`epsilon_from_rdp`][privsilo.mechanisms.rdp.epsilon_from_rdp]) or by their PLD
    ([`privsilo.mechanisms.pld.pld_epsilon`][privsilo.mechanisms.pld.pld_epsilon]); inf where an entry with steps has sigma 0."""
    schedule = tuple((float(q), float(sigma), int(steps)) for q, sigma, steps in schedule)
    if accountant == "pld":
        return pld_epsilon(schedule, delta)
    if accountant != "rdp":
        raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
    schedule = tuple((q, sigma, steps) for q, sigma, steps in schedule if steps > 0 and q > 0)
    if not schedule:
        return 0.0
    if any(sigma == 0.0 for _, sigma, _ in schedule):
        return math.inf
    orders = np.asarray(DEFAULT_ORDERS, dtype=np.float64)
    rdp = sum(steps * poisson_gaussian_rdp(np.array([q]), sigma, orders)[:, 0] for q, sigma, steps in schedule)
    return epsilon_from_rdp(orders, rdp, delta)[0]


def _epsilon_and_table(per_silo: dict[int, float]) -> tuple[float | None, dict[str, float | None]]:
    """(max over silos, ``{silo: epsilon}`` with string keys), None for inf: the report's form of ``per_silo``."""
    return (
        _finite_or_none(max(per_silo.values(), default=0.0)),
        {str(silo): _finite_or_none(eps) for silo, eps in per_silo.items()},
    )
