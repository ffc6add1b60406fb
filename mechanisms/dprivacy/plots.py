"""The plot of a d-privacy run: the distribution of the clients' total leakage (Theorem 3.1)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_leakage(privacy: Mapping[str, Any], *, path: Path) -> None:
    """Histogram of the clients' total leakage over the run; nothing when no client has a finite total
    (no noise, or no participation)."""
    per_client = privacy["leakage"]["per_client"].values()
    totals = [c["total"] for c in per_client if c.get("total") is not None and math.isfinite(c["total"])]
    if not totals:
        return
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.hist(totals, bins=min(20, max(5, len(totals) // 2)), color="tab:red")
    ax.set(xlabel="total leakage per client (sum over participations)", ylabel="clients",
           title=f"d-privacy leakage ({privacy['leakage']['calibration']}, nu = {privacy['leakage']['nu']:g})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
