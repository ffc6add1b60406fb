"""User-level privacy accounting of ULDP-FL (Kato et al., "ULDP-FL: Federated Learning with Across-Silo
User-Level Differential Privacy", VLDB 2024).

* ``naive``, ``avg``, ``avg_w``, ``sgd`` (Theorems 1 and 3, Remark 1): every round is one Gaussian mechanism with
  user-level sensitivity ``C`` and noise ``sigma * C`` summed over silos; with user-level sub-sampling it is the
  Poisson-subsampled Gaussian at rate ``user_rate``. RDP from [`privsilo.mechanisms.rdp.poisson_gaussian_rdp`][privsilo.mechanisms.rdp.poisson_gaussian_rdp],
  composed over rounds.
* ``group`` (Theorem 2): record-level DP-SGD in every silo; the federation's record-level RDP is the maximum
  over silos (a record lives in one silo), then Mironov's group privacy for RDP (Mironov 2017, Prop. 2): a
  ``(alpha, rho)``-RDP mechanism is ``(alpha / 2^c, 3^c rho)``-RDP for groups of ``2^c`` records when
  ``alpha >= 2^(c+1)``. A group of ``k`` records is covered by the next power of two **up** (``2^c >= k``).
  The record-level orders ``alpha`` are **integers** (Opacus' orders ``>= 2`` times ``2^c``, rounded up), where the
  RDP is an exact finite sum: at fractional orders of this size (up to about 4,000 for k = 64) the series Opacus
  uses cancels catastrophically and once gave negative epsilons. User-level orders are ``beta = alpha / 2^c >= 2``.
  ``group_rounding="paper"`` reproduces the paper's code instead (the largest power of two *below* ``k``, and its
  order grid, which includes base orders below ``2^(c+1)``): kept for comparison only, **not a guarantee**.
* RDP to ``(epsilon, delta)``: Lemma 2 (Balle et al. 2020, Thm. 21, as Opacus' ``get_privacy_spent``):
  ``rho + log((a-1)/a) - (log(delta) + log(a)) / (a-1)``, minimised over the orders, by
  [`privsilo.mechanisms.rdp.epsilon_from_rdp`][privsilo.mechanisms.rdp.epsilon_from_rdp], which refuses a curve with a NaN, a negative or a decreasing value.
* ``accountant="pld"`` (not for ``group``, whose group privacy is a statement about RDP curves): the user-level
  rounds are also evaluated with the privacy loss distribution of the Poisson-subsampled Gaussian
  ([`privsilo.mechanisms.pld`][privsilo.mechanisms.pld]), a tighter upper bound reported as ``epsilon`` beside the RDP figure.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Iterable, Sequence

import numpy as np
from privsilo.mechanisms.accounting import schedule_epsilon
from privsilo.mechanisms.base import PrivacyAccountant
from privsilo.mechanisms.events import GroupDpSgdEvent, UserLevelGaussianEvent
from privsilo.mechanisms.rdp import DEFAULT_ORDERS, check_rdp_curve, epsilon_from_rdp, poisson_gaussian_rdp
from privsilo.mechanisms.uldp.variants import GroupRounding, Variant, naive_noise_multiplier


Schedule = Sequence[tuple[float, float, int]]  # (record sampling rate, noise multiplier, steps)


def group_exponent(group_k: int, rounding: GroupRounding | str = GroupRounding.UP) -> int:
    """``c`` such that the groups of ``group_k`` records are accounted as groups of ``2^c``."""
    _check_int("group_k", group_k, minimum=1)
    if GroupRounding(rounding) is GroupRounding.UP:
        return (int(group_k) - 1).bit_length()
    return int(group_k).bit_length() - 1


def group_orders(c: int, rounding: GroupRounding | str = GroupRounding.UP) -> tuple[np.ndarray, np.ndarray]:
    """(user-level orders beta, record-level orders alpha = beta * 2^c) for groups of 2^c records.

    ``up``: the record-level orders are integers (see the module notes); ``c = 0`` is plain record-level DP on
    Opacus' orders. ``paper``: the paper's grid (``noise_utils.get_group_privacy_spent``), rounded up to integers
    for the same reason.
    """
    size = 2**c
    if GroupRounding(rounding) is GroupRounding.PAPER:
        alphas = np.array([2 * size + x / 10 for x in range(100)] + list(np.linspace(size + 10, size * 64, 20)))
    else:
        orders = np.asarray(DEFAULT_ORDERS, dtype=np.float64)
        if c == 0:
            return orders, orders
        alphas = orders[orders >= 2.0] * size
    alphas = np.unique(np.ceil(alphas))
    return alphas / size, alphas


def group_rdp(
    schedules: Iterable[Schedule], *, group_k: int, rounding: GroupRounding | str = GroupRounding.UP
) -> tuple[np.ndarray, np.ndarray]:
    """(user-level orders beta, user-level RDP at them) of ULDP-GROUP-k (Thm. 2): per-silo record-level RDP of its
    DP-SGD ``schedules`` at the record-level orders, max over silos, times ``3^c`` (Mironov 2017, Prop. 2)."""
    c = group_exponent(group_k, rounding)
    betas, alphas = group_orders(c, rounding)
    curves = []
    for schedule in schedules:
        curve = np.zeros_like(alphas)
        for rate, sigma, steps in schedule:
            _check_rate("sampling_rate", rate, allow_zero=True)
            _check_real("noise_multiplier", sigma, low=0.0)
            _check_int("local_steps", steps, minimum=0)
            if steps == 0 or rate == 0.0:
                continue
            if sigma == 0.0:
                return betas, np.full(betas.shape, np.inf)
            curve = curve + int(steps) * poisson_gaussian_rdp(np.array([float(rate)]), float(sigma), alphas)[:, 0]
        check_rdp_curve(alphas, curve)  # each silo's own curve: a maximum over silos could hide a broken one
        curves.append(curve)
    return betas, 3.0**c * np.max(curves, axis=0) if curves else np.zeros_like(betas)


def _to_dp(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    """Lemma 2 (Balle et al. 2020, Thm. 21); inf when no order gives a finite bound; refuses an impossible curve."""
    return epsilon_from_rdp(orders, rdp, delta)[0]


def user_level_epsilon(
    *, noise_multiplier: float, rounds: int, delta: float, user_rate: float = 1.0, accountant: str = "rdp"
) -> float:
    """Epsilon of ``rounds`` user-level Gaussian rounds (Thm. 1/3), Poisson user sampling at ``user_rate``, by
    the ``accountant`` named (``rdp`` or ``pld``)."""
    _check_real("noise_multiplier", noise_multiplier, low=0.0)
    _check_int("rounds", rounds, minimum=0)
    _check_delta(delta)
    _check_rate("user_rate", user_rate)
    return schedule_epsilon(((float(user_rate), float(noise_multiplier), int(rounds)),), delta, accountant)


def group_epsilon(
    schedules: Iterable[Schedule], *, group_k: int, delta: float, rounding: GroupRounding | str = GroupRounding.UP
) -> float:
    """User-level epsilon of ULDP-GROUP-k (Thm. 2): per-silo record-level RDP of its DP-SGD ``schedules``, max
    over silos, then group privacy for ``group_k`` records (rounded as ``rounding`` says)."""
    _check_delta(delta)
    betas, rdp = group_rdp(schedules, group_k=group_k, rounding=rounding)
    if not np.any(rdp):
        return 0.0
    return _to_dp(betas, rdp, delta)


def epsilon(
    *,
    variant: Variant | str,
    noise_multiplier: float,
    rounds: int,
    delta: float,
    user_rate: float = 1.0,
    group_k: int | None = None,
    sampling_rate: float | None = None,
    local_steps: int | None = None,
    group_rounding: GroupRounding | str = "up",
    naive_noise: str = "safe",
    accountant: str = "rdp",
) -> float:
    """User-level epsilon of a ULDP-FL run after ``rounds`` rounds, without running anything (``accountant``:
    ``rdp``, or ``pld`` for every variant but ``group``).

    ``naive`` with ``naive_noise="paper"`` (the paper's sigma * C * sqrt|S| per silo against a per-silo
    sensitivity of 2C) is accounted at sigma / 2 (see ``privsilo.mechanisms.uldp.variants.naive_noise_multiplier``).

    ``group`` also needs ``group_k`` (records per user), ``sampling_rate`` (the record-level Poisson rate of
    DP-SGD; give the largest rate of any silo) and ``local_steps`` (DP-SGD steps per round); it has no user
    sub-sampling (``user_rate`` must be 1).
    """
    variant = Variant(variant)
    if variant is Variant.NAIVE:
        noise_multiplier = naive_noise_multiplier(noise_multiplier, naive_noise)
    if variant is not Variant.GROUP:
        return user_level_epsilon(
            noise_multiplier=noise_multiplier, rounds=rounds, delta=delta, user_rate=user_rate, accountant=accountant
        )
    if accountant != "rdp":
        raise ValueError(f"variant 'group' is accounted by RDP only (group privacy, Mironov 2017, Prop. 2), got {accountant!r}")
    if group_k is None or sampling_rate is None or local_steps is None:
        raise ValueError("variant 'group' needs group_k, sampling_rate and local_steps")
    if user_rate != 1.0:
        raise ValueError(f"variant 'group' has no user-level sub-sampling; user_rate must be 1, got {user_rate}")
    _check_int("rounds", rounds, minimum=0)
    _check_int("local_steps", local_steps, minimum=0)
    schedule = [(sampling_rate, noise_multiplier, rounds * local_steps)]
    return group_epsilon([schedule], group_k=group_k, delta=delta, rounding=group_rounding)


class UldpAccountant(PrivacyAccountant):
    """User-level accountant of a ULDP-FL run, fed with the silos' round events.

    [`UserLevelGaussianEvent`][privsilo.mechanisms.events.UserLevelGaussianEvent]: every silo reports the same event for a round; the round is composed once
    (a disagreement between silos is an error). [`GroupDpSgdEvent`][privsilo.mechanisms.events.GroupDpSgdEvent]: composed per silo, then
    [`group_epsilon`][privsilo.mechanisms.uldp.accountant.group_epsilon]. ``accountant="pld"`` (not with ``group``) reports the user-level rounds' PLD epsilon as
    ``epsilon`` beside RDP's (``epsilon_rdp``, ``epsilon_pld``).
    """

    def __init__(
        self,
        *,
        variant: Variant | str,
        delta: float,
        group_rounding: GroupRounding | str = "up",
        group_k_public: bool = True,
        accountant: str = "rdp",
    ) -> None:
        _check_delta(delta)
        if accountant not in ("rdp", "pld") or (accountant == "pld" and Variant(variant) is Variant.GROUP):
            raise ValueError(f"accountant must be 'rdp', or 'pld' with a variant other than group; got {accountant!r}")
        self.accountant = accountant
        self.group_k_public = group_k_public
        self.variant = Variant(variant)
        self.delta = delta
        self.group_rounding = GroupRounding(group_rounding)
        self._rounds: dict[int, UserLevelGaussianEvent] = {}
        # rounds per (user rate, sigma), counted as they arrive, so a report composes settings, not every round
        self._rounds_per_setting: dict[tuple[float, float], int] = {}
        self._silo_schedules: dict[int, list[tuple[float, float, int]]] = {}
        self._group_k: int | None = None

    def record(self, silo_id: int, event: Any) -> None:
        if self.variant is Variant.GROUP:
            self._record_group(silo_id, event)
        else:
            self._record_user_level(event)

    def _record_user_level(self, event: Any) -> None:
        if not isinstance(event, UserLevelGaussianEvent):
            raise TypeError(f"ULDP variant {self.variant.value} accounts UserLevelGaussianEvent, got {type(event).__name__}")
        _check_rate("user_rate", event.user_rate)
        _check_real("noise_multiplier", event.noise_multiplier, low=0.0)
        known = self._rounds.get(event.round_index)
        if known is not None:
            if known != event:
                raise ValueError(f"silos disagree about round {event.round_index}: {known} vs {event}")
            return  # every silo reports the round; it is counted once
        self._rounds[event.round_index] = event
        setting = (float(event.user_rate), float(event.noise_multiplier))
        self._rounds_per_setting[setting] = self._rounds_per_setting.get(setting, 0) + 1

    def _record_group(self, silo_id: int, event: Any) -> None:
        if not isinstance(event, GroupDpSgdEvent):
            raise TypeError(f"ULDP variant group accounts GroupDpSgdEvent, got {type(event).__name__}")
        if self._group_k is not None and event.group_k != self._group_k:
            raise ValueError(f"silos disagree about group_k: {self._group_k} vs {event.group_k}")
        group_exponent(event.group_k, self.group_rounding)  # validates
        self._group_k = event.group_k
        schedule = self._silo_schedules.setdefault(int(silo_id), [])
        setting = (float(event.sampling_rate), float(event.noise_multiplier))
        if schedule and schedule[-1][:2] == setting:  # merged as Opacus' history: one RDP evaluation per setting
            schedule[-1] = (*setting, schedule[-1][2] + int(event.steps))
        else:
            schedule.append((*setting, int(event.steps)))

    def epsilon(self) -> float:
        if self.variant is Variant.GROUP:
            if self._group_k is None:
                return 0.0
            return group_epsilon(self._silo_schedules.values(), group_k=self._group_k, delta=self.delta, rounding=self.group_rounding)
        return self._composed(knows_sample=False, accountant=self.accountant)

    def _composed(self, *, knows_sample: bool, accountant: str) -> float:
        """The user-level rounds composed at their user rates (a third party's view) or, for a view that knows
        the sample, at rate 1, by ``accountant``."""
        by_setting: dict[tuple[float, float], int] = {}
        for (rate, sigma), rounds in self._rounds_per_setting.items():
            key = (1.0 if knows_sample else rate, sigma)
            by_setting[key] = by_setting.get(key, 0) + rounds
        schedule = tuple((q, sigma, rounds) for (q, sigma), rounds in by_setting.items())
        return schedule_epsilon(schedule, self.delta, accountant)

    def _both(self, *, knows_sample: bool) -> dict[str, float | None]:
        """``{"rdp": epsilon, "pld": epsilon}`` of the user-level rounds (None for inf), for the PLD report."""
        return {name: _finite_or_none(self._composed(knows_sample=knows_sample, accountant=name)) for name in ("rdp", "pld")}

    def report(self) -> dict[str, Any]:
        value = self.epsilon()
        report: dict[str, Any] = {
            "guarantee": "user-level (epsilon, delta)-DP across silos (ULDP-FL)",
            "variant": self.variant.value,
            "epsilon": value if math.isfinite(value) else None,
            "delta": self.delta,
        }
        if self.variant is Variant.GROUP:
            c = None if self._group_k is None else group_exponent(self._group_k, self.group_rounding)
            report.update(
                group_k=self._group_k,
                group_size_accounted=None if c is None else 2**c,
                group_rounding=self.group_rounding.value,
                record_sampling_rate_max=max((rate for s in self._silo_schedules.values() for rate, _, _ in s), default=None),
            )
            if self.group_rounding is GroupRounding.PAPER:
                report["warning"] = "group_rounding 'paper' reproduces the paper's code and is not a guarantee"
            if not self.group_k_public:
                # k = max/median of records per user depends on every user: adding one user can change k and every
                # quota, and 'max' never truncates, so no group size covers all neighbours.
                report.update(
                    guarantee="not covered: group_k taken from the data (max/median records per user)",
                    epsilon=None,
                    paper_epsilon=report["epsilon"],
                )
        else:
            # The per-round sample sizes are not reported: the amplified epsilon assumes a third party does not
            # learn the sample, and publishing its sizes would condition it. The server and silos know them.
            report.update(rounds_accounted=len(self._rounds))
            sampled = any(event.user_rate < 1.0 for event in self._rounds.values())
            if sampled:
                report["guarantee"] += (
                    "; amplified by user sub-sampling, so against a third party who does not learn which users were "
                    "sampled (the server draws the sample and the silos receive it: their view is epsilon_without_sampling)"
                )
                without = self._composed(knows_sample=True, accountant=self.accountant)
                report["epsilon_without_sampling"] = _finite_or_none(without)
            if self.accountant == "pld":
                report.update(_pld_keys(self._both(knows_sample=False), "epsilon"))
                if sampled:
                    report.update(_pld_keys(self._both(knows_sample=True), "epsilon_without_sampling"))
        return report


def _pld_keys(both: dict[str, float | None], key: str) -> dict[str, Any]:
    """The PLD report's keys for one figure: ``accountant``, then ``KEY_rdp`` and ``KEY_pld`` side by side."""
    return {"accountant": "pld", f"{key}_rdp": both["rdp"], f"{key}_pld": both["pld"]}


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _check_delta(delta: float) -> None:
    _check_real("delta", delta, low=0.0)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")


def _check_rate(name: str, value: float, *, allow_zero: bool = False) -> None:
    _check_real(name, value, low=0.0)
    if value > 1.0 or (value == 0.0 and not allow_zero):
        raise ValueError(f"{name} must lie in {'[0' if allow_zero else '(0'}, 1], got {value}")


def _check_real(name: str, value: float, *, low: float) -> None:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def _check_int(name: str, value: int, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
