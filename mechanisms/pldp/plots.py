"""The plot of a PLDP-FL run: both epsilon figures of every client, side by side."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_epsilon_per_client(privacy: Mapping[str, Any], *, path: Path) -> None:
    fig = epsilon_per_client_figure(privacy)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def epsilon_per_client_figure(privacy: Mapping[str, Any]) -> plt.Figure:
    """Bars per client (log scale): ``epsilon_per_coordinate`` (one scalar of one upload, the paper's figure)
    beside ``epsilon_per_client`` (composed over coordinates and participations); uploads under each client."""
    clients = sorted(privacy["epsilon_per_client"], key=int)
    per_client = np.array([privacy["epsilon_per_client"][c] for c in clients], dtype=float)
    per_coordinate = np.array([privacy["epsilon_per_coordinate"][c] or np.nan for c in clients], dtype=float)
    uploads = [privacy["uploads"][c] for c in clients]
    x = np.arange(len(clients))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.32 * len(clients) + 2), 4.2))
    ax.bar(x - 0.2, per_coordinate, 0.4, label="epsilon_per_coordinate (the paper's figure)", color="tab:blue")
    # a client never sampled spent 0, which a log axis cannot show: its bar is left out and its label says 0 uploads
    ax.bar(x + 0.2, np.where(per_client > 0, per_client, np.nan), 0.4,
           label="epsilon_per_client (coordinates x participations)", color="tab:red")
    step = max(1, len(clients) // 25)
    ax.set_xticks(x[::step], [f"{c}\n{u} up." for c, u in zip(clients[::step], uploads[::step])], fontsize=7)
    ax.set_yscale("log")
    top = np.nanmax(np.concatenate([per_client[per_client > 0], per_coordinate, [1.0]]))
    ax.set_ylim(top=top * 300)  # room for the legend above the bars
    ax.set(xlabel="client (uploads)", ylabel="epsilon (pure LDP)", title="Privacy per client: both figures")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
