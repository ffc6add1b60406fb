"""The files of ``privsilo audit``, written all or nothing: the audited run's usual files, ``audit.json`` and
``audit.png`` (the canaries' score histograms, included against excluded, and the lower bound against the number
of guesses, beside the run's ceiling and the claimed epsilon)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from privsilo.simulator.audit.results import AuditReport  # noqa: E402
from privsilo.simulator.run_dir.writers import atomic_directory, write_run_files  # noqa: E402


def write_audit(report: AuditReport, out_dir: Path, *, invocation: Mapping[str, Any] | None = None) -> None:
    """Write the run's files, ``audit.json`` and ``audit.png`` into ``out_dir`` (atomically)."""
    with atomic_directory(out_dir, kind="audit") as staging:
        write_run_files(report.result, staging, invocation=invocation)
        (staging / "audit.json").write_text(json.dumps(report.to_json(), indent=2, allow_nan=False) + "\n")
        plot_audit(report, staging / "audit.png")


def plot_audit(report: AuditReport, path: Path) -> None:
    """One row per group of canaries: score histograms, then the bound over the guess counts tried."""
    groups = report.groups
    fig, axes = plt.subplots(len(groups), 2, figsize=(10, 3.6 * len(groups)), squeeze=False)
    for (hist, bound), group in zip(axes, groups):
        title = "" if group.budget is None else f"budget {group.budget:g}: "
        bins = 40
        hist.hist(group.scores[group.included], bins=bins, alpha=0.6, label=f"included ({int(group.included.sum())})")
        hist.hist(group.scores[~group.included], bins=bins, alpha=0.6, label=f"excluded ({int((~group.included).sum())})")
        hist.set(xlabel="score (higher: more likely included)", ylabel="canaries", title=f"{title}canary scores")
        hist.legend()
        candidates = () if group.bound is None else group.bound.candidates
        bound.plot([k for k, _, _ in candidates], [e for _, _, e in candidates], marker="o", label=f"lower bound ({group.confidence:.4g})")
        if group.bound is not None:
            bound.axhline(group.ceiling, color="tab:grey", linestyle=":", label=f"ceiling {group.ceiling:.3g} (this run)")
        if group.claimed_epsilon is not None:
            bound.axhline(group.claimed_epsilon, color="tab:red", linestyle="--", label=f"claimed {group.claimed_epsilon:.3g}")
        bound.set(xscale="log", xlabel="guesses", ylabel="epsilon", title=f"{title}empirical lower bound (delta = {report.delta:g})")
        bound.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
