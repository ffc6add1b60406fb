"""The files of ``privsilo attack``, written all or nothing: ``attack.json``, ``attack.png`` (originals above the
reconstructions over the iterations, PSNR under the last) and ``loss.png`` (the gradient-matching loss)."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from privsilo.simulator.attacks.metrics import to_pixels  # noqa: E402
from privsilo.simulator.attacks.results import AttackReport  # noqa: E402
from privsilo.simulator.data import DATASETS  # noqa: E402
from privsilo.simulator.run_dir.writers import atomic_directory  # noqa: E402

MAX_COLUMNS = 16  # images shown in attack.png (the first runs' first images)


def write_attack(report: AttackReport, out_dir: Path) -> None:
    """Write the report's files into ``out_dir`` (atomically)."""
    with atomic_directory(out_dir, kind="attack") as staging:
        (staging / "attack.json").write_text(json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n")
        plot_grid(report, staging / "attack.png")
        plot_losses(report, staging / "loss.png")


def plot_grid(report: AttackReport, path: Path) -> None:
    """One column per reconstructed image: its original on top (when paired), then the reconstruction at each
    snapshot step, the final one with its PSNR underneath."""
    scale = DATASETS[report.scenario.data.dataset].pixel_scale
    columns = []
    for run in report.runs:
        truth = report.capture.truths[run.target_silo]
        paired = {s.reconstructed: s for s in run.scores}
        for i in range(len(run.reconstruction.inputs)):
            score = paired.get(i)
            original = None if score is None else to_pixels(truth.features[score.original], pixel_scale=scale)
            columns.append((run, i, original, score))
    columns = columns[:MAX_COLUMNS]
    steps = [step for step, _ in columns[0][0].reconstruction.snapshots]
    rows = 1 + len(steps)
    fig, axes = plt.subplots(rows, len(columns), figsize=(1.25 * len(columns) + 0.9, 1.3 * rows + 0.3), squeeze=False)
    for c, (run, i, original, score) in enumerate(columns):
        _show(axes[0, c], original)
        axes[0, c].set_title(f"silo {run.target_silo}\nseed {run.seed}", fontsize=7)
        for r, (_, snapshot) in enumerate(run.reconstruction.snapshots, start=1):
            _show(axes[r, c], to_pixels(snapshot[i], pixel_scale=scale))
        axes[-1, c].set_xlabel("-" if score is None else f"{score.psnr:.1f} dB", fontsize=8)
    axes[0, 0].set_ylabel("original", fontsize=8)
    for r, step in enumerate(steps, start=1):
        axes[r, 0].set_ylabel(f"step {step}", fontsize=8)
    config = report.config
    fig.suptitle(f"{report.scenario.name}: {config.method}, round {config.round}, batch {report.scenario.federation.batch_size}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _show(ax: plt.Axes, image: np.ndarray | None) -> None:
    ax.set_xticks([])
    ax.set_yticks([])
    if image is None:
        ax.set_facecolor("0.9")
        return
    ax.imshow(image[0] if image.shape[0] == 1 else np.moveaxis(image, 0, -1), cmap="gray", vmin=0.0, vmax=1.0)


def plot_losses(report: AttackReport, path: Path) -> None:
    """The best gradient-matching loss after each L-BFGS step, one line per (silo, seed)."""
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for run in report.runs:
        losses = np.where(np.isfinite(run.reconstruction.losses), run.reconstruction.losses, np.nan)
        ax.plot(np.arange(1, len(losses) + 1), np.maximum(losses, 1e-30), lw=1, label=f"silo {run.target_silo}, seed {run.seed}")
    ax.set(xlabel="L-BFGS step", ylabel="gradient distance (best so far)", yscale="log", title=f"{report.scenario.name}: {report.config.method}")
    if len(report.runs) <= 10:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["plot_grid", "plot_losses", "write_attack"]
