"""What ``privsilo attack`` produced: one inversion's scores (:class:`AttackRun`) and the whole report
(:class:`AttackReport`), read by the runner that builds them and by the outputs that write them."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from privsilo.simulator.attacks.capture import RoundCapture
from privsilo.simulator.attacks.inversion import Reconstruction
from privsilo.simulator.attacks.metrics import ImageScores
from privsilo.simulator.scenario import AttackConfig, Scenario


@dataclass(frozen=True)
class AttackRun:
    """One inversion (one target silo, one seed) and its scores against the silo's records."""

    target_silo: int
    seed: int
    reconstruction: Reconstruction
    scores: tuple[ImageScores, ...]
    figures: Mapping[str, Any]  # psnr, ssim, mse, label_accuracy (means over paired images), success

    def to_json(self) -> dict[str, Any]:
        rec = self.reconstruction
        final = float(rec.losses[-1]) if rec.losses.size else math.inf
        return {
            "target_silo": self.target_silo,
            "seed": self.seed,
            **self.figures,
            "restarts": rec.restarts,
            "seconds": rec.seconds,
            "final_loss": final if math.isfinite(final) else None,
            "labels": [int(v) for v in rec.labels],
            "images": [
                {"reconstruction": s.reconstructed, "original": s.original, "psnr": s.psnr, "ssim": s.ssim, "mse": s.mse,
                 "label_correct": s.label_correct}
                for s in self.scores
            ],
        }


@dataclass(frozen=True)
class AttackReport:
    """Everything ``privsilo attack`` produced."""

    scenario: Scenario
    capture: RoundCapture
    runs: tuple[AttackRun, ...]
    timing: Mapping[str, float]

    @property
    def config(self) -> AttackConfig:
        return self.scenario.attack

    @property
    def success_rate(self) -> float:
        return float(np.mean([run.figures["success"] for run in self.runs]))

    def summary(self) -> dict[str, float | None]:
        """Means over runs (those with a paired image) and the success rate: what a sweep tabulates."""

        def mean(key: str) -> float | None:
            values = [run.figures[key] for run in self.runs if run.figures[key] is not None]
            return float(np.mean(values)) if values else None

        return {"psnr": mean("psnr"), "ssim": mean("ssim"), "mse": mean("mse"), "label_accuracy": mean("label_accuracy"),
                "success_rate": self.success_rate}

    def headline(self) -> str:
        config, successes = self.config, sum(run.figures["success"] for run in self.runs)
        psnrs = [run.figures["psnr"] for run in self.runs if run.figures["psnr"] is not None]
        median = f"median PSNR {np.median(psnrs):.1f} dB" if psnrs else "no PSNR (no record to compare with)"
        return (f"{self.scenario.name}: {config.method} on silo(s) {', '.join(map(str, config.targets))}, round {config.round}, "
                f"batch {self.scenario.federation.batch_size}: {successes}/{len(self.runs)} successful at "
                f"{config.success_psnr:g} dB ({median})")

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.scenario.to_dict(),
            "round": self.capture.round,
            "participants": list(self.capture.participants),
            "success_psnr": self.config.success_psnr,
            "success_rate": self.success_rate,
            "summary": self.summary(),
            "targets": {
                str(silo): {"record_ids": [int(i) for i in truth.record_ids], "labels": [int(v) for v in truth.labels],
                            "masked": type(self.capture.observations[silo].payload).__name__ == "MaskedVector"}
                for silo, truth in self.capture.truths.items()
            },
            "seeds": [run.to_json() for run in self.runs],
            "timing": dict(self.timing),
        }
