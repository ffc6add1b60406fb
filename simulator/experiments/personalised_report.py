"""The table and plots of a sweep of personalised runs (``Mechanism.personalised``, e.g. d-privacy's nu x k
grids; Galli et al., ICISSP 2023), drawn from each run's kept output directory (``runs/<labels>-s<seed>``).

``table.csv`` and ``table.md`` give per axis combination the personalised test accuracy (test MSE for a
regression task, which has no accuracy) and loss, the cluster recovery and the per-client leakage; the plots are
``accuracy_vs_nu.png`` (one line per number of hypotheses), ``leakage.png`` (every client's total leakage per nu)
and ``hypotheses.png`` (each hypothesis' test accuracy per round, for the runs with the most hypotheses).
``privsilo sweep`` writes them (:func:`privsilo.simulator.experiments.sweep.write_sweep_outputs`).
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from privsilo.simulator.experiments.results import GridRun

TABLE_COLUMNS = ("seeds", "accuracy_mean", "accuracy_std", "loss_mean", "cluster_recovery_mean",
                 "leakage_per_participation", "leakage_max_mean", "leakage_median_mean")


def table_rows(runs: Sequence[GridRun], *, axes: Sequence[str]) -> list[dict[str, Any]]:
    """Per axis combination (first-seen order): means over seeds (std of the accuracy, ddof 0)."""
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for item in runs:
        groups.setdefault(tuple(item.labels[a] for a in axes), []).append(item.summary())
    rows = []
    for labels, summaries in groups.items():
        personal = [s["personalisation"] for s in summaries]
        leakage = [s["privacy"]["leakage"] for s in summaries]
        accuracy = [p["accuracy"] for p in personal if p["accuracy"] is not None]
        recovery = [p["cluster_recovery"] for p in personal if p["cluster_recovery"] is not None]
        rows.append({
            **dict(zip(axes, labels)),
            "nu": summaries[0]["config"]["mechanism"]["nu"],
            "hypotheses": summaries[0]["config"]["mechanism"]["hypotheses"],
            "calibration": summaries[0]["config"]["mechanism"]["calibration"],
            "seeds": len(summaries),
            "accuracy_mean": _mean(accuracy),
            "accuracy_std": float(np.std(accuracy)) if len(accuracy) > 1 else None,
            "loss_mean": _mean([p["loss"] for p in personal]),
            "cluster_recovery_mean": _mean(recovery),
            "leakage_per_participation": leakage[0]["max_per_participation"],
            "leakage_max_mean": _mean([item["max"] for item in leakage]),
            "leakage_median_mean": _mean([item["median"] for item in leakage]),
        })
    return rows


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return float(np.mean(kept)) if kept and len(kept) == len(values) else None


def write_report(runs: Sequence[GridRun], *, axes: Sequence[str], out_dir: Path, title: str) -> None:
    """``table.csv``, ``table.md`` and the three plots into ``out_dir``."""
    from privsilo.simulator.experiments.personalised_plots import plot_accuracy_vs_nu, plot_hypotheses_per_round, plot_leakage_per_nu

    rows = table_rows(runs, axes=axes)
    with (out_dir / "table.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*axes, *TABLE_COLUMNS])
        for row in rows:
            writer.writerow(["" if row[c] is None else row[c] for c in (*axes, *TABLE_COLUMNS)])
    (out_dir / "table.md").write_text(markdown_table(rows, axes=axes))
    plot_accuracy_vs_nu(rows, title=title, path=out_dir / "accuracy_vs_nu.png")
    plot_leakage_per_nu(runs, title=title, path=out_dir / "leakage.png")
    plot_hypotheses_per_round(runs, title=title, path=out_dir / "hypotheses.png")


def markdown_table(rows: Sequence[dict[str, Any]], *, axes: Sequence[str]) -> str:
    regression = all(row["accuracy_mean"] is None for row in rows)
    metric = "test MSE" if regression else "accuracy"
    lines = [
        "| " + " | ".join([*axes, "seeds", metric, "cluster recovery", "leakage / participation", "leakage max", "leakage median"]) + " |",
        "|" + "---|" * (len(axes) + 6),
    ]
    for row in rows:
        if regression:
            result = _fmt(row["loss_mean"])
        else:
            result = _fmt(row["accuracy_mean"]) + ("" if row["accuracy_std"] is None else f" ± {row['accuracy_std']:.3f}")
        cells = [row["seeds"], result, _fmt(row["cluster_recovery_mean"], digits=2), _fmt(row["leakage_per_participation"], general=True),
                 _fmt(row["leakage_max_mean"], general=True), _fmt(row["leakage_median_mean"], general=True)]
        lines.append("| " + " | ".join([*(row[a] for a in axes), *map(str, cells)]) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value: float | None, *, digits: int = 3, general: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.4g}" if general else f"{value:.{digits}f}"
