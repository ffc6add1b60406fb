"""Grids of personalised runs, e.g. dprivacy's nu x k sweep, kept run by run.

``python -m simulator.experiments.dprivacy_grid GRID.yaml [--out DIR] [--seeds N|S1,S2] [--set K=V] [--only AXIS=L1,L2]``
reads the grid format of ``privsilo sweep`` (base scenario, seeds, axes), runs every combination x seed in one
Ray session and keeps each run's full output directory in ``DIR/runs/<labels>-s<seed>`` (so the per-client
figures stay available); a run whose directory already holds the same resolved scenario is not run again, so an
interrupted grid resumes (``--report-only`` runs nothing and reports the finished runs). It then writes ``DIR/table.csv``, ``DIR/table.md`` (per combination: personalised
accuracy and loss, cluster recovery, per-client leakage) and the plots ``accuracy_vs_nu.png`` (one line per
number of hypotheses), ``leakage.png`` (every client's total leakage per nu) and ``hypotheses.png`` (the test
accuracy of each hypothesis per round, for the runs with the most hypotheses). A bad grid exits 2 with one line.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from simulator.errors import PrivsiloError
from simulator.experiments.results import GridRun

TABLE_COLUMNS = ("seeds", "accuracy_mean", "accuracy_std", "loss_mean", "cluster_recovery_mean",
                 "leakage_per_participation", "leakage_max_mean", "leakage_median_mean")


def run_grid(grid_path: str | Path, *, out_dir: str | Path | None = None, seeds: int | Sequence[int] | None = None,
             overrides: Sequence[str] = (), only: Sequence[str] = (), progress: bool = False,
             report_only: bool = False) -> list[GridRun]:
    """Run (or resume) every combination x seed of the grid, then write the tables and plots; ``report_only``:
    run nothing and report the runs already finished (e.g. a grid run in parts with ``only``)."""
    from tqdm.auto import tqdm

    from simulator.cluster import ActorDemand, Capacity, ray_session
    from simulator.engine import resources_needed, run
    from simulator.experiments.sweep import load_grid

    grid = load_grid(grid_path, seeds=seeds, overrides=overrides, only=only)
    out = Path(out_dir) if out_dir is not None else Path("runs") / grid.name
    jobs = [(labels, seed, grid.scenario(labels, seed)) for labels in grid.combinations() for seed in grid.seeds]
    runs = [GridRun(labels, seed, out / "runs" / f"{'-'.join(labels.values())}-s{seed}") for labels, seed, _ in jobs]
    pending = [(item, scenario) for item, (_, _, scenario) in zip(runs, jobs) if not _finished(item.directory, scenario)]
    if report_only:
        missing = {item.directory for item, _ in pending}
        runs = [item for item in runs if item.directory not in missing]
        if not runs:
            raise PrivsiloError(f"{grid.name}: no finished run in {out / 'runs'} to report")
        pending = []
    if pending:
        def demand_for(capacity: Capacity) -> ActorDemand:
            return ActorDemand.covering(resources_needed(scenario, capacity) for _, scenario in pending)

        first = pending[0][1]
        with ray_session(address=first.ray.address, demand_for=demand_for, connect_timeout=first.ray.connect_timeout):
            for item, scenario in tqdm(pending, desc=grid.name, unit="run", disable=not progress):
                run(scenario, out_dir=item.directory)
    write_report(runs, axes=list(grid.axes), out_dir=out, title=grid.name)
    if progress:
        print(f"{grid.name}: {len(runs)} runs ({len(runs) - len(pending)} already done); table and plots in {out}")
    return runs


def _finished(directory: Path, scenario: Any) -> bool:
    summary = directory / "summary.json"
    return summary.is_file() and json.loads(summary.read_text())["config"] == json.loads(json.dumps(scenario.to_dict()))


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
    from simulator.experiments.dprivacy_grid_plots import plot_accuracy_vs_nu, plot_hypotheses_per_round, plot_leakage_per_nu

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.experiments.dprivacy_grid", description=__doc__.split("\n\n")[0])
    parser.add_argument("grid", type=Path)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--seeds", default=None, metavar="N|S1,S2,...")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE")
    parser.add_argument("--only", action="append", default=[], metavar="AXIS=LABEL[,LABEL]")
    parser.add_argument("--report-only", action="store_true", help="run nothing; tabulate and plot the finished runs")
    args = parser.parse_args(argv)
    from simulator.cli import _seed_option

    try:
        runs = run_grid(args.grid, out_dir=args.out, seeds=_seed_option(args.seeds), overrides=args.overrides, only=args.only,
                        progress=True, report_only=args.report_only)
    except PrivsiloError as exc:
        print(f"privsilo: error: {exc}", file=sys.stderr)
        return 2
    out = runs[0].directory.parent.parent
    print((out / "table.md").read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
