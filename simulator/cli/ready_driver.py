"""The local pool's ready driver: a process that has already imported torch, Ray and privsilo and waits to run one
command, so that a command using the local pool (``privsilo run``, ``resume``, ``sweep``, ``audit``, ``attack``
without ``--address``) skips the seconds its own interpreter would spend importing them.

The pool's supervisor (:mod:`privsilo.simulator.runtime.pool.local_head`) keeps one ready driver. The driver runs its caller's command
(:mod:`privsilo.simulator.runtime.pool.driver_protocol` says how it gets it) exactly as the caller's own process would
(:func:`privsilo.simulator.cli.execute`), reading and writing the caller's terminal, and exits; the supervisor starts the
next driver. A caller that vanishes interrupts the command, as Ctrl-C would; a connection that brings no valid
request within :data:`~privsilo.simulator.runtime.pool.driver_protocol.REQUEST_TIMEOUT_S` (any bytes, any size) costs one line in the
pool's log, and the driver waits for the next caller.
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from privsilo.simulator.runtime.pool.driver_protocol import (EXIT_FAILED_TO_START, PRELOADED, REQUEST_TIMEOUT_S, check_request, fingerprint,
                                       receive_message, send_message, socket_path)

CHECK_PARENT_EVERY_S = 1.0


def _preload() -> None:
    """Import what every command of the pool imports: the :data:`PRELOADED` packages and privsilo's command line,
    engine, scenarios and reports (which choose matplotlib's backend)."""
    for name in (*PRELOADED, "privsilo.simulator.cli", "privsilo.simulator.engine.api", "privsilo.simulator.run_dir.writers", "privsilo.simulator.scenario"):
        importlib.import_module(name)


def serve(*, state_dir: Path, supervisor: int) -> int:
    """Load, listen, run the first caller's command whose fingerprint matches ours, and return 0; also return 0
    when privsilo's sources changed (seen when a caller is refused) or the supervisor is gone."""
    path = socket_path(state_dir)
    try:
        _preload()
        own = fingerprint()
        listener = _listen(path)
    except Exception:  # a broken installation, a state directory whose path is too long for a socket
        traceback.print_exc()
        return EXIT_FAILED_TO_START
    try:
        while (connection := _next_caller(listener, supervisor=supervisor)) is not None:
            request, fds = _request(connection)
            if request is not None and request["fingerprint"] == own:
                break
            for fd in fds:
                os.close(fd)
            _refuse(connection)
            if request is None:
                continue
            if fingerprint() != own:
                return 0  # privsilo's sources changed since this driver loaded them: the supervisor starts a new one
        else:
            return 0
    finally:
        path.unlink(missing_ok=True)
        listener.close()  # a caller that connected meanwhile gets a closed connection and runs its command itself
    with connection:
        send_message(connection, {"accepted": True, "pid": os.getpid()})
        connection.settimeout(None)
        _run_for_caller(connection, request, fds)
    return 0


def _listen(path: Path) -> socket.socket:
    """Listen at ``path`` (owner only); the socket appears there only once it listens."""
    listening = path.with_name(f"{path.name}.{os.getpid()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(listening))
    os.chmod(listening, 0o600)
    listener.listen(1)
    listening.replace(path)
    listener.settimeout(CHECK_PARENT_EVERY_S)
    return listener


def _next_caller(listener: socket.socket, *, supervisor: int) -> socket.socket | None:
    """The next caller's connection, or None once the supervisor is gone."""
    while os.getppid() == supervisor:
        try:
            return listener.accept()[0]
        except socket.timeout:
            continue
    return None


def _request(connection: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """A caller's request and its three standard streams, if the connection brought one within
    :data:`REQUEST_TIMEOUT_S`; else None (and one line in the pool's log saying why)."""
    fds: list[int] = []
    try:
        request, fds = receive_message(connection, fds=3, timeout=REQUEST_TIMEOUT_S)
        check_request(request, fds)
        return request, fds
    except (OSError, ValueError) as exc:
        for fd in fds:
            os.close(fd)
        print(f"ready driver: ignored a connection that sent no request ({type(exc).__name__}: {exc})", flush=True)
        return None, []


def _refuse(connection: socket.socket) -> None:
    with connection:
        try:
            send_message(connection, {"accepted": False})
        except OSError:
            pass


def _run_for_caller(connection: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """Take the caller's streams, directory, environment and module search path, run its command and send its exit
    status."""
    own_streams = [os.dup(standard) for standard in (0, 1, 2)]  # the pool's log, for after the command
    for fd, standard in zip(fds, (0, 1, 2)):
        os.dup2(fd, standard)
        os.close(fd)
    sys.stdout.reconfigure(line_buffering=os.isatty(1))  # as the caller's own stdout would buffer
    os.umask(request["umask"] & 0o777)  # files the command writes get the modes they would in the caller's process
    os.environ.clear()
    os.environ.update(request["environ"])
    sys.path[:] = request["sys_path"]
    finished = threading.Event()
    threading.Thread(target=_interrupt_if_caller_leaves, args=(connection, finished), daemon=True).start()
    from privsilo.simulator.cli import execute
    from privsilo.simulator.runtime.cluster import stay_joined_until_exit
    from privsilo.simulator.runtime.pool.local_head import LAST_WORDS

    LAST_WORDS.append(lambda code: send_message(connection, {"exit": code}))  # the pool stopped mid-command

    stay_joined_until_exit()  # the caller gets its exit status before the driver leaves the cluster
    try:
        os.chdir(request["cwd"])
        code = execute(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finished.set()
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, standard in zip(own_streams, (0, 1, 2)):  # let go of the caller's streams: a pipe reads its end now
        os.dup2(fd, standard)
        os.close(fd)
    try:
        send_message(connection, {"exit": code})
    except OSError:
        pass  # the caller is gone


def _interrupt_if_caller_leaves(connection: socket.socket, finished: threading.Event) -> None:
    """Interrupt the command (as Ctrl-C would) when the caller's end of the connection closes before it finished."""
    try:
        while connection.recv(1):
            pass
    except OSError:
        pass
    if not finished.is_set():
        os.kill(os.getpid(), signal.SIGINT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m privsilo.simulator.cli.ready_driver")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--supervisor", type=int, required=True)
    args = parser.parse_args(argv)
    # The callers' Ctrl-C reaches a command as a SIGINT passed on to this process: take it even where the pool was
    # started from a shell that ignores SIGINT (a background job, nohup), which this process would inherit.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return serve(state_dir=args.state_dir, supervisor=args.supervisor)


if __name__ == "__main__":
    sys.exit(main())
