"""The local warm pool: a Ray head on this machine that outlives the command starting it, so that the actors of
one ``privsilo run`` stay warm for the next, without a cluster to manage.

``privsilo pool start`` starts a supervisor process in a session of its own (``python -m privsilo.simulator.runtime.pool.local_head
serve``). The supervisor starts the head with ``ray.init``, so the head's processes share its fate, and writes
the head's address and the process ids it started (with their start times, so that a reused id is never
signalled) to a state file in a per-user directory. ``privsilo run``, ``sweep``, ``audit`` and ``attack`` without
an address join that head (:func:`address_for_command`), whose warm pool (:mod:`privsilo.simulator.runtime.pool.registry`) then
keeps their actors. The supervisor stops the head and exits when:

- no Ray job other than its own has run for ``idle_timeout`` seconds (``pool start --idle-timeout``);
- ``privsilo pool stop`` signals it (SIGTERM);
- one of the head's processes died: it then records the crash in the state file, and the next command reports
  it once and starts Ray of its own.

The supervisor also keeps one ready driver (:mod:`privsilo.simulator.cli.ready_driver`): a process with torch, Ray and privsilo
already imported that runs the next such command for it, then exits and is replaced.

Only the processes recorded in the state file, and the supervisor's own descendants when it stops (what
``ray.shutdown`` left of its head), are ever signalled; other Ray instances on the machine are never touched.

The pool is its owner's alone: the head and its workers listen on 127.0.0.1 only, and every connection to them must
carry the pool's Ray token (Ray's token authentication, ``RAY_AUTH_MODE=token``), a random 256-bit secret kept in
the state directory (mode 0700) in a file of mode 0600, like the state file and the log. A command that joins the
pool reads the token from there (:func:`use_credentials`); another local user can read neither.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from privsilo.simulator.errors import PrivsiloError, ScenarioError
from privsilo.simulator.runtime.processes import descendants, process_start
from privsilo.simulator.runtime.pool.driver_protocol import EXIT_FAILED_TO_START, log_file, socket_path

DEFAULT_IDLE_TIMEOUT_S = 900.0
START_TIMEOUT_S = 300.0  # starting a head takes 5-30 s, more on a loaded machine
STOP_WAIT_S = 60.0
CHECK_EVERY_S = 1.0  # how often the supervisor checks the head's processes and the running jobs
REACH_TIMEOUT_S = 5.0
WATCH_EVERY_S = 0.5  # how often a command on the pool checks that the pool's supervisor is still there
EXIT_POOL_LOST = 1
LAST_WORDS: list[Callable[[int], None]] = []  # run before a command whose pool stopped ends (the ready driver's)
REPO = Path(__file__).resolve().parents[3]  # the checkout (or install) privsilo's folders are in


def state_dir() -> Path:
    """Where the local pool's state file and log live: ``PRIVSILO_STATE_DIR``, else ``$XDG_STATE_HOME/privsilo``,
    else ``~/.local/state/privsilo`` (per user)."""
    if explicit := os.environ.get("PRIVSILO_STATE_DIR"):
        return Path(explicit)
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "privsilo"


def state_path() -> Path:
    return state_dir() / "local-pool.json"


def log_path() -> Path:
    return log_file(state_dir())


def token_path(directory: Path | None = None) -> Path:
    """The pool's Ray authentication token (mode 0600)."""
    return (directory or state_dir()) / "ray-auth-token"


def _private_state_dir() -> Path:
    """The state directory, created if missing, mode 0700 (owner only)."""
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    return directory


def _open_private(path: Path, mode: str = "w"):
    """``path`` opened for writing, created with mode 0600 (an existing file is made 0600 too)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if mode == "w" else os.O_APPEND), 0o600)
    os.fchmod(descriptor, 0o600)
    return os.fdopen(descriptor, mode)


def pool_environment(directory: Path) -> dict[str, str]:
    """The variables under which the pool's head starts and with which a process joins it: Ray's token
    authentication with the pool's token, and Ray's single-host mode, in which Ray takes 127.0.0.1 as the node's
    address and binds its servers to it (and does not turn a 127.0.0.1 head address into the host's address)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path(directory)),
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def use_credentials() -> None:
    """Join the local pool from this process (and the processes it starts) as its owner: with the pool's token, at
    127.0.0.1. Ray reads these settings once, so they are reloaded where Ray is already imported."""
    variables = pool_environment(state_dir())
    if all(os.environ.get(name) == value for name, value in variables.items()):
        return
    os.environ.update(variables)
    os.environ.pop("RAY_AUTH_TOKEN", None)  # it would take precedence over the file
    if "ray" in sys.modules:
        from ray._private import ray_constants
        from ray._raylet import AuthenticationTokenLoader, Config

        ray_constants.ENABLE_RAY_CLUSTER = False
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


@dataclass
class PoolState:
    """The state file: the supervisor (``pid``, ``start``: its start time in clock ticks since boot), the head's
    GCS ``address``, the head's processes ``{name: [pid, start]}``, the current ready ``driver`` ``[pid, start]``,
    the settings, ``crashed`` (what died) and ``code``: the checkout whose privsilo the head's workers import."""

    pid: int
    start: int
    idle_timeout: float
    num_cpus: int
    started_at: float
    address: str | None = None
    processes: dict[str, list[int]] = field(default_factory=dict)
    crashed: str | None = None
    driver: list[int] | None = None
    code: str = ""

    def supervisor_alive(self) -> bool:
        return process_start(self.pid) == self.start


def read_state(path: Path | None = None) -> PoolState | None:
    path = path or state_path()
    try:
        return PoolState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise PrivsiloError(f"the local pool's state file {path} is damaged ({exc}); remove it") from None


def _write_state(state: PoolState, path: Path) -> None:
    temporary = path.with_suffix(".tmp")
    with _open_private(temporary) as file:
        file.write(json.dumps(asdict(state)))
    temporary.replace(path)


def _remove_state(path: Path, *, pid: int) -> None:
    """Remove the state file if it still describes the supervisor ``pid`` (a newer pool's file is kept)."""
    try:
        if json.loads(path.read_text())["pid"] == pid:
            path.unlink()
    except (FileNotFoundError, ValueError, KeyError):
        pass


def _signal_if_same(pid: int, start: int, signum: int) -> None:
    if process_start(pid) == start:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):  # gone, or a descendant that changed its user
            pass


# --- the commands' side -------------------------------------------------------------------------------------------

def start(*, idle_timeout: float, num_cpus: int | None) -> PoolState:
    """Start the supervisor and wait until its head is up; return its state. Refused while a pool is running."""
    if not idle_timeout > 0:
        raise ScenarioError("--idle-timeout", idle_timeout, "a number of seconds > 0")
    if num_cpus is not None and num_cpus < 1:
        raise ScenarioError("--num-cpus", num_cpus, "a whole number of logical CPUs >= 1")
    current = read_state()
    if current is not None and current.supervisor_alive():
        raise PrivsiloError(f"pool start: a local pool is already running (Ray head at {current.address}, supervisor "
                            f"pid {current.pid}); `privsilo pool stop` stops it")
    directory = _private_state_dir()
    path = state_path()
    path.unlink(missing_ok=True)  # a crashed or stale pool's file
    with _open_private(token_path(directory)) as token:  # a new secret for each pool
        token.write(secrets.token_hex(32))
    env = {**os.environ, **pool_environment(directory),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("RAY_AUTH_TOKEN", None)
    with _open_private(log_path()) as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "privsilo.simulator.runtime.pool.local_head", "serve", "--idle-timeout", repr(idle_timeout),
             "--num-cpus", str(num_cpus or os.cpu_count() or 1), "--state", str(path)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        state = read_state(path)
        if state is not None and state.pid == process.pid and (state.address or state.crashed):
            if state.crashed:
                break
            return state
        if process.poll() is not None:
            break
        time.sleep(0.2)
    else:
        process.kill()
    process.wait()
    _remove_state(path, pid=process.pid)
    raise PrivsiloError(f"pool start: the Ray head did not start: {_last_line(log_path())} (log: {log_path()})")


def _last_line(path: Path) -> str:
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else f"nothing logged within {START_TIMEOUT_S:g} s"


def stop() -> PoolState | None:
    """Stop the local pool's supervisor and every head process it recorded; None if there was no pool."""
    path = state_path()
    state = read_state(path)
    if state is None:
        return None
    _signal_if_same(state.pid, state.start, signal.SIGTERM)  # it stops the head (ray.shutdown) and exits
    deadline = time.monotonic() + STOP_WAIT_S
    while state.supervisor_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    driver = [tuple(state.driver)] if state.driver else []
    for pid, begun in [(state.pid, state.start), *state.processes.values(), *driver]:
        _signal_if_same(pid, begun, signal.SIGKILL)  # only what did not stop by itself
    _remove_state(path, pid=state.pid)
    socket_path(path.parent).unlink(missing_ok=True)  # a killed driver's
    return state


def problem(state: PoolState) -> str | None:
    """Why the pool of ``state`` cannot be used (crashed, supervisor gone, head not answering), or None."""
    from privsilo.simulator.runtime.cluster import check_reachable

    if state.crashed:
        return f"it crashed: {state.crashed}"
    if not state.supervisor_alive():
        return f"its supervisor (pid {state.pid}) is gone"
    if state.address is None:
        return "its Ray head is still starting"
    try:
        check_reachable(state.address, timeout=REACH_TIMEOUT_S)
    except ScenarioError as exc:
        return f"its Ray head does not answer: {exc}"
    return None


def address_for_command(configured: str | None) -> tuple[str | None, str | None]:
    """The Ray address a command uses, and the one line to print about it: ``configured`` (``--address`` or the
    scenario's ``ray.address``) if given; else the local pool's head if one is running and its workers import
    privsilo from this command's checkout (else they would run other code than this command's); else None (Ray of
    the command's own). A pool that crashed or whose supervisor is gone is reported once and forgotten."""
    if configured:
        if (own := serving(configured)) is not None and own.code == str(REPO):
            use_credentials()  # the local pool's head given by its address: joined as its owner
        return configured, None
    state = read_state()
    if state is None:
        return None, None
    if (reason := problem(state)) is not None:
        if state.crashed or not state.supervisor_alive():
            stop()  # forget it, and end whatever of it is left
        return None, (f"the local pool is not usable ({reason}); this command starts Ray of its own "
                      f"(`privsilo pool start` starts a new pool; log: {log_path()})")
    if state.code != str(REPO):  # its workers would run that checkout's code, not this command's
        return None, (f"the local pool runs privsilo from {state.code or 'another checkout'}, this command from "
                      f"{REPO}; it starts Ray of its own")
    use_credentials()
    return state.address, (f"using the local warm pool (Ray head at {state.address}; it stops after "
                           f"{state.idle_timeout:g} s without a command, or with `privsilo pool stop`)")


def serving(address: str | None) -> PoolState | None:
    """The running local pool whose head is at ``address``, or None."""
    state = read_state() if address else None
    return state if state is not None and state.address == address and state.supervisor_alive() else None


def exit_when_stopped(state: PoolState, farewell: Callable[[str], None]) -> None:
    """End this process as soon as the pool of ``state`` stops (``pool stop``, or its supervisor killed), after
    ``farewell(why)`` and :data:`LAST_WORDS`: its Ray head goes with it, and Ray would only fail a minute later.
    Watched from a daemon thread."""
    def watch() -> None:
        while state.supervisor_alive():
            time.sleep(WATCH_EVERY_S)
        if not threading.main_thread().is_alive():
            return  # the command is over: this process is exiting anyway
        farewell(f"the local pool stopped while this command ran (its supervisor, pid {state.pid}, is gone)")
        sys.stdout.flush()
        sys.stderr.flush()
        for last in LAST_WORDS:
            try:
                last(EXIT_POOL_LOST)
            except OSError:
                pass  # the one to tell is gone too
        os._exit(EXIT_POOL_LOST)

    threading.Thread(target=watch, name="local-pool-watch", daemon=True).start()


def describe(state: PoolState) -> str:
    """``pool status``'s first line for the local pool."""
    return (f"local pool: Ray head at {state.address} with {state.num_cpus} CPUs, supervisor pid {state.pid}, "
            f"up {time.time() - state.started_at:.0f} s, stops after {state.idle_timeout:g} s without a command")


# --- the supervisor -----------------------------------------------------------------------------------------------

def serve(*, idle_timeout: float, num_cpus: int, path: Path) -> str:
    """Run the head until it has been idle for ``idle_timeout`` s, SIGTERM arrives or one of its processes dies;
    return why it stopped."""
    import ray

    from privsilo.simulator.runtime.pool.registry import running_jobs

    stopping: list[str] = []

    def catch_stop_signals() -> None:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda number, _: stopping.append(f"signal {signal.Signals(number).name}"))

    catch_stop_signals()
    state = PoolState(pid=os.getpid(), start=process_start(os.getpid()) or 0, idle_timeout=idle_timeout,
                      num_cpus=num_cpus, started_at=time.time(), code=str(REPO))
    _write_state(state, path)
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    catch_stop_signals()  # again: ray.init replaced them (and Ray's core dumps stack frames on SIGTERM, as on a crash)
    node = ray._private.worker.global_worker.node
    state.address = node.address
    state.processes = {f"{name}-{i}": [info.process.pid, process_start(info.process.pid) or 0]
                       for name, infos in node.all_processes.items() for i, info in enumerate(infos)}
    _write_state(state, path)
    print(f"Ray head at {state.address}; processes {state.processes}", flush=True)
    own_job = ray.get_runtime_context().get_job_id()
    last_active = time.monotonic()
    reason = ""
    drivers = ReadyDrivers(state, path)
    try:
        while not stopping:
            time.sleep(CHECK_EVERY_S)
            drivers.keep_one()
            dead = [f"{name} (pid {info.process.pid}) exited with code {info.process.poll()}"
                    for name, infos in node.all_processes.items() for info in infos if info.process.poll() is not None]
            if dead:
                state.crashed = f"{'; '.join(dead)} at {time.strftime('%Y-%m-%d %H:%M:%S')}"
                _write_state(state, path)
                return f"crashed: {state.crashed}"
            if running_jobs() - {own_job}:
                last_active = time.monotonic()
            elif time.monotonic() - last_active >= idle_timeout:
                reason = f"idle for {idle_timeout:g} s"
                break
        reason = reason or stopping[0]
        _remove_state(path, pid=state.pid)  # before the head goes: no command picks it up meanwhile
        return reason
    finally:
        drivers.stop()
        head = descendants(os.getpid())
        ray.shutdown()
        for pid, start in head.items():  # a crashed head's idle workers would wait a minute for it before exiting
            _signal_if_same(pid, start, signal.SIGKILL)


class ReadyDrivers:
    """The supervisor's one ready driver (:mod:`privsilo.simulator.cli.ready_driver`): started again each time one exits after
    serving a command, recorded in the state file, and never again after one failed to start (the next commands
    then run in their own processes, as without a driver)."""

    def __init__(self, state: PoolState, path: Path) -> None:
        self.state, self.path = state, path
        self.process: subprocess.Popen | None = None
        self.failed = False
        self.keep_one()

    def keep_one(self) -> None:
        if self.failed or (self.process is not None and self.process.poll() is None):
            return
        if self.process is not None and self.process.returncode == EXIT_FAILED_TO_START:
            self.failed = True
            print(f"the ready driver (pid {self.process.pid}) failed to start (above); commands run in their own "
                  "processes", flush=True)
            return
        self.process = subprocess.Popen(
            [sys.executable, "-m", "privsilo.simulator.cli.ready_driver", "--state-dir", str(self.path.parent),
             "--supervisor", str(os.getpid())], stdin=subprocess.DEVNULL, cwd=REPO)
        self.state.driver = [self.process.pid, process_start(self.process.pid) or 0]
        _write_state(self.state, self.path)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        socket_path(self.path.parent).unlink(missing_ok=True)  # a terminated driver leaves its socket file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m privsilo.simulator.runtime.pool.local_head")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--idle-timeout", type=float, required=True)
    parser.add_argument("--num-cpus", type=int, required=True)
    parser.add_argument("--state", type=Path, required=True)
    args = parser.parse_args(argv)
    reason = serve(idle_timeout=args.idle_timeout, num_cpus=args.num_cpus, path=args.state)
    print(f"stopped: {reason}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
