"""Plots of rPDP-FL sweeps: epsilon(q) with the SCF fit under a grid's base settings, and budget vs spent epsilon
per record of one run."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from privsilo.mechanisms.rpdp.estimator import SamplingProbabilityEstimator  # noqa: E402
from privsilo.mechanisms.rpdp.personalized_accountant import MAX_LEVELS  # noqa: E402


def plot_sweep(runs: Sequence[Any], *, axes: Sequence[str], title: str, out_dir: Path, base: Any) -> None:
    """A sweep's rPDP plot: ``epsilon_curve.png``, epsilon(q) under the grid's ``base`` scenario's settings."""
    plot_epsilon_curve(estimator_settings(base), Path(out_dir) / "epsilon_curve.png")


def estimator_settings(scenario: Any) -> dict[str, Any]:
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


def plot_budget_vs_spent(per_record: Mapping[str, np.ndarray], *, run: str, path: Path) -> None:
    fig = budget_vs_spent_figure(per_record, run=run)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def budget_vs_spent_figure(per_record: Mapping[str, np.ndarray], *, run: str) -> plt.Figure:
    """Realised spent epsilon of every record of one run (named in the title) against its budget.

    With at most ``MAX_LEVELS`` budget levels: one column per level showing each record's spent epsilon as a
    share of its budget (1 = all of it), as a box beside every record's own point (spread out in order, so none
    hides another), with the level's record count and how many never trained under it. Continuous budgets: a
    scatter of budget (log scale) against spent epsilon with the line spent = budget.
    """
    budget, spent = np.asarray(per_record["budget"], dtype=float), np.asarray(per_record["spent"], dtype=float)
    rounds = per_record.get("rounds")
    levels = np.unique(budget)
    discrete = levels.size <= MAX_LEVELS
    fig, ax = plt.subplots(figsize=(max(5.0, 1.8 * levels.size) if discrete else 5.5, 4.2))
    if discrete:
        labels = []
        for x, level in enumerate(levels):
            share = np.sort(spent[budget == level]) / level
            ax.boxplot(share, positions=[x - 0.22], widths=0.28, showfliers=False, manage_ticks=False)
            ax.scatter(np.linspace(x, x + 0.38, share.size), share, s=6, alpha=0.4, color="tab:blue")
            never = "" if rounds is None else f"\n{int((np.asarray(rounds)[budget == level] == 0).sum())} never trained"
            labels.append(f"{level:g}\n{share.size} records{never}")
        ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1, label="whole budget")
        ax.set_xticks(range(levels.size), labels)
        ax.set(xlabel="privacy budget", ylabel="spent epsilon / budget", xlim=(-0.6, levels.size - 0.4), ylim=(-0.03, 1.1))
    else:
        never = "" if rounds is None else f", {int((np.asarray(rounds) == 0).sum())} never trained"
        ax.scatter(budget, spent, s=8, alpha=0.5, label=f"{budget.size} records{never}")
        ax.plot(levels, levels, "k--", linewidth=1, label="spent = budget")
        ax.set(xlabel="privacy budget", ylabel="realised spent epsilon", xscale="log")
    ax.set_title(f"Budget vs spent per record: {run}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
