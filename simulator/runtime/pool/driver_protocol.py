"""Talking to the local pool's ready driver (:mod:`privsilo.simulator.cli.ready_driver`): the caller's side, the socket, the
fingerprint both sides compare and the messages they exchange. Kept apart from the driver, which imports the command
line that imports this.

A command hands the driver its command line, working directory, umask, environment, module search path and standard
streams (the file descriptors themselves, passed with SCM_RIGHTS over a Unix socket of mode 0600 in the pool's
state directory), then waits for the exit status, passing on the signals it receives (Ctrl-C, SIGTERM, SIGHUP).

A driver serves only a caller that would run the same code: the same interpreter, privsilo's sources unchanged since
the driver started (their sizes and modification times), the same locations of the packages it imported ahead, and
the same values of the environment variables read at import time (:data:`IMPORT_TIME_VARIABLES`). Otherwise, or
when no driver is ready (one is busy or still loading), the command runs in its own process.
``PRIVSILO_READY_DRIVER=0`` makes every command run in its own process.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

from privsilo.simulator.runtime.shipping import privsilo_sources

SWITCH_VARIABLE = "PRIVSILO_READY_DRIVER"
SOCKET_NAME = "ready-driver.sock"
LOG_NAME = "local-pool.log"  # the pool's log, where the driver's output goes
PRELOADED = ("torch", "ray", "numpy", "scipy", "matplotlib", "opacus", "yaml")  # imported before any caller comes
IMPORT_TIME_VARIABLES = (  # read when torch, numpy, Ray or Python start: a driver started with others would differ
    "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "LANG", "LC_ALL", "LC_CTYPE", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "LD_PRELOAD", "MPLBACKEND",
)
HANDSHAKE_TIMEOUT_S = 10.0  # the caller's wait for the driver's answer
REQUEST_TIMEOUT_S = 3.0  # the driver's wait for a whole request (a real caller sends it at once)
LENGTH_BYTES = 8
MAX_MESSAGE_BYTES = 16 << 20  # a caller's environment and module search path fit many times over
REQUEST_FIELDS = {"argv": list, "cwd": str, "environ": dict, "sys_path": list, "fingerprint": str, "umask": int}
EXIT_FAILED_TO_START = 3  # the supervisor does not start another driver after this exit status
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


def log_file(state_dir: Path) -> Path:
    return state_dir / LOG_NAME


def fingerprint() -> str:
    """What must be equal for a driver to run a caller's command as the caller would: the interpreter, the values
    of :data:`IMPORT_TIME_VARIABLES`, where the :data:`PRELOADED` packages come from, and every source file of
    privsilo's packages (path, size, modification time). Other modules are found on the caller's ``sys.path``."""
    digest = hashlib.sha256(f"{sys.executable}\0{sys.version}\0".encode())
    for name in IMPORT_TIME_VARIABLES:
        digest.update(f"{name}={os.environ.get(name)}\0".encode())
    for name in PRELOADED:
        spec = importlib.util.find_spec(name)
        digest.update(f"{name}={spec.origin if spec else None}\0".encode())
    for _, source in privsilo_sources():
        stat = source.stat()
        digest.update(f"{source}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def send_message(connection: socket.socket, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
    body = json.dumps(message).encode()
    payload = len(body).to_bytes(LENGTH_BYTES, "big") + body
    if fds:
        sent = socket.send_fds(connection, [payload], list(fds))
        connection.sendall(payload[sent:])
    else:
        connection.sendall(payload)


def _receive_exactly(connection: socket.socket, size: int, into: bytearray, deadline: float | None) -> None:
    while len(into) < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the message did not arrive in time")
            connection.settimeout(left)
        chunk = connection.recv(min(size - len(into), 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        into += chunk


def receive_message(connection: socket.socket, *, fds: int = 0,
                    timeout: float | None = None) -> tuple[dict[str, Any], list[int]]:
    """One message (a JSON object of at most :data:`MAX_MESSAGE_BYTES`), and up to ``fds`` file descriptors sent
    with its first bytes, all within ``timeout`` s (None: no limit). Raises ValueError for anything else (the
    descriptors received are closed then), OSError for a connection that closed or timed out."""
    deadline = None if timeout is None else time.monotonic() + timeout
    received, descriptors = bytearray(), []
    try:
        if fds:
            if deadline is not None:
                connection.settimeout(timeout)
            data, descriptors, _, _ = socket.recv_fds(connection, 1 << 16, fds)
            if not data:
                raise ConnectionError("the other side closed the connection")
            received += data
        _receive_exactly(connection, LENGTH_BYTES, received, deadline)
        length = int.from_bytes(received[:LENGTH_BYTES], "big")
        if length > MAX_MESSAGE_BYTES:
            raise ValueError(f"a message of {length} bytes, over the limit of {MAX_MESSAGE_BYTES}")
        _receive_exactly(connection, LENGTH_BYTES + length, received, deadline)
        try:
            message = json.loads(received[LENGTH_BYTES:LENGTH_BYTES + length])
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(message, dict):
            raise ValueError(f"a JSON {type(message).__name__}, not an object")
    except BaseException:
        for descriptor in descriptors:
            os.close(descriptor)
        raise
    return message, descriptors


def check_request(request: dict[str, Any], fds: list[int]) -> None:
    """Raise ValueError unless ``request`` is a caller's request (:data:`REQUEST_FIELDS`, with strings where
    strings belong) sent with its three standard streams."""
    if len(fds) != 3:
        raise ValueError(f"{len(fds)} file descriptors, not the caller's 3 standard streams")
    for name, kind in REQUEST_FIELDS.items():
        if not isinstance(request.get(name), kind) or isinstance(request.get(name), bool):
            raise ValueError(f"{name!r}: {type(request.get(name)).__name__}, not a {kind.__name__}")
    strings = [*request["argv"], *request["sys_path"], *request["environ"], *request["environ"].values()]
    if not all(isinstance(value, str) for value in strings):
        raise ValueError("argv, sys_path and environ hold strings only")


# --- the caller's side --------------------------------------------------------------------------------------------

def delegate(argv: list[str], *, state_dir: Path, after_lost_driver: Callable[[], str]) -> int | None:
    """Run ``privsilo ARGV`` in the local pool's ready driver and return its exit status; None if no driver can
    run it (none ready, busy, or started with other code), so that the caller runs it itself. A driver that ends
    without an exit status (killed) is reported in one line, ending with ``after_lost_driver()`` (what the command
    left: the command resuming it)."""
    path = socket_path(state_dir)
    if os.environ.get(SWITCH_VARIABLE) == "0" or not path.exists():
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(HANDSHAKE_TIMEOUT_S)
        connection.connect(str(path))
        umask = os.umask(0o077)
        os.umask(umask)
        request = {"argv": argv, "cwd": os.getcwd(), "environ": dict(os.environ), "sys_path": sys.path,
                   "fingerprint": fingerprint(), "umask": umask}
        send_message(connection, request, fds=(0, 1, 2))
        reply, _ = receive_message(connection)
    except (OSError, ValueError):  # no driver listening, a busy one closing, a stream closed in this process
        connection.close()
        return None
    if not reply.get("accepted"):
        connection.close()
        return None
    return _wait_for_exit(connection, driver=reply["pid"], after_lost_driver=after_lost_driver, state_dir=state_dir)


def _wait_for_exit(connection: socket.socket, *, driver: int, after_lost_driver: Callable[[], str],
                   state_dir: Path) -> int:
    """The driver's exit status for the command, passing on the signals this process receives meanwhile."""
    forwarded: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        forwarded.append(signum)
        try:
            os.kill(driver, signum)
        except ProcessLookupError:
            pass

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
    connection.settimeout(None)
    try:
        reply, _ = receive_message(connection)
        return int(reply["exit"])
    except (OSError, ValueError, KeyError, TypeError):
        if forwarded:
            return 128 + forwarded[-1]  # ended by the signal passed on, as the shell reports a command killed by it
        print(f"privsilo: error: the local pool's ready driver (pid {driver}) that ran this command ended without an "
              f"exit status (log: {log_file(state_dir)}); {after_lost_driver()}", file=sys.stderr)
        return 1
    finally:
        connection.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


