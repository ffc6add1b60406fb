"""``privsilo attack``: capture the attacked round, run every (target silo, seed) inversion as a Ray task, score
the reconstructions against the ground truth and write ``attack.json``, ``attack.png`` and ``loss.png``.

The tasks receive an ``Observation`` and a seed, nothing else; the ground
truth stays in this process and only meets the reconstructions when they are scored.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import ray
import torch
from tqdm.auto import tqdm

from privsilo.simulator.attacks.capture import GroundTruth, capture_round
from privsilo.simulator.attacks.inversion import InversionSettings, Reconstruction, invert, snapshot_steps
from privsilo.simulator.attacks.metrics import score_images, summarise_scores, to_pixels
from privsilo.simulator.attacks.observation import Observation
from privsilo.simulator.attacks.results import AttackReport, AttackRun
from privsilo.simulator.runtime.cluster import ActorDemand, Capacity, ray_session
from privsilo.simulator.data import DATASETS
from privsilo.simulator.engine import resources_needed
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import AttackConfig, Scenario, resolve_scenario, with_attack_block
from privsilo.simulator.runtime.shipping import code_to_ship
from privsilo.simulator.runtime.pool.registry import pool_for
from privsilo.simulator.runtime.pool.lease import WorkerPool


def attack(
    scenario: Scenario | Mapping[str, Any] | str | Path,
    *,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
    address: str | None = None,
    progress: bool = False,
) -> AttackReport:
    """Run a scenario's ``attack`` block (defaults where it has none); write the outputs to ``out_dir`` if given."""
    scenario = with_attack_block(resolve_scenario(scenario, overrides), address=address)
    def demand_for(capacity: Capacity) -> ActorDemand:
        return resources_needed(scenario, capacity)

    with ray_session(address=scenario.ray.address, demand_for=demand_for, connect_timeout=scenario.ray.connect_timeout,
                     ship=code_to_ship([scenario])):
        _check_task_cpus(scenario.attack)
        started = time.perf_counter()
        capture = capture_round(scenario)
        captured = time.perf_counter()
        reconstructions = _run_inversions(capture.observations, config=scenario.attack, pool=pool_for(scenario.ray), progress=progress)
        finished = time.perf_counter()
    pixel_scale = DATASETS[scenario.data.dataset].pixel_scale
    runs = tuple(_score(target, seed, rec, capture.truths[target], pixel_scale=pixel_scale, success_psnr=scenario.attack.success_psnr)
                 for (target, seed), rec in reconstructions.items())
    timing = {"capture_seconds": captured - started, "attack_seconds": finished - captured,
              "seconds_per_attack_median": float(np.median([run.reconstruction.seconds for run in runs]))}
    report = AttackReport(scenario=scenario, capture=capture, runs=runs, timing=timing)
    if out_dir is not None:
        from privsilo.simulator.attacks.outputs import write_attack

        write_attack(report, Path(out_dir))
    return report


def _check_task_cpus(config: AttackConfig) -> None:
    available = ray.cluster_resources().get("CPU", 0.0)
    if config.num_cpus > available:
        raise ScenarioError("attack.num_cpus", config.num_cpus, f"a task would never start: Ray offers {available:g} CPUs")


def invert_task(observation: Observation, settings: InversionSettings, seed: int, num_cpus: float) -> Reconstruction:
    """One inversion in a Ray task: only the observation, the settings and the attack's own seed come in."""
    torch.set_num_threads(max(1, int(num_cpus)))
    return invert(observation, settings=settings, generator=torch.Generator().manual_seed(seed))


def _run_inversions(observations: Mapping[int, Observation], *, config: AttackConfig, pool: WorkerPool, progress: bool) -> dict[tuple[int, int], Reconstruction]:
    pool.stop_idle()  # the captured run's warm actors would otherwise hold the CPUs the tasks wait for
    settings = InversionSettings(method=config.method, iterations=config.iterations, line_search=config.line_search,
                                 snapshot_steps=snapshot_steps(config.iterations))
    task = ray.remote(num_cpus=config.num_cpus)(invert_task)
    shared = {silo: ray.put(observation) for silo, observation in observations.items()}
    refs = {task.remote(shared[silo], settings, seed, config.num_cpus): (silo, seed) for silo in config.targets for seed in config.seed_list}
    results: dict[tuple[int, int], Reconstruction] = {}
    pending = list(refs)
    with tqdm(total=len(refs), desc=f"{config.method} attacks", unit="attack", disable=not progress) as bar:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            results[refs[done[0]]] = ray.get(done[0])
            bar.update(1)
    return {key: results[key] for key in refs.values()}


def _score(target: int, seed: int, rec: Reconstruction, truth: GroundTruth, *, pixel_scale: tuple[float, float], success_psnr: float) -> AttackRun:
    scores = score_images(to_pixels(rec.inputs, pixel_scale=pixel_scale), rec.labels,
                          originals=to_pixels(truth.features, pixel_scale=pixel_scale), original_labels=truth.labels)
    return AttackRun(target_silo=target, seed=seed, reconstruction=rec, scores=tuple(scores),
                     figures=summarise_scores(scores, success_psnr=success_psnr))


__all__ = ["AttackReport", "AttackRun", "attack", "invert_task"]
