"""``rpdp``: record-level personalised DP-SGD in every silo, FedAvg at the server (rPDP-FL, Liu et al., CCS 2024).

Neighbouring relation: add/remove one record ``d_ij``; record ``j`` of silo ``i`` has its own budget
``eps_ij``. Two-stage sampling (Algorithm 1): the server samples silos with rate lambda (``client_rate``), and
each local step of a sampled silo includes record ``j`` with its own probability ``q_ij``, clips per-record
gradients to ``C`` and adds ``N(0, sigma^2 C^2)``. The paper divides the noisy sum by the expected batch size
``sum_j q_ij``; that divisor changes when a record is added or removed and is not covered by the accounting, so
by default (``normalization: public``) we divide by the public ``federation.batch_size`` instead;
``normalization: expected_batch`` reproduces the paper. Silos are averaged with equal weights.
``q_ij`` comes from :class:`~privsilo.mechanisms.rpdp.estimator.SamplingProbabilityEstimator` (default ``exact``: the
largest rate whose Theorem 1 epsilon stays within the budget). A per-record budget accountant
(:mod:`privsilo.mechanisms.rpdp.budget_accountant`) enforces the realised cost round by round.

Variants (Sec. 7.2 baselines, same budgets): ``rpdp``; ``minimum`` (one rate for all, set by the silo's
smallest budget); ``dropout`` (one rate set by the silo's mean budget; records below the mean never take part);
``privacy_free`` (plain FedAvg, no protection). Budgets are drawn per silo from the silo's generator, or read
from a column of the user's CSV (row ``r`` = training record ``r`` of the dataset).
"""
from __future__ import annotations

import operator
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np
from pydantic import Field, field_validator

from privsilo.mechanisms.base import (
    WEIGHTED_DELTA,
    GlobalState,
    Mechanism,
    MechanismParams,
    NoGuarantee,
    PrivacyAccountant,
    PrivacyBudgetError,
    ServerMechanism,
    SiloContext,
    SiloContribution,
    SiloMechanism,
    load_vector_into_model,
    model_to_vector,
    numpy_generator,
)
from privsilo.mechanisms.dp_sgd import SILO_WEIGHT, noisy_local_training
from privsilo.mechanisms.events import PersonalizedPoissonGaussianEvent, PersonalizedTrainingPlan, TrainingSchedule
from privsilo.mechanisms.fedavg import FedAvgServer, weighted_delta_vector
from privsilo.mechanisms.none import FedAvgSilo
from privsilo.mechanisms.rpdp.budget_accountant import RecordBudgetAccountant
from privsilo.mechanisms.rpdp.budgets import budgets_from_column, make_distribution
from privsilo.mechanisms.rpdp.estimator import SamplingProbabilityEstimator
from privsilo.mechanisms.rpdp.personalized_accountant import PersonalizedAccountant


Variant = Literal["rpdp", "minimum", "dropout", "privacy_free"]


class RpdpParams(MechanismParams):
    """YAML parameters of ``rpdp``."""

    variant: Variant = "rpdp"
    """`rpdp`, or a baseline of the paper's Sec. 7.2 with the same budgets: `minimum` (one rate, set by the silo's smallest budget), `dropout` (one rate set by the silo's mean budget; records below the mean never train), `privacy_free` (FedAvg)."""
    noise_multiplier: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    """Noise multiplier sigma."""
    max_grad_norm: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    """Per-record clipping norm C."""
    delta: float = Field(default=1e-3, gt=0.0, lt=1.0)
    """Delta of the reported (epsilon, delta)."""
    budgets: dict[str, Any] = Field(default_factory=lambda: {"distribution": "three_levels"})
    """Per-record budgets: `{distribution: three_levels}` (`levels` [0.1, 1.0, 5.0], `ratios` [0.7, 0.2, 0.1]), `bounded_pareto` (`shape` 1.0, `eps_min` 0.1, `eps_max` 10), `bounded_mix_gauss` (`means` [0.1, 1, 5], `stds` [0.01, 0.05, 0.5], `weights` [0.7, 0.2, 0.1], truncated to [`eps_min`, `eps_max`] = [0.1, 10]), or `column` (`path` to a CSV with a header, `column` name; row r = record r of the training set as `load_dataset(name, seed=seed)` orders it)."""
    estimator: Literal["exact", "scf", "bisect"] = "exact"
    """How budgets become sampling rates: `exact` (never exceeds a budget), `scf` (the paper's curve fit; can overspend, kept to reproduce the paper), `bisect` (per-record binary search; slow baseline)."""
    adversary: Literal["third_party", "server"] = "third_party"
    """Whose view the rates are planned for: `third_party` (Lemma 6, T rounds) or `server` (the paper's expectation lambda T rho_tau)."""
    conversion: Literal["opacus", "seed"] = "opacus"
    """RDP-to-DP conversion: `opacus` (Balle et al. 2020, tighter) or `seed` (rho + log(1/delta)/(a-1), the paper's)."""
    infeasible: Literal["exclude", "refuse"] = "exclude"
    """Budgets below epsilon(q_min): `exclude` the records (counted in the report) or `refuse` to start (exit 2)."""
    normalization: Literal["public", "expected_batch"] = "public"
    """Divisor of the noisy gradient sum: `public` (`federation.batch_size`, data-independent) or `expected_batch` (sum_j q_ij, the paper's)."""

    def clips_record_gradients(self) -> bool:
        return True

    def audit_refusal(self, *, client_rate: float) -> tuple[str, Any, str] | None:
        """rPDP's audit is per privacy level: the canaries need budgets of a few discrete levels and rPDP's own rates."""
        if self.variant != "rpdp":
            return ("mechanism.variant", self.variant, "audits of rpdp run its own variant 'rpdp' (the baselines' rates are not per budget)")
        if self.budgets.get("distribution") != "three_levels":
            return ("mechanism.budgets", self.budgets.get("distribution"),
                    "an rpdp audit bounds each privacy level apart: use distribution three_levels")
        return None

    @field_validator("budgets")
    @classmethod
    def _check_budgets(cls, value: dict[str, Any]) -> dict[str, Any]:
        spec = dict(value)
        name = spec.pop("distribution", None)
        if name == "column":
            path = spec.get("path")
            if not isinstance(path, str) or not Path(path).expanduser().is_file():
                raise ValueError("path: must be an existing CSV file (a header row, then one budget per training record)")
            if not isinstance(spec.get("column"), str) or set(spec) != {"path", "column"}:
                raise ValueError("budgets of distribution 'column' take exactly the keys path and column")
            _read_budget_column(path, spec["column"])
            return value
        try:
            make_distribution(str(name), **spec)
        except TypeError as exc:  # an unknown parameter of the distribution
            raise ValueError(str(exc)) from None
        return value

    def record_budgets(self, record_ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        spec = dict(self.budgets)
        name = spec.pop("distribution")
        if name == "column":
            column = _read_budget_column(spec["path"], spec["column"])
            if record_ids.size and record_ids.max() >= column.size:
                raise PrivacyBudgetError(
                    f"mechanism.budgets: {spec['path']} has {column.size} budgets but the training set has at least "
                    f"{int(record_ids.max()) + 1} records (one row per training record)"
                )
            return column[record_ids]
        return make_distribution(name, **spec).sample(len(record_ids), rng=rng)


def _read_budget_column(path: str, column: str) -> np.ndarray:
    """Budgets from a CSV column (header row; row r = training record r), validated: finite and > 0."""
    table = np.genfromtxt(Path(path).expanduser(), delimiter=",", names=True)
    if table.dtype.names is None or column not in table.dtype.names:
        raise ValueError(f"column: not a column of {path} (its columns: {', '.join(table.dtype.names or ())})")
    return budgets_from_column(np.atleast_1d(table[column]))


def _planned_rates(variant: Variant, budgets: np.ndarray, estimator: SamplingProbabilityEstimator) -> np.ndarray:
    """Per-record sampling rates before training (Sec. 7.2 for the baselines)."""
    if variant == "rpdp":
        return estimator.sampling_probability(budgets)
    if variant == "minimum":
        return np.full(budgets.shape, float(estimator.sampling_probability(budgets.min())))
    mean = budgets.mean()
    return np.where(budgets >= mean, float(estimator.sampling_probability(mean)), 0.0)


class RpdpSilo(SiloMechanism):
    """Local DP-SGD with per-record Poisson rates and per-record budget enforcement."""

    def __init__(self, context: SiloContext, params: RpdpParams) -> None:
        self.context, self.params = context, params
        training = context.training
        self.budgets = params.record_budgets(context.record_ids, numpy_generator(context.generator, words=1))
        schedule = TrainingSchedule(
            noise_multiplier=params.noise_multiplier,
            rounds=training.rounds,
            local_steps=training.local_steps,
            client_rate=training.client_rate,
        )
        settings = dict(schedule.as_settings(), delta=params.delta, conversion=params.conversion)
        try:
            estimator = SamplingProbabilityEstimator(**settings, adversary=params.adversary, method=params.estimator)
        except RuntimeError as exc:  # the SCF curve fit does not converge for some (T, tau)
            raise PrivacyBudgetError(f"mechanism.estimator: {params.estimator!r} failed here ({exc}); use 'exact'") from None
        self.planned_rates = _planned_rates(params.variant, self.budgets, estimator)
        self._refuse_if_unsafe(estimator)
        self.accountant = RecordBudgetAccountant(budgets=self.budgets, rates=self.planned_rates, settings=settings)
        # an audit's canary records get budgets as records do, and the same planned rates and budget enforcement
        canaries = context.canaries
        self.canary_accountant = None if canaries is None else RecordBudgetAccountant(
            budgets=canaries.budgets, rates=_planned_rates(params.variant, canaries.budgets, estimator), settings=settings)
        self.plan = PersonalizedTrainingPlan(budgets=self.budgets, planned_rates=self.planned_rates, schedule=schedule)

    def _refuse_if_unsafe(self, estimator: SamplingProbabilityEstimator) -> None:
        """Check every record before training starts (rPDP ``exact``/``bisect`` must never exceed a budget)."""
        silo = self.context.silo_id
        infeasible = self.budgets < estimator.epsilon_floor
        if infeasible.any() and self.params.infeasible == "refuse":
            shown = ", ".join(f"{b:.4g}" for b in np.unique(self.budgets[infeasible])[:5])
            raise PrivacyBudgetError(
                f"mechanism.infeasible: silo {silo} has {int(infeasible.sum())} records whose budgets ({shown}) lie below "
                f"epsilon(q_min) = {estimator.epsilon_floor:.4g}; set infeasible: exclude to train without them"
            )
        over = estimator.epsilon(self.planned_rates) > self.budgets
        if over.any() and self.params.estimator != "scf":
            raise PrivacyBudgetError(
                f"mechanism.estimator: {int(over.sum())} records of silo {silo} would exceed their budgets; refusing to start"
            )

    def setup_events(self) -> tuple[PersonalizedTrainingPlan, ...]:
        return (self.plan,)

    def contribute(self, state: GlobalState, *, round_index: int) -> SiloContribution:
        import torch

        ctx, params = self.context, self.params
        (start,) = state
        load_vector_into_model(ctx.model, start)
        ctx.model.train()
        rates = self.accountant.rates_for_next_round()
        canary_rates = None if self.canary_accountant is None else self.canary_accountant.rates_for_next_round()
        noisy_local_training(
            ctx,
            rates=torch.as_tensor(rates, dtype=torch.float64),
            noise_multiplier=params.noise_multiplier,
            max_grad_norm=params.max_grad_norm,
            divisor=float(ctx.training.batch_size) if params.normalization == "public" else None,
            canary_rates=canary_rates,
        )
        self.accountant.commit(rates)
        if self.canary_accountant is not None:
            self.canary_accountant.commit(canary_rates)
        event = PersonalizedPoissonGaussianEvent(plan=self.plan, rates=rates)
        delta = model_to_vector(ctx.model) - start
        return SiloContribution(vector=weighted_delta_vector(delta, SILO_WEIGHT), events=(event,))


class Rpdp(Mechanism):
    """rPDP-FL and its baselines (see the module docstring)."""

    name = "rpdp"
    privacy_unit = "record"
    Params = RpdpParams
    upload_form = WEIGHTED_DELTA  # each record's gradient clipped to the public max_grad_norm, plus noise
    audit_units = ("record",)
    personal_budgets = True

    def silo(self, context: SiloContext) -> SiloMechanism:
        if self.params.variant == "privacy_free":
            return FedAvgSilo(context)
        return RpdpSilo(context, self.params)

    def server(self) -> ServerMechanism:
        return FedAvgServer()

    @classmethod
    def gdp_mu_star(cls, events: Mapping[int, Sequence[Any]], *, rounds: int, claims: Mapping[str, Any],
                    budget: float | None = None) -> float | None:
        """Per privacy level: a canary of ``budget`` is sampled at the rate its silo plans for that budget (announced
        at start-up) in every local step of the rounds its host took part in, until its budget is spent (fixed in
        advance by the round count): that rate in every such step is an upper estimate (stopping only leaves steps
        out); the largest over the silos (None where no silo plans a rate for ``budget``, or without one)."""
        from privsilo.mechanisms.gdp import schedule_mu

        if budget is None:
            return None
        mus = []
        for silo in events.values():
            plans = [e for e in silo if isinstance(e, PersonalizedTrainingPlan)]
            rates = [float(plan.planned_rates[plan.budgets == budget].max()) for plan in plans if (plan.budgets == budget).any()]
            if rates:
                schedule = plans[0].schedule
                steps = schedule.local_steps * sum(isinstance(e, PersonalizedPoissonGaussianEvent) for e in silo)
                mus.append(schedule_mu(((max(rates), schedule.noise_multiplier, steps),)))
        return max(mus, default=None)

    @classmethod
    def gdp_mu_star_basis(cls) -> str:
        from privsilo.mechanisms.gdp import UPPER_ESTIMATE

        return f"per level, the rate each silo plans for its budget in every local step of the host's rounds, the largest over silos; {UPPER_ESTIMATE}"

    def sweep_records(self) -> Callable[[PrivacyAccountant], Mapping[str, np.ndarray]] | None:
        """Variant rpdp: each record's budget, spent epsilon and rounds (``PersonalizedAccountant.per_record``)."""
        return operator.methodcaller("per_record") if self.params.variant == "rpdp" else None

    @classmethod
    def plot_sweep_records(cls, records: Mapping[str, np.ndarray], *, run: str, out_dir: Path) -> None:
        from privsilo.mechanisms.rpdp.plots import plot_budget_vs_spent  # matplotlib: only where a sweep plots

        plot_budget_vs_spent(records, run=run, path=out_dir / "budget_vs_spent.png")

    @classmethod
    def sweep_plotter(cls) -> Callable[..., None]:
        from privsilo.mechanisms.rpdp.plots import plot_sweep  # matplotlib: only where a sweep writes its plots

        return plot_sweep

    def accountant(self) -> PrivacyAccountant:
        if self.params.variant == "privacy_free":
            return NoGuarantee()
        params = self.params
        return PersonalizedAccountant(delta=params.delta, conversion=params.conversion, normalization=params.normalization)

    def assumed_public(self) -> tuple[str, ...]:
        variant = self.params.variant
        if variant == "privacy_free":
            return ()
        public = ["per-record budgets and records per silo (each silo announces its plan, one rate per record)"]
        if variant == "minimum":
            public.append("the silo's smallest budget (it sets every record's rate)")
        if variant == "dropout":
            public.append(
                "the silo's mean budget (it sets the one rate and which records train; adding or removing a record "
                "changes it)"
            )
        if self.params.normalization == "expected_batch":
            public.append("the silo's expected batch size sum_j q_ij (the divisor of the noisy sum)")
        return tuple(public)
