"""``privsilo merge``: one table from several sweep output directories.

Seeds of one grid run on different machines or sessions (e.g. ``--seeds`` split across a cluster) each
leave a sweep directory; merging reads their ``runs.csv`` files, checks that they share the same axes and
do not repeat a (combination, seed), and writes ``runs.csv``, ``table.csv``, ``table.md`` and
``comparison.png`` atomically. The rPDP plots (``epsilon_curve.png``, ``budget_vs_spent.png``) are copied
from the first directory that has them.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Sequence

from privsilo.simulator.errors import PrivsiloError
from privsilo.simulator.experiments.sweep import SweepRun, read_runs_csv, summarise, write_tables

COPIED_PLOTS = ("epsilon_curve.png", "budget_vs_spent.png")


def merge_sweeps(sweep_dirs: Sequence[Path], *, out_dir: Path, title: str | None = None) -> tuple[list[str], list[SweepRun], list[dict]]:
    """Merge sweep directories into ``out_dir``; returns the axes, the runs and the table."""
    from privsilo.simulator.run_dir.writers import atomic_directory

    if len(sweep_dirs) < 2:
        raise PrivsiloError(f"merge: got {len(sweep_dirs)} sweep directory; give at least two")
    axes: list[str] | None = None
    runs: list[SweepRun] = []
    seen: dict[tuple, Path] = {}
    for directory in sweep_dirs:
        file = Path(directory) / "runs.csv"
        if not file.is_file():
            raise PrivsiloError(f"merge: {directory} has no runs.csv (is it a `privsilo sweep` output directory?)")
        these_axes, these_runs = read_runs_csv(file)
        if axes is not None and these_axes != axes:
            raise PrivsiloError(f"merge: {directory} has axes {these_axes}, the first directory has {axes}")
        axes = these_axes
        for item in these_runs:
            key = (*item.labels.values(), item.seed)
            if key in seen:
                raise PrivsiloError(f"merge: run {'/'.join(map(str, key[:-1]))} seed {item.seed} is in both {seen[key]} and {directory}")
            seen[key] = Path(directory)
            runs.append(item)
    assert axes is not None
    table = list(summarise(runs, axes=axes))
    with atomic_directory(Path(out_dir), kind="merge") as staging:
        write_tables(staging, runs=runs, table=table, axes=axes, title=title or Path(out_dir).name)
        for name in COPIED_PLOTS:
            source = next((Path(d) / name for d in sweep_dirs if (Path(d) / name).is_file()), None)
            if source is not None:
                shutil.copy2(source, staging / name)
    return axes, runs, table


__all__ = ["merge_sweeps"]
