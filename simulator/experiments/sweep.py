"""Grid sweeps: run the cartesian product of a grid file's axes x seeds and tabulate the results.

A grid file names a base scenario (a path relative to the grid file), the seeds and the axes::

    name: heart_disease_rpdp
    base: heart_disease_three_levels.yaml
    seeds: [0, 1, 2]
    axes:
      mechanism.budgets: {ThreeLevels: {distribution: three_levels}, BoundedPareto: {distribution: bounded_pareto}}
      mechanism.variant: {rPDP: rpdp, Dropout: dropout}

Each axis maps a dotted scenario key to ``{label: value}``; the value replaces the key in the base scenario
(after the ``--set`` overrides). An axis may instead be a free name (``defence``) whose labels each map several
dotted keys to values (``{none: {mechanism.name: none}, secagg: {protocol.secure_aggregation: true}}``).
Every combination is validated before the first run, all runs share one Ray session, and the output directory
(``runs.csv``, ``table.csv``, ``table.md``, ``comparison.png``, and the mechanisms' own sweep plots: the base
mechanism's ``sweep_plotter``, e.g. rPDP's ``epsilon_curve.png`` or uldp's per-round accuracy and epsilon, and
``plot_sweep_records`` of the first run whose mechanism keeps ``sweep_records``, e.g. rPDP's
``budget_vs_spent.png``) is written atomically. When the scenarios carry an ``attack`` block, every run is also
attacked ([`privsilo.simulator.attacks.runner.attack`][privsilo.simulator.attacks.runner.attack] on the same scenario) and the tables get the attack's PSNR,
SSIM and success rate, with ``attack_vs_accuracy.png``. Finished runs are journaled
(``privsilo.simulator.experiments.journal``), so an interrupted sweep resumes when run again.

A regression task (``synthetic_linear``) has no accuracy: its tables and plots give the test MSE (the test loss)
instead. Runs of a personalised mechanism (``Mechanism.personalised``, e.g. dprivacy) keep their whole output
directory under ``runs/<labels>-s<seed>``, and the table and plots are the personalised ones
(``privsilo.simulator.experiments.personalised_report``: personalised accuracy or MSE, cluster recovery, leakage).
"""
from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from privsilo.mechanisms.base import Mechanism
from privsilo.simulator.runtime.cluster import ActorDemand, Capacity, ray_session
from privsilo.simulator.errors import PrivsiloError, ScenarioError
from privsilo.simulator.run_dir.ownership import RUNS_ROOT, new_directory, removed_if_unused
from privsilo.simulator.scenario import Scenario, apply_overrides, load_scenario_file, validate_scenario
from privsilo.simulator.runtime.shipping import code_to_ship
from privsilo.simulator.experiments.journal import SweepJournal, latest_unfinished, scenario_key
from privsilo.simulator.experiments.results import SweepRun
from privsilo.simulator.run_dir.tracking import TENSORBOARD_DIR

GRID_KEYS = ("name", "base", "seeds", "axes")
RUN_COLUMNS = ("seed", "accuracy", "loss", "epsilon", "max_spent_over_budget", "seconds")
TABLE_COLUMNS = ("accuracy_mean", "accuracy_std", "loss_mean", "loss_std", "seeds", "epsilon_mean")
# Only in sweeps whose scenarios carry an attack block: after RUN_COLUMNS / TABLE_COLUMNS.
ATTACK_RUN_COLUMNS = ("attack_psnr", "attack_ssim", "attack_success_rate")
ATTACK_TABLE_COLUMNS = ("attack_psnr_mean", "attack_ssim_mean", "attack_success_rate_mean")


@dataclass(frozen=True)
class Grid:
    """A validated grid file: base scenario (raw, overrides applied), seeds and ``{axis key: {label: value}}``."""

    name: str
    base: dict[str, Any]
    seeds: tuple[int, ...]
    axes: dict[str, dict[str, Any]]

    def combinations(self) -> Iterator[dict[str, str]]:
        """Every ``{axis key: label}`` of the cartesian product, in the grid file's order."""
        for labels in itertools.product(*(list(values) for values in self.axes.values())):
            yield dict(zip(self.axes, labels))

    def scenario(self, labels: Mapping[str, str], seed: int) -> Scenario:
        """The validated scenario of one combination and seed."""
        assignments = []
        for key, label in labels.items():
            value = self.axes[key][label]
            settings = value.items() if _is_settings_axis(key) else [(key, value)]
            assignments += [f"{path}={json.dumps(setting)}" for path, setting in settings]
        raw = apply_overrides(self.base, assignments)
        raw.update(seed=seed, name=f"{self.name}-{'-'.join(labels.values())}-s{seed}")
        try:
            return validate_scenario(raw)
        except ScenarioError as exc:
            shown = ", ".join(f"{key}={label}" for key, label in labels.items())
            raise ScenarioError(exc.field, exc.value, f"{exc.allowed} (grid combination {shown})") from None


@dataclass(frozen=True)
class SweepResult:
    """All runs of a sweep and the per-combination table (rows of axis labels + ``TABLE_COLUMNS``)."""

    grid: Grid
    runs: tuple[SweepRun, ...]
    table: tuple[dict[str, Any], ...]
    out_dir: Path
    resumed: int = 0

    def headline(self) -> str:
        """``name: 4 runs (2 combinations x 1 seed)``, with the runs taken from an unfinished sweep's journal."""
        resumed = f"; {self.resumed} taken from the unfinished sweep's journal" if self.resumed else ""
        shape = f"{count(len(self.table), 'combination')} x {count(len(self.grid.seeds), 'seed')}"
        return f"{self.grid.name}: {count(len(self.runs), 'run')} ({shape}{resumed})"


def count(number: int, noun: str) -> str:
    """``1 seed``, ``3 seeds``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def run_label(labels: Mapping[str, str], seed: int) -> str:
    """How a run is named in progress bars and plot titles: ``ThreeLevels / rPDP, seed 0``."""
    return f"{' / '.join(labels.values())}, seed {seed}"


def load_grid(
    path: str | Path, *, seeds: int | Sequence[int] | None = None, overrides: Sequence[str] = (), only: Sequence[str] = ()
) -> Grid:
    """Read and check a grid file; ``seeds`` (a count N -> 0..N-1, or a list) replaces the file's seeds;
    ``only`` entries ``"axis.key=Label1,Label2"`` keep just those labels of an axis."""
    path = Path(path)
    raw = load_scenario_file(path)
    unknown = sorted(set(raw) - set(GRID_KEYS))
    if unknown:
        raise ScenarioError(f"grid.{unknown[0]}", raw[unknown[0]], f"unknown key; allowed keys here: {', '.join(GRID_KEYS)}")
    base = raw.get("base")
    if not isinstance(base, str) or not (path.parent / base).is_file():
        raise ScenarioError("grid.base", base, f"must name an existing scenario file relative to {path.parent}")
    axes = raw.get("axes")
    if not isinstance(axes, dict) or not axes:
        raise ScenarioError("grid.axes", axes, "must map at least one dotted scenario key to {label: value}")
    for key, values in axes.items():
        if not isinstance(values, dict) or not values:
            raise ScenarioError(f"grid.axes.{key}", values, "must be a non-empty mapping {label: value}")
    chosen = _seeds(raw.get("seeds", [0]), "grid.seeds") if seeds is None else _seeds(seeds, "--seeds")
    base_raw = apply_overrides(load_scenario_file(path.parent / base), list(overrides))
    grid = Grid(name=str(raw.get("name", path.stem)), base=base_raw, seeds=chosen, axes={str(k): {str(label): value for label, value in v.items()} for k, v in axes.items()})
    _check_axis_keys(grid)
    for selection in only:
        grid = dataclasses.replace(grid, axes=_select_labels(grid, selection))
    return grid


def _select_labels(grid: Grid, selection: str) -> dict[str, dict[str, Any]]:
    """The grid's axes after one ``--only axis.key=Label1,Label2``."""
    key, _, text = selection.partition("=")
    if key not in grid.axes:
        raise ScenarioError("--only", selection, f"must be AXIS=LABEL[,LABEL...] with AXIS one of {', '.join(grid.axes)}")
    labels = [label.strip() for label in text.split(",") if label.strip()]
    unknown = [label for label in labels if label not in grid.axes[key]]
    if not labels or unknown:
        raise ScenarioError("--only", selection, f"labels of {key} are {', '.join(grid.axes[key])}")
    return {**grid.axes, key: {label: grid.axes[key][label] for label in labels}}


def _seeds(value: Any, field: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ScenarioError(field, value, "a seed count must be >= 1")
        return tuple(range(value))
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(s, int) and s >= 0 for s in value):
        raise ScenarioError(field, value, "must be a non-empty list of integers >= 0 (or a count)")
    if len(set(value)) != len(value):
        raise ScenarioError(field, value, "seeds must not repeat")
    return tuple(value)


def _is_settings_axis(key: str) -> bool:
    """An axis named freely (not a path into a scenario block), whose labels each set several keys."""
    return key.split(".")[0] not in Scenario.model_fields


def _check_axis_keys(grid: Grid) -> None:
    """An axis must change an existing block's key (a settings axis: every label's keys must); validation
    catches unknown leaf keys."""
    blocks = set(Scenario.model_fields) - {"name", "seed"}
    allowed = ", ".join(sorted(blocks))

    def check(path: Any, field: str) -> None:
        if not isinstance(path, str) or path.split(".")[0] not in blocks:
            raise ScenarioError(field, path, f"axis keys are dotted paths into the blocks {allowed}, or a name whose "
                                             "labels each map such paths to values")

    for key, values in grid.axes.items():
        if not _is_settings_axis(key):
            check(key, f"grid.axes.{key}")
            continue
        for label, settings in values.items():
            if not isinstance(settings, dict) or not settings:
                check(key, f"grid.axes.{key}")
            for path in settings:
                check(path, f"grid.axes.{key}.{label}")


def sweep(
    grid_path: str | Path,
    *,
    out_dir: str | Path | None = None,
    seeds: int | Sequence[int] | None = None,
    overrides: Sequence[str] | None = None,
    only: Sequence[str] = (),
    address: str | None = None,
    progress: bool = False,
    log: Sequence[str] = (),
) -> SweepResult:
    """Run every combination x seed of a grid file and write the tables and plots to ``out_dir`` (default: the
    latest unfinished sweep of the grid in ``runs/<grid name>/``, else a new ``runs/<grid name>/<UTC time>``,
    see ``privsilo.simulator.run_dir.ownership``). ``log``: trackers that get each run's rounds as they end, one TensorBoard
    run per grid run (``run_name``) in the journal's ``tensorboard/`` while the sweep runs, then in
    ``out_dir/tensorboard/``."""
    grid = load_grid(grid_path, seeds=seeds, overrides=overrides or (), only=only)
    jobs = [(labels, seed, grid.scenario(labels, seed)) for labels in grid.combinations() for seed in grid.seeds]
    if out_dir is not None:
        return _sweep_into(grid, jobs, Path(out_dir), address=address, progress=progress, log=log)
    parent = RUNS_ROOT / grid.name  # resume the latest unfinished sweep of this grid, else start a new directory
    out = latest_unfinished(parent) or new_directory(parent)
    with removed_if_unused(out):
        return _sweep_into(grid, jobs, out, address=address, progress=progress, log=log)


def _sweep_into(grid: Grid, jobs: list[tuple[dict[str, str], int, Scenario]], out: Path, *, address: str | None,
                progress: bool, log: Sequence[str] = ()) -> SweepResult:
    """Run the jobs (labels, seed, scenario) that ``out``'s journal lacks and write the outputs to ``out``."""
    from privsilo.simulator.run_dir.checkpoint import has_checkpoint
    from privsilo.simulator.engine import resources_needed, run

    journal = SweepJournal(out)
    finished = journal.load_runs()
    keys = [scenario_key(scenario) for _, _, scenario in jobs]
    # the first run whose mechanism keeps per-record arrays for its sweep plots (rPDP's budget vs spent)
    keeping = [(key, run_label(labels, seed), scenario.mechanism.plugin, keep) for key, (labels, seed, scenario) in zip(keys, jobs)
               if (keep := scenario.mechanism.build().sweep_records()) is not None]
    reference, reference_label, reference_mechanism, keep_records = keeping[0] if keeping else (None, "", None, None)
    pending = [(key, job) for key, job in zip(keys, jobs) if key not in finished]
    personalised = all(scenario.mechanism.plugin.personalised for _, _, scenario in jobs)
    if pending:
        def demand_for(capacity: Capacity) -> ActorDemand:
            return ActorDemand.covering(resources_needed(scenario, capacity) for _, (_, _, scenario) in pending)

        session = ray_session(address=address or jobs[0][2].ray.address, demand_for=demand_for, connect_timeout=jobs[0][2].ray.connect_timeout,
                              ship=code_to_ship(scenario for _, (_, _, scenario) in pending))
        with session:
            bar = tqdm(pending, desc=grid.name, unit="run", disable=not progress, total=len(jobs), initial=len(jobs) - len(pending))
            for key, (labels, seed, scenario) in bar:
                bar.set_postfix_str(run_label(labels, seed))
                kept = journal.run_directory(run_name(labels, seed)) if personalised else None
                checkpoints = journal.checkpoint_directory(key)  # an interrupted run continues from its last round
                result = run(scenario, out_dir=kept, address=address, checkpoint_dir=checkpoints, resume=has_checkpoint(checkpoints),
                             log=log, tracking_dir=journal.tracking_directory(run_name(labels, seed)))
                if key == reference:
                    journal.save_records(key, keep_records(rebuild_accountant(result)))
                done = _sweep_run(labels, seed, result, attacked=_attack_summary(scenario, address=address))
                journal.add_run(key, done)
                finished[key] = dataclasses.asdict(done)
    # Labels come from the grid as it is now (a renamed label keeps its journaled results).
    runs = tuple(SweepRun(**{**finished[key], "labels": labels, "seed": seed}) for key, (labels, seed, _) in zip(keys, jobs))
    table = tuple(summarise(runs, axes=list(grid.axes)))
    swept = SweepResult(grid=grid, runs=runs, table=table, out_dir=out, resumed=len(jobs) - len(pending))
    records = None if reference is None else journal.load_records(reference)
    kept = journal.run_directory("") if personalised else None
    write_sweep_outputs(swept, records=None if records is None else (reference_mechanism, reference_label, records), run_directories=kept,
                        tracking=journal.tracking_directory(""))
    journal.remove()
    return swept


def run_name(labels: Mapping[str, str], seed: int) -> str:
    """The directory of a kept run: ``k2-nu5-s0``."""
    return f"{'-'.join(labels.values())}-s{seed}"


def write_sweep_outputs(
    swept: SweepResult, *, records: tuple[type[Mechanism], str, Mapping[str, np.ndarray]] | None, run_directories: Path | None = None,
    tracking: Path | None = None,
) -> None:
    """Write the sweep's tables and plots into ``swept.out_dir`` atomically.

    Given ``run_directories`` (where the personalised runs' output directories are, named by ``run_name``):
    they are copied to ``runs/`` and the table and its plots are the personalised report's. Given ``records``
    (the mechanism, the label and the per-record arrays its ``sweep_records`` kept of a run), the plots its
    ``plot_sweep_records`` draws (rPDP's ``budget_vs_spent.png``); then whatever the base mechanism's
    ``sweep_plotter`` draws (rPDP's ``epsilon_curve.png``). ``tracking``: the runs' tracker logs (``--log``),
    copied to ``tensorboard/``.
    """
    from privsilo.simulator.run_dir.writers import atomic_directory
    grid, axes = swept.grid, list(swept.grid.axes)
    with atomic_directory(swept.out_dir, kind="sweep") as staging:
        write_tables(staging, runs=swept.runs, table=swept.table, axes=axes, title=grid.name, own_table=run_directories is None)
        if run_directories is not None:
            _write_personalised_report(swept, run_directories=run_directories, staging=staging)
        base = validate_scenario(grid.base)
        if records is not None:
            mechanism, label, arrays = records
            mechanism.plot_sweep_records(arrays, run=label, out_dir=staging)
        plotter = base.mechanism.plugin.sweep_plotter()
        if plotter is not None:
            plotter(swept.runs, axes=axes, title=grid.name, out_dir=staging, base=base)
        if tracking is not None and tracking.is_dir():
            shutil.copytree(tracking, staging / TENSORBOARD_DIR)


def _write_personalised_report(swept: SweepResult, *, run_directories: Path, staging: Path) -> None:
    """``runs/`` (every run's output directory), then the personalised table and plots drawn from it."""
    from privsilo.simulator.experiments.personalised_report import write_report
    from privsilo.simulator.experiments.results import GridRun

    kept = []
    for item in swept.runs:
        name = run_name(item.labels, item.seed)
        shutil.copytree(run_directories / name, staging / "runs" / name)
        kept.append(GridRun(item.labels, item.seed, staging / "runs" / name))
    write_report(kept, axes=list(swept.grid.axes), out_dir=staging, title=swept.grid.name)


def _attack_summary(scenario: Scenario, *, address: str | None) -> dict[str, float | None] | None:
    """The scenario's attack summarised, or None without a block: a second federation run up to the attacked
    round, on the same seed, so on the same rounds as the sweep's run (under ``secure_rng`` a fresh draw of them)."""
    if scenario.attack is None:
        return None
    from privsilo.simulator.attacks.runner import attack

    return attack(scenario, address=address).summary()


def _sweep_run(labels: dict[str, str], seed: int, result: Any, *, attacked: Mapping[str, float | None] | None = None) -> SweepRun:
    privacy = result.privacy
    attacked = attacked or {}
    return SweepRun(
        labels=labels,
        seed=seed,
        accuracy=float(result.final["accuracy"]),
        loss=float(result.final["loss"]),
        epsilon=privacy.get("epsilon"),
        max_spent_over_budget=privacy.get("max_spent_over_budget"),
        seconds=float(result.timing["total_seconds"]),
        accuracy_per_round=tuple(float(r.report.accuracy) for r in result.rounds),
        epsilon_per_round=tuple(r.epsilon for r in result.rounds),
        loss_per_round=tuple(float(r.report.loss) for r in result.rounds),
        attack_psnr=attacked.get("psnr"),
        attack_ssim=attacked.get("ssim"),
        attack_success_rate=attacked.get("success_rate"),
    )


def _attacked(runs: Sequence[SweepRun]) -> bool:
    return any(item.attack_success_rate is not None for item in runs)


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def regression(runs: Sequence[SweepRun]) -> bool:
    """A regression task's sweep: no run has an accuracy (NaN), so tables and plots give the test MSE (the loss)."""
    return bool(runs) and all(math.isnan(item.accuracy) for item in runs)


def summarise(runs: Sequence[SweepRun], *, axes: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Per axis combination (in first-seen order): mean and std (ddof 0; None with one seed) of accuracy (None
    for a regression task) and loss, seed count, mean epsilon; in an attacked sweep also the means of the
    attack's PSNR, SSIM and success rate."""
    groups: dict[tuple[str, ...], list[SweepRun]] = {}
    for item in runs:
        groups.setdefault(tuple(item.labels[a] for a in axes), []).append(item)
    attacked = _attacked(runs)
    for labels, members in groups.items():
        row = {**dict(zip(axes, labels))}
        for metric in ("accuracy", "loss"):
            values = np.array([getattr(m, metric) for m in members])
            present = not np.isnan(values).all()
            row[f"{metric}_mean"] = float(values.mean()) if present else None
            row[f"{metric}_std"] = float(values.std()) if present and values.size > 1 else None
        row.update(seeds=len(members), epsilon_mean=_mean([m.epsilon for m in members]))
        if attacked:
            row.update({f"{column}_mean": _mean([getattr(m, column) for m in members]) for column in ATTACK_RUN_COLUMNS})
        yield row


def write_tables(staging: Path, *, runs: Sequence[SweepRun], table: Sequence[Mapping[str, Any]], axes: Sequence[str], title: str,
                 own_table: bool = True) -> None:
    """``runs.csv``, ``table.csv`` and ``table.md`` (not with ``own_table=False``: a personalised sweep writes its
    own) and ``comparison.png``; with per-round results (a sweep's own runs, not merged ones) also ``curves.csv``
    and ``accuracy_per_round.png`` (``mse_per_round.png`` for a regression task), and for an attacked sweep
    ``attack_vs_accuracy.png``."""
    from privsilo.simulator.experiments.plots import plot_accuracy_per_round, plot_attack_vs_accuracy, plot_comparison

    metric = "loss" if regression(runs) else "accuracy"
    write_runs_csv(runs, axes=axes, path=staging / "runs.csv")
    if own_table:
        write_table(table, axes=axes, csv_path=staging / "table.csv", md_path=staging / "table.md")
    num_seeds = len({item.seed for item in runs})
    plot_comparison(table, axes=axes, num_seeds=num_seeds, title=title, path=staging / "comparison.png", metric=metric)
    if all(getattr(item, f"{metric}_per_round") for item in runs):
        write_curves_csv(runs, axes=axes, path=staging / "curves.csv", metric=metric)
        name = "mse_per_round.png" if metric == "loss" else "accuracy_per_round.png"
        plot_accuracy_per_round(runs, axes=axes, num_seeds=num_seeds, title=title, path=staging / name, metric=metric)
    if _attacked(runs):
        plot_attack_vs_accuracy(table, axes=axes, title=title, path=staging / "attack_vs_accuracy.png")


def write_curves_csv(runs: Sequence[SweepRun], *, axes: Sequence[str], path: Path, metric: str = "accuracy") -> None:
    """``curves.csv``: one row per run and round (axis labels, ``seed``, ``round`` 1-based, then ``accuracy``, or
    ``loss`` (the test MSE) for a regression task)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*axes, "seed", "round", metric])
        for item in runs:
            for round_number, value in enumerate(getattr(item, f"{metric}_per_round"), start=1):
                writer.writerow([*(item.labels[a] for a in axes), item.seed, round_number, repr(value)])


def write_runs_csv(runs: Sequence[SweepRun], *, axes: Sequence[str], path: Path) -> None:
    """``runs.csv``: one row per run (axis labels, then ``RUN_COLUMNS``, then ``ATTACK_RUN_COLUMNS`` in an attacked
    sweep; empty cells for no DP guarantee, no image to score or no accuracy (a regression task))."""
    columns = (*RUN_COLUMNS, *(ATTACK_RUN_COLUMNS if _attacked(runs) else ()))
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*axes, *columns])
        for item in runs:
            values = [getattr(item, column) for column in columns]
            writer.writerow([*(item.labels[a] for a in axes), *("" if v is None or v != v else repr(v) for v in values)])


def read_runs_csv(path: Path) -> tuple[list[str], list[SweepRun]]:
    """The axes and runs of a sweep's ``runs.csv`` (empty cells -> None)."""
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    header = tuple(rows[0]) if rows else ()
    columns = (*RUN_COLUMNS, *ATTACK_RUN_COLUMNS) if header[-len(ATTACK_RUN_COLUMNS):] == ATTACK_RUN_COLUMNS else RUN_COLUMNS
    if not rows or header[-len(columns):] != columns or len(header) <= len(columns):
        raise PrivsiloError(f"merge: {path} is not a privsilo sweep runs.csv (expected axis columns, then {', '.join(RUN_COLUMNS)})")
    axes = rows[0][: -len(columns)]
    runs = []
    for row in rows[1:]:
        labels, values = row[: len(axes)], row[len(axes):]
        fields = dict(zip(columns, values))
        number = {k: None if v == "" else float(v) for k, v in fields.items() if k != "seed"}
        number["accuracy"] = math.nan if number["accuracy"] is None else number["accuracy"]  # a regression task's
        runs.append(SweepRun(labels=dict(zip(axes, labels)), seed=int(fields["seed"]), **number))
    return axes, runs


def write_table(table: Sequence[Mapping[str, Any]], *, axes: Sequence[str], csv_path: Path, md_path: Path) -> None:
    """``table.csv`` (full precision; empty cells for what a run does not have) and ``table.md`` (accuracy, or the
    test MSE of a regression task, as mean ± std, 4 decimals; no spread where a combination has one seed; attack
    PSNR in dB and success rate where the sweep attacked)."""
    attacked = bool(table) and ATTACK_TABLE_COLUMNS[0] in table[0]
    columns = (*TABLE_COLUMNS, *(ATTACK_TABLE_COLUMNS if attacked else ()))
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*axes, *columns])
        for row in table:
            writer.writerow(["" if row[c] is None else row[c] for c in (*axes, *columns)])
    metric, heading = ("loss", "test MSE") if all(row["accuracy_mean"] is None for row in table) else ("accuracy", "accuracy")
    spread = any(row[f"{metric}_std"] is not None for row in table)
    extra = ["attack PSNR (dB)", "attack SSIM", "attack success"] if attacked else []
    lines = [
        "| " + " | ".join([*axes, f"{heading} (mean ± std)" if spread else heading, "seeds", "epsilon (mean)", *extra]) + " |",
        "|" + "---|" * (len(axes) + 3 + len(extra)),
    ]
    for row in table:
        eps = "-" if row["epsilon_mean"] is None or not math.isfinite(row["epsilon_mean"]) else f"{row['epsilon_mean']:.3g}"
        mean, std = row[f"{metric}_mean"], row[f"{metric}_std"]
        result = ("-" if mean is None else f"{mean:.4f}") + ("" if std is None else f" ± {std:.4f}")
        cells = [_cell(row[c], spec) for c, spec in zip(ATTACK_TABLE_COLUMNS, (".1f", ".3f", ".0%"))] if attacked else []
        lines.append("| " + " | ".join([*(row[a] for a in axes), result, str(row["seeds"]), eps, *cells]) + " |")
    md_path.write_text("\n".join(lines) + "\n")


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def rebuild_accountant(result: Any) -> Any:
    """The run's privacy accountant, re-fed with the silos' start-up events and every round report's events."""
    from privsilo.simulator.engine import record_events

    scenario = result.scenario
    accountant = scenario.mechanism.build().accountant()
    accountant.enrol(info.silo_id for info in result.placement)
    record_events(accountant, {info.silo_id: info.events for info in result.placement})
    for record in result.rounds:
        record_events(accountant, record.report.events)
    return accountant


__all__ = ["Grid", "SweepResult", "SweepRun", "load_grid", "read_runs_csv", "rebuild_accountant", "regression", "summarise", "sweep"]
