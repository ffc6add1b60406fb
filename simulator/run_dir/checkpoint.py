"""Checkpoints of a run in progress, and resuming from them (``privsilo resume DIR``).

After every ``checkpoint.every`` rounds the driver writes ``DIR/checkpoint.pkl``: a JSON header (the scenario,
privsilo's version, the payload's length and SHA-256, and the ``--set`` overrides and ``--log`` trackers the run
was started with), then a pickle of the rounds completed, the server's state (global model, generators, mechanism, protocol, optimiser), every silo's
snapshot (model, generator, mechanism state such as rPDP's spent budgets, protocol keys), the accountant, the
metrics so far and the failure counts. The file is written beside its final name, flushed to disk and renamed
over it, so it is always a whole checkpoint; it starts with a header holding the SHA-256 of the rest, and a file
whose digest or length does not match is never loaded. The digest detects corruption, not tampering: loading a
checkpoint unpickles it, so load only checkpoints you wrote. It holds every silo's generator state, which replays the
silos' noise: it is written readable by its owner only (mode 0600) and is removed
when the run finishes (:mod:`privsilo.simulator.run_dir.lifecycle`).
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any, Mapping

from privsilo.simulator.errors import PrivsiloError, ScenarioError
from privsilo.simulator.run_dir.write_faults import writing
from privsilo.simulator.run_dir.invocation import privsilo_version
from privsilo.simulator.runtime.processes import process_alive

CHECKPOINT_FILE = "checkpoint.pkl"
MAGIC = b"privsilo checkpoint v1\n"
# Keys of the scenario that may change on resume: where Ray runs, and how often to checkpoint.
MAY_DIFFER = ("ray", "checkpoint")


class CheckpointError(PrivsiloError):
    """A checkpoint that cannot be used: missing, corrupt, half-written, or from another scenario or version."""


def checkpoint_path(directory: Path) -> Path:
    return Path(directory) / CHECKPOINT_FILE


def write_checkpoint(directory: Path, state: Mapping[str, Any], *, scenario: Mapping[str, Any],
                     resume_with: Mapping[str, Any] | None = None) -> None:
    """Write ``state`` atomically to ``directory/checkpoint.pkl``, owner-readable only; its header holds the
    scenario, privsilo's version, the payload's length and SHA-256 (checked before anything is unpickled) and
    ``resume_with``: what resuming needs besides the scenario (``overrides``, ``log`` and the settings as given, ``scenario``; see :func:`read_header`)."""
    directory = Path(directory)
    payload = pickle.dumps(dict(state), protocol=pickle.HIGHEST_PROTOCOL)
    header = {"version": privsilo_version(), "scenario": dict(scenario), "bytes": len(payload),
              "sha256": hashlib.sha256(payload).hexdigest(), "resume_with": dict(resume_with or {})}
    final = checkpoint_path(directory)
    partial = _partial(directory, CHECKPOINT_FILE, os.getpid())
    with writing(final, partial=partial):  # a failed write leaves the last good checkpoint and no partial file
        directory.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(directory, CHECKPOINT_FILE)
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(MAGIC + json.dumps(header).encode() + b"\n" + payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, final)
        directory_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)


def _partial(directory: Path, name: str, pid: int) -> Path:
    """Where process ``pid`` writes ``name`` before renaming it into place."""
    return directory / f".{name}.partial-{pid}"


def remove_stale_partials(directory: Path, name: str) -> None:
    """Remove the temporary files of ``name`` that writers killed mid-write left in ``directory`` (those of a
    live process, this one aside, are its own business)."""
    for partial in directory.glob(f".{name}.partial-*"):
        pid = partial.name.rpartition("-")[2]
        if pid.isdigit() and (int(pid) == os.getpid() or not process_alive(int(pid))):
            partial.unlink(missing_ok=True)


def has_checkpoint(directory: Path) -> bool:
    return checkpoint_path(directory).is_file()


def read_header(directory: Path) -> dict[str, Any]:
    """The checkpoint's header (``version``, ``scenario``, ``resume_with``: ``overrides``, ``log`` and ``scenario``, the settings as given), after
    checking its length and SHA-256 (else ``CheckpointError``); nothing is unpickled."""
    return _verified(directory)[0]


def read_checkpoint(directory: Path, *, scenario: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The checkpoint in ``directory``, after checking its header, length and SHA-256 (else ``CheckpointError``)
    and, given ``scenario``, that it was written by this privsilo version for the same scenario (else
    ``ScenarioError`` naming what differs), all before anything is unpickled."""
    header, payload = _verified(directory)
    if scenario is not None:
        _check_resumable(header["version"], header["scenario"], scenario, directory=Path(directory))
    path = checkpoint_path(directory)
    try:
        state = pickle.loads(payload)
    except Exception as error:  # noqa: BLE001 (whatever unpickling raises, the user gets one line)
        raise CheckpointError(f"--resume: {path} could not be loaded ({type(error).__name__}: {error})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"--resume: {path} holds a {type(state).__name__}, not a run's state; it was not used")
    return state


def _verified(directory: Path) -> tuple[dict[str, Any], bytes]:
    """The header and payload of the checkpoint in ``directory``, whose length and SHA-256 match the header."""
    path = checkpoint_path(directory)
    if not path.is_file():
        raise CheckpointError(f"--resume: {directory} holds no checkpoint ({CHECKPOINT_FILE}); there is nothing to resume")
    data = path.read_bytes()
    corrupt = f"--resume: {path} is corrupt or half-written"
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{corrupt} (not a privsilo checkpoint); it was not loaded")
    header_line, _, payload = data[len(MAGIC):].partition(b"\n")
    try:
        header = json.loads(header_line)
        expected_bytes, expected_digest = int(header["bytes"]), str(header["sha256"])
        header["version"], header["scenario"] = str(header["version"]), dict(header["scenario"])
        header["resume_with"] = dict(header.get("resume_with") or {})
    except (ValueError, KeyError, TypeError):
        raise CheckpointError(f"{corrupt} (unreadable header); it was not loaded") from None
    if len(payload) != expected_bytes or hashlib.sha256(payload).hexdigest() != expected_digest:
        raise CheckpointError(f"{corrupt} (its length or SHA-256 does not match its header); it was not loaded")
    return header, payload


def check_parts(state: Mapping[str, Any], parts: Mapping[str, type | tuple[type, ...]], *, directory: Path) -> None:
    """Refuse a checkpoint whose state lacks one of ``parts`` (name: type) or holds it with another type (a file
    of the right format and digest, but not the state of such a run)."""
    for name, kind in parts.items():
        if not isinstance(state.get(name), kind):
            found = "nothing" if name not in state else f"a {type(state[name]).__name__}"
            raise CheckpointError(f"--resume: {checkpoint_path(directory)} holds {found} under {name!r} where a run's "
                                  "checkpoint holds its state; it is not a checkpoint of a privsilo run and was not used")


def _check_resumable(version: str, written_for: Mapping[str, Any], scenario: Mapping[str, Any], *, directory: Path) -> None:
    """Refuse to resume with another privsilo version or a scenario that differs (outside ``MAY_DIFFER``); the
    error names the first differing key and both values."""
    if version != privsilo_version():
        raise ScenarioError("--resume", str(directory), f"the checkpoint was written by privsilo {version}, this is {privsilo_version()}; resume with that version or start again with --overwrite")
    difference = _first_difference(written_for, scenario)
    if difference is not None:
        key, then, now = difference
        raise ScenarioError(key, now, f"the checkpoint in {directory} was written with {then!r}; resume with the same scenario or start again with --overwrite")


def _first_difference(then: Mapping[str, Any], now: Mapping[str, Any], prefix: str = "") -> tuple[str, Any, Any] | None:
    for key in sorted(set(then) | set(now), key=lambda k: (k != "name", k)):  # a block's name first: the telling one
        if not prefix and key in MAY_DIFFER:
            continue
        a, b = then.get(key), now.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            found = _first_difference(a, b, f"{prefix}{key}.")
            if found is not None:
                return found
        elif a != b:
            return f"{prefix}{key}", a, b
    return None
