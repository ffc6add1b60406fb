"""Talking to the local pool's ready driver (:mod:`simulator.ready_driver`): the caller's side, the socket, the
fingerprint both sides compare and the messages they exchange. Kept apart from the driver, which imports the command
line that imports this.

A command hands the driver its command line, working directory, environment, module search path and standard
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
from pathlib import Path
from typing import Any

SWITCH_VARIABLE = "PRIVSILO_READY_DRIVER"
SOCKET_NAME = "ready-driver.sock"
PACKAGES = ("simulator", "mechanisms", "protocols", "privsilo")
PRELOADED = ("torch", "ray", "numpy", "scipy", "matplotlib", "opacus", "yaml")  # imported before any caller comes
IMPORT_TIME_VARIABLES = (  # read when torch, numpy, Ray or Python start: a driver started with others would differ
    "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "LANG", "LC_ALL", "LC_CTYPE", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "LD_PRELOAD", "MPLBACKEND",
)
HANDSHAKE_TIMEOUT_S = 10.0
LENGTH_BYTES = 8
EXIT_FAILED_TO_START = 3  # the supervisor does not start another driver after this exit status
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


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
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for source in sorted(Path(root).rglob("*.py")):
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


def _receive_exactly(connection: socket.socket, size: int, into: bytearray) -> None:
    while len(into) < size:
        chunk = connection.recv(size - len(into))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        into += chunk


def receive_message(connection: socket.socket, *, fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """One message (and up to ``fds`` file descriptors sent with its first bytes)."""
    received, descriptors = bytearray(), []
    if fds:
        data, descriptors, _, _ = socket.recv_fds(connection, 1 << 16, fds)
        if not data:
            raise ConnectionError("the other side closed the connection")
        received += data
    _receive_exactly(connection, LENGTH_BYTES, received)
    size = LENGTH_BYTES + int.from_bytes(received[:LENGTH_BYTES], "big")
    _receive_exactly(connection, size, received)
    return json.loads(received[LENGTH_BYTES:size]), descriptors


# --- the caller's side --------------------------------------------------------------------------------------------

def delegate(argv: list[str], *, state_dir: Path) -> int | None:
    """Run ``privsilo ARGV`` in the local pool's ready driver and return its exit status; None if no driver can
    run it (none ready, busy, or started with other code), so that the caller runs it itself."""
    path = socket_path(state_dir)
    if os.environ.get(SWITCH_VARIABLE) == "0" or not path.exists():
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(HANDSHAKE_TIMEOUT_S)
        connection.connect(str(path))
        request = {"argv": argv, "cwd": os.getcwd(), "environ": dict(os.environ), "sys_path": sys.path,
                   "fingerprint": fingerprint()}
        send_message(connection, request, fds=(0, 1, 2))
        reply, _ = receive_message(connection)
    except (OSError, ValueError):  # no driver listening, a busy one closing, a stream closed in this process
        connection.close()
        return None
    if not reply.get("accepted"):
        connection.close()
        return None
    return _wait_for_exit(connection, driver=reply["pid"])


def _wait_for_exit(connection: socket.socket, *, driver: int) -> int:
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
    except (OSError, ValueError):
        if forwarded:
            return 128 + forwarded[-1]  # ended by the signal passed on, as the shell reports a command killed by it
        print(f"privsilo: error: the local pool's ready driver (pid {driver}) ended without an exit status; "
              "see the pool's log", file=sys.stderr)
        return 1
    finally:
        connection.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


