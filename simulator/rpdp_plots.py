"""Plots of rPDP-FL experiments: epsilon(q) with the SCF fit, budget vs spent epsilon, and method comparison."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mechanisms.rpdp.estimator import SamplingProbabilityEstimator  # noqa: E402
from simulator.scenario import Scenario  # noqa: E402


def estimator_settings(scenario: Scenario) -> dict[str, Any]:
    """The :class:`SamplingProbabilityEstimator` keyword arguments of an ``rpdp`` scenario (its silos' view)."""
    params, federation = scenario.mechanism.params, scenario.federation
    return {
        "noise_multiplier": params.noise_multiplier,
        "rounds": federation.rounds,
        "local_steps": federation.local_steps,
        "client_rate": federation.client_rate,
        "delta": params.delta,
        "adversary": params.adversary,
        "conversion": params.conversion,
    }


def plot_epsilon_curve(estimator_settings: Mapping[str, Any], path: Path) -> None:
    """Exact epsilon(q) on a log grid of rates, with the SCF fit exp(aq + b) + c and its R^2 overlaid.

    Where the fit does not converge (e.g. very few rounds and steps) the plot says so instead of a fit curve.
    """
    settings = dict(estimator_settings)
    exact = SamplingProbabilityEstimator(**settings, method="exact")
    q = np.geomspace(1e-3, 1.0, 200)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(q, exact.epsilon(q), color="tab:blue", label="exact accountant (Theorem 1)")
    try:
        scf = SamplingProbabilityEstimator(**settings, method="scf")
    except RuntimeError:
        ax.plot([], [], " ", label="SCF fit exp(aq+b)+c did not converge")
    else:
        a, b, c = scf.fit_params
        fit = f"SCF fit exp({a:.3g}q{b:+.3g}){c:+.3g}, $R^2$ = {scf.r_squared:.4f}"
        fitted = np.exp(a * q + b) + c
        ax.plot(q, np.where(fitted > 0, fitted, np.nan), "--", color="tab:orange", label=fit)
        if (fitted <= 0).any():  # a fitted epsilon <= 0 cannot be shown on the log scale: say where it happens
            ax.axvspan(q[0], q[fitted <= 0].max(), color="tab:orange", alpha=0.12, label="SCF fit <= 0 here")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="sampling probability q", ylabel="epsilon", title=f"epsilon(q), delta = {settings['delta']:g}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_budget_vs_spent(per_record: Mapping[str, np.ndarray], path: Path) -> None:
    """Scatter of each record's budget against its realised spent epsilon, with the line y = x."""
    budget, spent = np.asarray(per_record["budget"]), np.asarray(per_record["spent"])
    fig, ax = plt.subplots(figsize=(5.0, 4.2))
    ax.scatter(budget, spent, s=8, alpha=0.5, label=f"{budget.size} records")
    top = float(max(budget.max(initial=1.0), spent.max(initial=1.0)))
    ax.plot([0, top], [0, top], "k--", linewidth=1, label="spent = budget")
    ax.set(xlabel="privacy budget", ylabel="realised spent epsilon", title="Budget vs spent (per record)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_comparison(table: Sequence[Mapping[str, Any]], *, axes: Sequence[str], num_seeds: int, title: str, path: Path) -> None:
    """Grouped bars of mean accuracy: one group per label of the first axis, one bar per label of the second
    (one bar per group with a single axis; further axes are joined into the bar label); error bars = std."""
    cells = {(row[axes[0]], " / ".join(row[a] for a in axes[1:]) or "accuracy"): row for row in table}
    groups = list(dict.fromkeys(group for group, _ in cells))
    bars = list(dict.fromkeys(bar for _, bar in cells))
    width = 0.8 / len(bars)
    x = np.arange(len(groups))
    fig, ax = plt.subplots(figsize=(max(5.5, 1.6 * len(groups) * max(1, len(bars) / 3)), 4.0))
    for i, bar in enumerate(bars):
        rows = [cells.get((group, bar)) for group in groups]
        means = [np.nan if r is None else r["accuracy_mean"] for r in rows]
        stds = [0.0 if r is None else r["accuracy_std"] for r in rows]
        ax.bar(x + (i - (len(bars) - 1) / 2) * width, means, width, yerr=stds, capsize=3, label=bar)
    ax.set_xticks(x, groups)
    ax.set(xlabel=axes[0], ylabel="final test accuracy", ylim=(0, 1.15), title=f"{title} (mean ± std over {num_seeds} seeds)")
    ax.legend(fontsize=8, ncol=min(len(bars), 4), loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
