"""The ``uldp`` mechanism's sweep plots (its ``sweep_plotter``), as the paper's Figures 4-7 show a run: test
accuracy per round by variant (``accuracy_per_round.png``) and user-level epsilon per round
(``epsilon_per_round.png``). One panel per combination of the grid's other axes (e.g. users, user rate), one
line per variant (the axis `mechanism.variant`, or a settings axis named `variant`): the mean over seeds, with a band of ± one standard deviation where there are several seeds.
A variant without an epsilon (GROUP with ``group_k`` from the data) says so in the legend instead of a line.
The plotted values of every run are written beside them (``per_round.csv``).
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

VARIANT_AXES = ("mechanism.variant", "variant")  # a settings axis "variant" when group needs its group_k
PLOTS = {"accuracy_per_round": "test accuracy", "epsilon_per_round": "user-level epsilon"}
LINE_STYLES = ("-", "--", "-.", ":")  # variants with the same epsilon coincide: dashes keep each visible


def plot_sweep(runs: Sequence[Any], *, axes: Sequence[str], title: str, out_dir: Path, base: Any = None) -> None:
    """Write ``accuracy_per_round.png``, ``epsilon_per_round.png`` and ``per_round.csv`` for a sweep's runs into
    ``out_dir`` (from the runs alone: the grid's ``base`` scenario adds nothing to them)."""
    write_per_round_csv(runs, axes=axes, path=Path(out_dir) / "per_round.csv")
    panels = group_runs(runs, axes=axes)
    seeds = len({run.seed for run in runs})
    for attribute, quantity in PLOTS.items():
        _plot(panels, attribute=attribute, quantity=quantity, seeds=seeds, title=title, path=Path(out_dir) / f"{attribute}.png")


def write_per_round_csv(runs: Sequence[Any], *, axes: Sequence[str], path: Path) -> None:
    """One row per run and round: the axis labels, ``seed``, ``round`` (from 1), ``accuracy``, ``epsilon``
    (empty where the round has none)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*axes, "seed", "round", "accuracy", "epsilon"])
        for run in runs:
            for index, (accuracy, epsilon) in enumerate(zip(run.accuracy_per_round, run.epsilon_per_round), start=1):
                writer.writerow([*(run.labels[a] for a in axes), run.seed, index, repr(accuracy), "" if epsilon is None else repr(epsilon)])


def group_runs(runs: Sequence[Any], *, axes: Sequence[str]) -> dict[str, dict[str, list[Any]]]:
    """``{panel: {line: runs}}`` in the grid's order: a panel per combination of the axes other than the variant
    axis, a line per variant (per combination of every axis when the grid has no variant axis)."""
    line_axes = [axis for axis in axes if axis in VARIANT_AXES] or list(axes)
    panel_axes = [axis for axis in axes if axis not in line_axes]
    panels: dict[str, dict[str, list[Any]]] = {}
    for run in runs:
        panel = " / ".join(run.labels[axis] for axis in panel_axes) or "all runs"
        line = " / ".join(run.labels[axis] for axis in line_axes)
        panels.setdefault(panel, {}).setdefault(line, []).append(run)
    return panels


def curve_stats(runs: Sequence[Any], attribute: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Mean and standard deviation (ddof 0; None for one run) per round over ``runs``, on the rounds all of
    them have; a round without a value (no epsilon) is NaN."""
    length = min(len(getattr(run, attribute)) for run in runs)
    values = np.array([[np.nan if v is None else float(v) for v in getattr(run, attribute)[:length]] for run in runs])
    return values.mean(axis=0), (values.std(axis=0) if len(runs) > 1 else None)


def _plot(panels: dict[str, dict[str, list[Any]]], *, attribute: str, quantity: str, seeds: int, title: str, path: Path) -> None:
    fig, axs = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.9), squeeze=False, sharey=True)
    for ax, (panel, lines) in zip(axs[0], panels.items()):
        for index, (line, runs) in enumerate(lines.items()):
            mean, std = curve_stats(runs, attribute)
            rounds = np.arange(1, mean.size + 1)
            if np.isnan(mean).all():
                ax.plot([], [], " ", label=f"{line}: no epsilon")
                continue
            (drawn,) = ax.plot(rounds, mean, LINE_STYLES[index % len(LINE_STYLES)], label=line)
            if std is not None:
                ax.fill_between(rounds, mean - std, mean + std, color=drawn.get_color(), alpha=0.2)
        ax.set(title=panel, xlabel="round")
        if attribute == "epsilon_per_round":
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    axs[0][0].set_ylabel(quantity)
    spread = f"mean ± std over {seeds} seeds" if seeds > 1 else "1 seed"
    fig.suptitle(f"{title}: {quantity} per round ({spread})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
