"""The mechanism-independent plots of a sweep: mean final accuracy per axis combination, and mean accuracy per
round of every combination (``metric="loss"``: the test MSE of a regression task, which has no accuracy)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

if TYPE_CHECKING:
    from privsilo.simulator.experiments.results import SweepRun

LABELS = {"accuracy": "test accuracy", "loss": "test MSE"}


def plot_comparison(table: Sequence[Mapping[str, Any]], *, axes: Sequence[str], num_seeds: int, title: str, path: Path,
                    metric: str = "accuracy") -> None:
    """Grouped bars of the mean final ``metric`` (accuracy, or loss: the test MSE): one group per label of the first axis, one bar per label of the second
    (one bar per group with a single axis; further axes are joined into the bar label); error bars = std over
    seeds (none for a combination run with one seed)."""
    cells = {(row[axes[0]], " / ".join(row[a] for a in axes[1:]) or metric): row for row in table}
    groups = list(dict.fromkeys(group for group, _ in cells))
    bars = list(dict.fromkeys(bar for _, bar in cells))
    width = 0.8 / len(bars)
    x = np.arange(len(groups))
    fig, ax = plt.subplots(figsize=(max(5.5, 1.6 * len(groups) * max(1, len(bars) / 3)), 4.0))
    for i, bar in enumerate(bars):
        rows = [cells.get((group, bar)) for group in groups]
        means = [np.nan if r is None or r[f"{metric}_mean"] is None else r[f"{metric}_mean"] for r in rows]
        stds = [np.nan if r is None or r[f"{metric}_std"] is None else r[f"{metric}_std"] for r in rows]
        ax.bar(x + (i - (len(bars) - 1) / 2) * width, means, width, yerr=stds, capsize=3, label=bar)
    ax.set_xticks(x, groups)
    spread = f"mean ± std over {num_seeds} seeds" if num_seeds > 1 else "1 seed"
    ax.set(xlabel=axes[0], ylabel=f"final {LABELS[metric]}", title=f"{title} ({spread})")
    if metric == "accuracy":
        ax.set_ylim(0, 1.15)
    ax.legend(fontsize=8, ncol=min(len(bars), 4), loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accuracy_per_round(runs: Sequence[SweepRun], *, axes: Sequence[str], num_seeds: int, title: str, path: Path,
                            metric: str = "accuracy") -> None:
    """One line per axis combination: test accuracy (``metric="loss"``: test MSE) after each round, averaged over the combination's seeds
    (up to the shortest run of the combination)."""
    curves: dict[str, list[tuple[float, ...]]] = {}
    for item in runs:
        curves.setdefault(" / ".join(item.labels[a] for a in axes), []).append(getattr(item, f"{metric}_per_round"))
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for index, (label, members) in enumerate(curves.items()):
        rounds = min(len(curve) for curve in members)
        mean = np.mean([curve[:rounds] for curve in members], axis=0)
        style = ("-", "--", ":")[index // 10 % 3]  # matplotlib's 10 colours repeat: tell the lines apart
        ax.plot(np.arange(1, rounds + 1), mean, style, marker="." if rounds <= 60 else None, label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    spread = f"mean over {num_seeds} seeds" if num_seeds > 1 else "1 seed"
    ax.set(xlabel="round", ylabel=LABELS[metric], title=f"{title} ({spread})")
    if metric == "accuracy":
        ax.set_ylim(0, 1)
    ax.legend(fontsize=7, ncol=1 + len(curves) // 10, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_attack_vs_accuracy(table: Sequence[Mapping[str, Any]], *, axes: Sequence[str], title: str, path: Path) -> None:
    """One point per axis combination (e.g. per defence): mean attack PSNR against mean final accuracy, with the
    attack's success threshold of 30 dB; a combination without a scored attack is left out."""
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    for row in table:
        if row["attack_psnr_mean"] is None:
            continue
        label = " / ".join(row[a] for a in axes)
        ax.scatter(row["accuracy_mean"], row["attack_psnr_mean"], s=30)
        ax.annotate(label, (row["accuracy_mean"], row["attack_psnr_mean"]), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.axhline(30.0, color="0.5", lw=0.8, ls="--")
    ax.set(xlabel="final test accuracy (mean over seeds)", ylabel="attack PSNR, dB (mean)", title=f"{title}: attack vs accuracy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
