"""A run's output files, compared without what differs between two runs of the same seed (wall times)."""
from __future__ import annotations

import csv
from pathlib import Path


def metrics_without_wall_times(path: str | Path) -> list[dict[str, str]]:
    """The rows of ``metrics.csv`` (``path`` is the file or the run directory holding it) without ``wall_seconds``."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.csv"
    with path.open() as handle:
        return [{k: v for k, v in row.items() if k != "wall_seconds"} for row in csv.DictReader(handle)]
