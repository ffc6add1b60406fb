"""A personalised run's own files: ``clients.csv``, ``hypotheses.csv``, ``hypotheses.png`` and ``hypotheses.pt``
(every final hypothesis as a torch state_dict); the mechanism draws its privacy plots (``Mechanism.write_plots``)."""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402


if TYPE_CHECKING:
    from privsilo.simulator.engine.results import RunResult

CLIENT_COLUMNS = ("client", "group", "hypothesis", "loss", "accuracy", "participations", "leakage_total")
HYPOTHESIS_COLUMNS = ("round", "hypothesis", "group", "loss", "accuracy", "clients_picking")


def write_personalisation(result: RunResult, staging: Path) -> None:
    """Write the personalised run's files into ``staging`` (see the module docstring)."""
    personalisation = result.personalisation
    leakage = result.privacy.get("leakage", {}).get("per_client", {})
    with (staging / "clients.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CLIENT_COLUMNS)
        for client in personalisation["per_client"]:
            spent = leakage.get(str(client["client"]), {})
            writer.writerow([client["client"], client["group"] or "", client["hypothesis"], _cell(client["loss"]),
                             _cell(client["accuracy"]), spent.get("participations", ""), _cell(spent.get("total"))])
    with (staging / "hypotheses.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HYPOTHESIS_COLUMNS)
        for row in personalisation["history"]:
            writer.writerow([row["round"], row["hypothesis"], row["group"], _cell(row["loss"]), _cell(row["accuracy"]), row["clients_picking"]])
    plot_hypotheses(personalisation["history"], title=result.scenario.name, path=staging / "hypotheses.png")
    torch.save(list(personalisation["state_dicts"]), staging / "hypotheses.pt")


def plot_hypotheses(history: list[Mapping[str, Any]], *, title: str, path: Path) -> None:
    """Test accuracy (loss for regression) of every hypothesis per round, one panel per true group."""
    groups = list(dict.fromkeys(row["group"] for row in history))
    metric = "accuracy" if any(row["accuracy"] is not None and math.isfinite(row["accuracy"]) for row in history) else "loss"
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.6), squeeze=False)
    for ax, group in zip(axes[0], groups):
        rows = [row for row in history if row["group"] == group]
        for j in sorted({row["hypothesis"] for row in rows}):
            mine = [row for row in rows if row["hypothesis"] == j]
            ax.plot([r["round"] for r in mine], [r[metric] for r in mine], marker=".", label=f"hypothesis {j}")
        ax.set(xlabel="round", ylabel=f"test {metric}", title=f"test data: {group}")
        if metric == "accuracy":
            ax.set_ylim(0, 1)
    axes[0][0].legend()
    fig.suptitle(f"{title}: each hypothesis on each group's test data")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cell(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else repr(value)
