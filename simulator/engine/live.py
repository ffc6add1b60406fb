"""What a run writes while it runs, besides checkpoints: the emptied output directory and the trackers' logs."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from privsilo.simulator.engine.results import RoundRecord
from privsilo.simulator.run_dir.lifecycle import clear


class LiveOutput:
    """What a run writes while it runs, besides checkpoints: once its federation is ready, a fresh run empties its
    output directory ``fresh``; then each round's metrics go to the trackers in ``log`` (into ``tracking_dir``)
    as the round ends. ``resume_with`` goes into every checkpoint's header (``write_checkpoint``)."""

    def __init__(self, *, fresh: Path | None = None, log: Sequence[str] = (), tracking_dir: str | Path | None = None,
                 resume_with: Mapping[str, Any] | None = None) -> None:
        self.fresh, self.log, self.tracking_dir = fresh, tuple(log), tracking_dir
        self.resume_with = dict(resume_with or {})
        self.trackers: list[Any] = []

    @contextmanager
    def open(self, *, first_round: int) -> Iterator[LiveOutput]:
        """Empty ``fresh`` and open the trackers, logging from round ``first_round`` (0-based) on."""
        from privsilo.simulator.run_dir.tracking import open_trackers

        if self.fresh is not None:
            clear(self.fresh)
        if self.log:
            self.trackers = open_trackers(self.log, Path(self.tracking_dir), first_step=first_round + 1)
        try:
            yield self
        finally:
            for tracker in self.trackers:
                tracker.close()

    def round_done(self, record: RoundRecord) -> None:
        for tracker in self.trackers:
            tracker.write(record.report.round_index + 1, record)
