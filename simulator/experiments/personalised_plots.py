"""Plots of a sweep of personalised runs (see :mod:`privsilo.simulator.experiments.personalised_report`)."""
from __future__ import annotations

import csv
import math
from typing import TYPE_CHECKING, Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:
    from pathlib import Path

    from privsilo.simulator.experiments.results import GridRun


def plot_accuracy_vs_nu(rows: Sequence[dict[str, Any]], *, title: str, path: Path) -> None:
    """Personalised test accuracy (test MSE for regression) against nu, one line per number of hypotheses k (and
    calibration, where the grid has both); error bars: std over seeds."""
    regression = all(row["accuracy_mean"] is None for row in rows)
    key = "loss_mean" if regression else "accuracy_mean"
    both = len({row["calibration"] for row in rows}) > 1
    fig, ax = plt.subplots(figsize=(5.8, 3.9))
    for k, calibration in sorted({(row["hypotheses"], row["calibration"]) for row in rows}):
        mine = sorted((row for row in rows if (row["hypotheses"], row["calibration"]) == (k, calibration)), key=lambda row: row["nu"])
        errors = None if regression else [row["accuracy_std"] or 0.0 for row in mine]
        label = f"k = {k}" + (f", {calibration}" if both else "")
        ax.errorbar([row["nu"] for row in mine], [row[key] for row in mine], yerr=errors, marker="o", capsize=3, label=label)
    ax.set(xlabel="noise multiplier nu (0 = no noise)", ylabel="test MSE" if regression else "personalised test accuracy", title=title)
    if not regression:
        ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_leakage_per_nu(runs: Sequence[GridRun], *, title: str, path: Path) -> None:
    """Every client's total leakage over the run (all seeds), one box per nu and k (nu = 0 has none)."""
    cells: dict[tuple[float, int], list[float]] = {}
    for item in runs:
        summary = item.summary()
        mechanism = summary["config"]["mechanism"]
        totals = [c["total"] for c in summary["privacy"]["leakage"]["per_client"].values()]
        finite = [t for t in totals if t is not None and math.isfinite(t)]
        if finite:
            cells.setdefault((mechanism["nu"], mechanism["hypotheses"]), []).extend(finite)
    fig, ax = plt.subplots(figsize=(max(5.8, 0.7 * len(cells)), 3.9))
    keys = sorted(cells)
    if keys:
        ax.boxplot([cells[key] for key in keys])
        ax.set_xticks(range(1, len(keys) + 1), [f"nu {nu:g}\nk {k}" for nu, k in keys])
        if any(value > 0 for key in keys for value in cells[key]):  # clients that never participated leak 0
            ax.set_yscale("log")
    ax.set(ylabel="total leakage per client", title=f"{title}: leakage per client (sum over participations)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_hypotheses_per_round(runs: Sequence[GridRun], *, title: str, path: Path) -> None:
    """For the first seed's runs with the most hypotheses, one panel per nu: each hypothesis' test accuracy per
    round on the group where it scores best (test MSE, lowest, for regression)."""
    summaries = [(item, item.summary()) for item in runs]
    k_max = max(s["config"]["mechanism"]["hypotheses"] for _, s in summaries)
    seed = min(item.seed for item in runs)
    chosen = sorted(((s["config"]["mechanism"]["nu"], item) for item, s in summaries
                     if s["config"]["mechanism"]["hypotheses"] == k_max and item.seed == seed), key=lambda pair: pair[0])
    fig, axes = plt.subplots(1, len(chosen), figsize=(3.3 * len(chosen), 3.3), squeeze=False, sharey=True)
    for ax, (nu, item) in zip(axes[0], chosen):
        with (item.directory / "hypotheses.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        regression = all(row["accuracy"] == "" for row in rows)
        best = min if regression else max
        for j in sorted({int(row["hypothesis"]) for row in rows}):
            per_round: dict[int, float] = {}
            for row in rows:
                if int(row["hypothesis"]) == j:
                    value = float(row["loss" if regression else "accuracy"])
                    per_round[int(row["round"])] = best(value, per_round.get(int(row["round"]), value))
            ax.plot(list(per_round), list(per_round.values()), marker=".", label=f"hypothesis {j}")
        ax.set(xlabel="round", title=f"nu = {nu:g}")
    axes[0][0].set_ylabel("test MSE (best group)" if regression else "test accuracy (best group)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{title}: the {k_max} hypotheses per round (seed {seed})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
