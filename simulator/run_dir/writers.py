"""Writing a run's files: metrics.csv, summary.json, plots and model.pt.

A run writes its files in place, ``summary.json`` last, and finishes in one step (:mod:`privsilo.simulator.run_dir.lifecycle`).
Other results (attacks, audits, sweeps, merges) are written into a staging directory beside the target, which
then takes the target's place (:func:`atomic_directory`).
"""
from __future__ import annotations

import csv
import ctypes
import io
import json
import math
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from privsilo.simulator.run_dir.write_faults import FILE_SYSTEM_ERRNOS, FileSystemFault, writing  # noqa: E402
from privsilo.simulator.runtime.processes import process_alive  # noqa: E402

if TYPE_CHECKING:
    from privsilo.simulator.engine.results import RunResult
    from privsilo.simulator.scenario import Scenario

METRICS_COLUMNS = (
    "round", "participants", "num_participants", "loss", "accuracy", "train_loss", "epsilon", "wall_seconds", "skipped",
    "dropped",
)


@contextmanager
def atomic_directory(target: Path, *, kind: str) -> Iterator[Path]:
    """Yield a staging directory that replaces ``target`` with privsilo's ``kind`` of output (marked as such:
    :func:`privsilo.simulator.run_dir.ownership.write_marker`) only if the block finishes without error, and only where
    ``target`` holds nothing privsilo did not write (else ``ScenarioError``, before the block runs).

    An existing ``target`` is swapped with the staging directory in one ``renameat2(RENAME_EXCHANGE)`` where the
    system has it (else in two renames), so ``target`` never vanishes. Staging directories carry the writer's
    pid; those of writers no longer alive are removed when the next one starts beside them. The directory gets
    the umask's permissions, like any other output."""
    from privsilo.simulator.run_dir.ownership import check_out_directory, check_replaceable, write_marker

    check_out_directory(target.expanduser())
    target = target.expanduser().resolve()
    check_replaceable(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(target)
        staging = _new_staging(target)
    except OSError as error:
        if error.errno not in FILE_SYSTEM_ERRNOS:
            raise
        raise FileSystemFault(target, error) from None
    try:
        yield staging
        write_marker(staging, kind)
        check_replaceable(target)  # again: files may have been put there meanwhile
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError) and error.errno in FILE_SYSTEM_ERRNOS:
            raise FileSystemFault(target, error) from None
        raise
    try:
        if not target.exists():
            staging.rename(target)
        elif _exchange(staging, target):
            shutil.rmtree(staging, ignore_errors=True)  # now holds the old target
        else:
            previous = target.parent / f".{target.name}.previous-{os.getpid()}"
            target.rename(previous)
            staging.rename(target)
            shutil.rmtree(previous, ignore_errors=True)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        if error.errno not in FILE_SYSTEM_ERRNOS:
            raise
        raise FileSystemFault(target, error) from None


def _new_staging(target: Path) -> Path:
    while True:
        staging = target.parent / f".{target.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            staging.mkdir()  # the umask's permissions (tempfile.mkdtemp would give 0700)
            return staging
        except FileExistsError:
            continue


def remove_stale_staging(target: Path) -> None:
    """Remove the staging and previous directories beside ``target`` that writers killed mid-way left."""
    for leftover in (*target.parent.glob(f".{target.name}.partial-*"), *target.parent.glob(f".{target.name}.previous-*")):
        pid = leftover.name.rpartition(".")[2].split("-")[1]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)


RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` atomically (Linux's ``renameat2``); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_cwd = -100  # AT_FDCWD: the paths are absolute
    return renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), RENAME_EXCHANGE) == 0


def write_run(result: RunResult, out_dir: Path, *, invocation: Mapping[str, Any] | None = None) -> None:
    """Write every output file of a run into ``out_dir`` and finish it (:func:`privsilo.simulator.run_dir.lifecycle.finish`);
    ``invocation`` goes into summary.json (see :mod:`privsilo.simulator.run_dir.invocation`)."""
    from privsilo.simulator.run_dir.lifecycle import finish

    finish(Path(out_dir), lambda directory: write_run_files(result, directory, invocation=invocation))


def write_run_files(result: RunResult, directory: Path, *, invocation: Mapping[str, Any] | None = None) -> None:
    """Write a run's files into ``directory``, ``summary.json`` last and whole (it says the rest is there)."""
    from privsilo.simulator.run_dir.ownership import write_marker
    from privsilo.simulator.run_dir.lifecycle import FINISHED_FILE, kill_point, write_atomically

    with writing(directory / "metrics.csv"):
        write_metrics_csv(result, directory / "metrics.csv")
    kill_point("finish:metrics")
    with writing(directory / "metrics.png"):
        plot_metrics(result, directory / "metrics.png")
    if any(record.epsilon is not None for record in result.rounds):  # no epsilon, no privacy plot
        with writing(directory / "privacy.png"):
            plot_privacy(result, directory / "privacy.png")
    scenario = result.scenario
    with writing(directory):  # the mechanism's own plots, named by it
        scenario.mechanism.build().write_plots(result.privacy, directory)
    model = io.BytesIO()  # serialised first: a failed write is then an OSError, not torch's RuntimeError
    torch.save(dict(result.model_state), model)
    with writing(directory / "model.pt"):
        (directory / "model.pt").write_bytes(model.getvalue())
    if result.personalisation is not None:
        from privsilo.simulator.personalisation.outputs import write_personalisation

        with writing(directory):
            write_personalisation(result, directory)
    write_marker(directory, "run")  # lists every file above; summary.json is always privsilo's
    text = json.dumps(summary(result, invocation=invocation), indent=2, allow_nan=False) + "\n"
    write_atomically(directory / FINISHED_FILE, text)


def finite_or_none(value: float | None) -> float | None:
    """``value``, or None where it is missing or not finite (JSON has no infinity or NaN)."""
    return None if value is None or not math.isfinite(value) else value


def summary(result: RunResult, *, invocation: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The content of summary.json; ``invocation`` defaults to a Python API call's (no command line, no overrides)."""
    from privsilo.simulator.run_dir.invocation import invocation as api_invocation

    extras = {} if result.users is None else {"users": dict(result.users)}
    personalised = result.personalisation
    if personalised is not None:  # the history and the hypotheses have their own files
        extras["personalisation"] = _json_safe({k: v for k, v in personalised.items() if k not in ("history", "state_dicts")})
    worker_of = {silo: worker for worker, hosted in enumerate(result.packing) for silo in hosted}
    return {
        "config": result.scenario.to_dict(),
        **extras,
        "final": {key: finite_or_none(v) if isinstance(v, float) else v for key, v in result.final.items()},
        "privacy": _privacy(result),
        "randomness": _randomness(result.scenario),
        "timing": dict(result.timing),
        "placement": [
            {"silo": p.silo_id, "worker": worker_of.get(p.silo_id), "records": p.num_records, "node_id": p.node_id,
             "gpu_ids": list(p.gpu_ids), "device": p.device}
            for p in result.placement
        ],
        "invocation": dict(invocation) if invocation is not None else api_invocation(None, None),
        **_secure_aggregation(result),
        **({} if result.failures is None else {"failures": dict(result.failures)}),
        **({} if result.resumed_from_round is None else {"resumed_from_round": result.resumed_from_round}),
    }


ACCOUNTING_UNDER_FAILURE = (
    "a silo is charged for every round whose update left it (plain or masked), whether or not the update reached "
    "the aggregate (a round abandoned after dropouts still counts); a silo that crashed before uploading released "
    "nothing of that round, is not charged, and comes back with its state (spent budgets, generator) as of its last upload"
)


def _secure_aggregation(result: RunResult) -> dict[str, Any]:
    """With secure aggregation: the parameters and failure bounds of every round size that ran, and the rounds
    that lost more silos than assumed (:func:`privsilo.protocols.secure_aggregation.run_report`)."""
    scenario = result.scenario
    if not scenario.protocol.secure_aggregation or scenario.mechanism.build().brings_protocol():
        return {}
    from privsilo.protocols.secure_aggregation import run_report
    from privsilo.simulator.engine.protocol_setup import secure_aggregation_settings

    settings = secure_aggregation_settings(scenario.protocol, num_silos=scenario.data.silos)
    rounds = [(r.report.round_index, len(r.report.participants), len(r.report.dropped)) for r in result.rounds]
    return {"secure_aggregation": run_report(settings, rounds)}


def _privacy(result: RunResult) -> dict[str, Any]:
    """The accountant's report plus, for a DP guarantee, the data-dependent quantities it treats as public (and,
    where silos failed, the accounting rule under failure)."""
    privacy = _json_safe(dict(result.privacy))
    if privacy.get("guarantee") != "none" and result.failures is not None:
        privacy["under_failure"] = ACCOUNTING_UNDER_FAILURE
    if privacy.get("guarantee") != "none":
        scenario = result.scenario
        mechanism = scenario.mechanism.build()
        privacy["assumed_public"] = list(mechanism.assumed_public())
    return privacy


def _randomness(scenario: Scenario) -> dict[str, Any]:
    """Where the silos' sampling and noise came from, and whether the run can be repeated bit for bit."""
    secure = scenario.secure_rng
    if secure:
        source = "OS entropy, never recorded (secure_rng); partition, model init, client sampling: from the seed"
    else:
        source = "derived from the seed: anyone who knows it can replay every silo's sampling and noise"
    return {"secure_rng": secure, "bit_reproducible": not secure, "silo_sampling_and_noise": source}


def result_line(result: RunResult) -> str:
    """``privsilo run``'s result line: rounds, the task's test metric (accuracy and loss; for regression, where
    accuracy is NaN, the test MSE, which is the loss), then :func:`privacy_line`."""
    final = result.final
    if math.isnan(final["accuracy"]):
        metric = f"test MSE {final['loss']:.4f}"
    else:
        metric = f"test accuracy {final['accuracy']:.4f}, loss {final['loss']:.4f}"
    privacy = privacy_line(result.privacy, mechanism=result.scenario.mechanism.name)
    return f"{result.scenario.name}: {final['rounds']} rounds, {metric}; {privacy}"


def privacy_line(privacy: Mapping[str, Any], *, mechanism: str = "none") -> str:
    """The privacy part of ``privsilo run``'s result line: the mechanism's own line where it has one (local DP,
    d-privacy), else epsilon only where a guarantee covers the run."""
    from privsilo.mechanisms.registry import mechanism_class

    own = mechanism_class(mechanism).privacy_line(privacy)
    if own is not None:
        return own
    eps, guarantee = privacy.get("epsilon"), str(privacy.get("guarantee"))
    if eps is not None:
        line = f"epsilon = {eps:.4g} at delta = {privacy['delta']:g}"
        if privacy.get("accountant") == "pld":
            rdp = privacy.get("epsilon_rdp")
            line += f" (PLD accountant; RDP gives {'inf' if rdp is None else format(rdp, '.4g')})"
    elif guarantee.startswith("not covered"):
        line = f"no epsilon ({guarantee}; the paper's figures are in summary.json privacy.paper_accounting)"
    else:
        line = "no DP guarantee"
    if "never_trained" in privacy:
        line += f"; {privacy['never_trained']} of {privacy['records']} records never trained"
    return line


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return finite_or_none(value)
    return value


def write_metrics_csv(result: RunResult, path: Path) -> None:
    """One row per round; participants are listed as silo ids joined by ';'; ``skipped`` is ``true`` for a round
    with fewer sampled silos than ``protocol.min_participants`` (no participants, no training) or one abandoned
    after dropouts (the model unchanged); ``dropped`` lists the participants whose worker crashed in the round
    (every silo of a crashed worker that took part)."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(METRICS_COLUMNS)
        for record in result.rounds:
            report = record.report
            writer.writerow(
                [
                    report.round_index + 1,
                    ";".join(str(i) for i in report.participants),
                    len(report.participants),
                    repr(report.loss),
                    repr(report.accuracy),
                    "" if math.isnan(report.train_loss) else repr(report.train_loss),
                    "" if record.epsilon is None else repr(record.epsilon),
                    f"{record.wall_seconds:.4f}",
                    "true" if report.skipped else "false",
                    ";".join(str(i) for i in report.dropped),
                ]
            )


def plot_metrics(result: RunResult, path: Path) -> None:
    fig = metrics_figure(result)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def metrics_figure(result: RunResult) -> plt.Figure:
    """Loss (test, and mean local train loss where the mechanism reveals it) and accuracy over rounds."""
    rounds = [r.report.round_index + 1 for r in result.rounds]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax_loss.plot(rounds, [r.report.loss for r in result.rounds], marker="o", label="test loss")
    train_loss = [r.report.train_loss for r in result.rounds]
    if not all(math.isnan(loss) for loss in train_loss):  # DP mechanisms do not reveal it
        ax_loss.plot(rounds, train_loss, marker=".", label="mean local train loss")
    ax_loss.set(xlabel="round", ylabel="loss", title="Loss")
    ax_loss.legend()
    ax_acc.plot(rounds, [r.report.accuracy for r in result.rounds], marker="o", color="tab:green")
    ax_acc.set(xlabel="round", ylabel="test accuracy", title="Accuracy", ylim=(0, 1))
    fig.suptitle(f"{result.scenario.name}: {result.scenario.mechanism.name}")
    fig.subplots_adjust(left=0.07, right=0.985, bottom=0.155, top=0.82, wspace=0.16)  # what tight_layout gives, 0.4 s sooner
    return fig


def plot_privacy(result: RunResult, path: Path) -> None:
    """Epsilon spent over rounds (only for runs with a DP guarantee: rounds without one are left out)."""
    rounds = [r.report.round_index + 1 for r in result.rounds]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    delta = result.privacy.get("delta")
    ax.plot(rounds, [math.nan if r.epsilon is None else r.epsilon for r in result.rounds], marker="o", color="tab:red")
    ax.set(xlabel="round", ylabel="epsilon spent", title=f"Privacy spent (delta = {delta:g})")
    fig.subplots_adjust(left=0.12, right=0.975, bottom=0.155, top=0.905)
    fig.savefig(path, dpi=110)
    plt.close(fig)
