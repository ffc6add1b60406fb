"""The local warm pool (privsilo.simulator.runtime.pool.local_head), with real processes: ``privsilo pool start`` starts a Ray head in
the background that ``privsilo run`` uses without ``--address`` (with the results of a cold run), ``pool stop``
ends every process it started, an idle pool stops by itself, and a pool whose head died is reported, not waited on.
The pool's ready driver (privsilo.simulator.cli.ready_driver) runs a command for its caller: with the caller's streams, exit
status and Ctrl-C, and only for a caller that would run the same code; it survives any bytes on its socket. Only
the owner can join the pool (a real second Unix user cannot), a run interrupted on it resumes once it is gone,
concurrent runs of different shapes all finish, and a killed driver or supervisor ends the command with one line.

Every test has a state directory of its own (``PRIVSILO_STATE_DIR``), so it never sees another pool."""
from __future__ import annotations

import ipaddress
import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Iterator

import pytest
import torch
import yaml

from privsilo.simulator.runtime.pool import local_head as local_pool
from privsilo.simulator.runtime.pool import driver_protocol
from privsilo.simulator.runtime.processes import descendants, process_start
from tests.support import cli
from tests.support.outputs import metrics_without_wall_times
from tests.support.paths import REPO
from tests.support.processes import command_line, foreground_job, signal_masks
from tests.support.scenarios import small_scenario

OTHER_USER = "privsilo-test-other"
privsilo = partial(cli.privsilo, code=0)  # ``privsilo ARGS`` in a fresh process; asserts its exit status
GONE_WITHIN_S = 120  # a stopped head's workers notice within seconds; a loaded machine is slower


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Iterator[Path]:
    """The test's own state directory; a pool the test left running (it failed midway) is stopped afterwards."""
    path = tmp_path / "state"
    monkeypatch.setenv("PRIVSILO_STATE_DIR", str(path))
    yield path
    local_pool.stop()


def wait_until_gone(pids: set[int]) -> None:
    deadline = time.monotonic() + GONE_WITHIN_S
    while alive := {pid for pid in pids if process_start(pid) is not None}:
        assert time.monotonic() < deadline, f"still running {GONE_WITHIN_S} s after the pool stopped: {sorted(alive)}"
        time.sleep(0.5)


def ready_driver() -> int:
    """The pid of the local pool's ready driver, once it listens (it loads torch and Ray first)."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while not (local_pool.state_dir() / driver_protocol.SOCKET_NAME).exists():
        assert time.monotonic() < deadline, f"no ready driver listened within {GONE_WITHIN_S} s"
        time.sleep(0.2)
    state = local_pool.read_state()
    assert state.driver is not None and process_start(state.driver[0]) == state.driver[1]
    return state.driver[0]


def started_pool(*options: str) -> tuple[local_pool.PoolState, set[int]]:
    """``privsilo pool start OPTIONS``: the pool's state and every process it runs (supervisor included)."""
    out = privsilo("pool", "start", *options).stdout
    state = local_pool.read_state()
    assert state is not None and state.address in out and state.supervisor_alive()
    processes = {state.pid, *descendants(state.pid)}
    assert {pid for pid, _ in state.processes.values()} <= processes  # the head's GCS, raylet, ... are its children
    return state, processes


@pytest.mark.timeout(1800)  # four runs and a Ray head: minutes on a loaded 2-core machine
def test_a_run_without_address_uses_the_local_pool_with_a_cold_runs_results_and_stop_ends_it(state_dir, tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(name="local", federation={
        "rounds": 2, "client_rate": 0.7, "local_steps": 5, "batch_size": 32, "lr": 0.1})))
    run = ("run", str(scenario), "--no-progress", "--out")
    cold = privsilo(*run, str(tmp_path / "cold"))  # no pool yet: Ray of its own
    assert "local warm pool" not in cold.stdout

    state, processes = started_pool("--idle-timeout", "600")
    first = privsilo(*run, str(tmp_path / "first"))  # starts the pool's actors
    driver = ready_driver()
    warm = privsilo(*run, str(tmp_path / "warm"))  # leases them, in the ready driver
    wait_until_gone({driver})  # it served the command and exited ...
    assert ready_driver() != driver  # ... and another took its place
    for proc in (first, warm):
        assert proc.stdout.splitlines()[0] == (f"privsilo: using the local warm pool (Ray head at {state.address}; it "
                                               "stops after 600 s without a command, or with `privsilo pool stop`)")
    pool_actors = set(descendants(state.pid)) - processes
    assert pool_actors, "no actor process was started under the pool's head"
    status = privsilo("pool", "status").stdout
    assert status.startswith(f"local pool: Ray head at {state.address}") and "idle" in status
    for out in ("first", "warm"):
        assert metrics_without_wall_times(tmp_path / out / "metrics.csv") == metrics_without_wall_times(tmp_path / "cold" / "metrics.csv")
        cold_model, model = torch.load(tmp_path / "cold" / "model.pt"), torch.load(tmp_path / out / "model.pt")
        assert cold_model.keys() == model.keys() and all(torch.equal(cold_model[k], model[k]) for k in cold_model)

    assert "stopped the local pool" in privsilo("pool", "stop").stdout
    wait_until_gone(processes | pool_actors)
    log = (state_dir / "local-pool.log").read_text()
    assert "stopped: signal SIGTERM" in log and "SIGTERM received" not in log and "frames" not in log  # no crash-like dump
    assert local_pool.read_state() is None and not (state_dir / driver_protocol.SOCKET_NAME).exists()
    proc = privsilo("pool", "status", code=2)
    assert proc.stderr.strip() == ("privsilo: error: pool status: no local pool is running (`privsilo pool start` "
                                   "starts one); give --address for a cluster's pool")


def test_an_idle_pool_stops_by_itself_with_every_process_it_started(state_dir):
    state, processes = started_pool("--idle-timeout", "2")
    wait_until_gone(processes)
    assert local_pool.read_state() is None and not (state_dir / driver_protocol.SOCKET_NAME).exists()
    assert "stopped: idle for 2 s" in (state_dir / "local-pool.log").read_text()


def test_a_pool_whose_head_died_is_reported_and_commands_run_on_their_own_ray(state_dir):
    state, processes = started_pool("--idle-timeout", "600")
    refused = privsilo("pool", "start", code=2)
    assert refused.stderr.startswith("privsilo: error: pool start: a local pool is already running")
    gcs_pid, gcs_start = next(pid_start for name, pid_start in state.processes.items() if name.startswith("gcs_server"))
    assert process_start(gcs_pid) == gcs_start
    deadline = time.monotonic() + GONE_WITHIN_S  # the head's idle Ray workers: what a crashed head leaves behind
    while not (workers := {pid for pid in descendants(state.pid) if command_line(pid).startswith(b"ray::")}):
        assert time.monotonic() < deadline, "the pool's head started no Ray worker process"
        time.sleep(0.2)
    processes |= workers
    os.kill(gcs_pid, signal.SIGKILL)
    killed = time.monotonic()
    wait_until_gone(processes)  # the supervisor noticed, recorded the crash and stopped the rest
    # ... killing what Ray's orphaned workers would leave running for a minute (they wait that long for the GCS)
    assert time.monotonic() - killed < 50
    crashed = local_pool.read_state()
    assert crashed is not None and crashed.crashed.startswith(f"gcs_server (pid {gcs_pid}) exited with code -9")
    address, note = local_pool.address_for_command(None)
    assert address is None and note.startswith(f"the local pool is not usable (it crashed: gcs_server (pid {gcs_pid})")
    assert local_pool.read_state() is None  # reported once, then forgotten
    assert local_pool.address_for_command(None) == (None, None)


@pytest.mark.parametrize("option, value, message", [("--idle-timeout", "0", "got 0.0; a number of seconds > 0"),
                                                    ("--num-cpus", "0", "got 0; a whole number of logical CPUs >= 1")])
def test_bad_pool_start_options_exit_2_naming_the_option(state_dir, option, value, message):
    proc = privsilo("pool", "start", option, value, code=2)
    assert proc.stderr.splitlines() == [f"privsilo: error: {option}: {message}"]
    assert local_pool.read_state() is None


@pytest.mark.timeout(1800)
def test_the_ready_driver_runs_a_command_as_its_own_process_would_and_only_for_the_same_code(state_dir, tmp_path):
    started_pool("--idle-timeout", "600")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(name="driven", federation={
        "rounds": 400, "client_rate": 1.0, "local_steps": 20, "batch_size": 32, "lr": 0.1})))

    driver = ready_driver()  # a user error: one line on the caller's stderr, exit 2, nothing written
    refused = privsilo("run", str(scenario), "--out", str(tmp_path / "bad"), "--set", "federation.rounds=0", code=2)
    assert refused.stderr.splitlines() == ["privsilo: error: federation.rounds: got 0; input should be greater than or equal to 1"]
    assert not (tmp_path / "bad").exists()
    wait_until_gone({driver})  # it served the command

    driver = ready_driver()  # another value of a variable read at import time: the caller runs the command itself
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    own = subprocess.run([sys.executable, "-m", "privsilo.simulator.cli", "run", str(scenario), "--out", str(tmp_path / "own"),
                          "--no-progress", "--set", "federation.rounds=1"], env=environment, capture_output=True,
                         text=True, cwd=REPO, timeout=600)
    assert own.returncode == 0, own.stderr[-3000:]
    assert ready_driver() == driver  # still waiting: it did not serve

    # Ctrl-C at the caller interrupts the command in the driver: exit 130 and the caller's interrupted message
    caller = subprocess.Popen([sys.executable, "-m", "privsilo.simulator.cli", "run", str(scenario), "--out",
                               str(tmp_path / "interrupted")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=REPO)
    deadline = time.monotonic() + GONE_WITHIN_S
    while not (tmp_path / "interrupted" / "checkpoint.pkl").exists() and process_start(driver) is not None:
        assert time.monotonic() < deadline, "the run in the driver wrote no checkpoint"
        time.sleep(0.2)
    caller.send_signal(signal.SIGINT)
    out, err = caller.communicate(timeout=600)
    assert caller.returncode == 130, out[-2000:] + err[-3000:]
    assert err.splitlines()[-1].startswith("privsilo: interrupted; no results were written")
    wait_until_gone({driver})
    assert not (tmp_path / "interrupted" / "summary.json").exists()
    privsilo("pool", "stop")


@pytest.fixture(scope="module")
def other_user() -> Iterator[str]:
    """A second Unix user (created for the test, removed after it): needs root."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("a second Unix user needs root and useradd; this test runs as a user without them")
    try:
        pwd.getpwnam(OTHER_USER)
        created = False
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER], check=True)
        created = True
    yield OTHER_USER
    if created:
        subprocess.run(["userdel", OTHER_USER], check=False)


def listening_addresses(pids: set[int]) -> set[str]:
    """The local addresses of the TCP sockets the processes ``pids`` listen on (from /proc)."""
    inodes = set()
    for pid in pids:
        try:
            inodes |= {os.readlink(fd.path)[8:-1] for fd in os.scandir(f"/proc/{pid}/fd")
                       if os.readlink(fd.path).startswith("socket:[")}
        except OSError:
            continue  # it ended meanwhile
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state, inode = (fields := line.split())[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # LISTEN
                packed = bytes.fromhex(local.split(":")[0])
                host = b"".join(packed[i:i + 4][::-1] for i in range(0, len(packed), 4))  # words in host order
                address = ipaddress.ip_address(host)
                found.add(str(getattr(address, "ipv4_mapped", None) or address))
    return found


def test_only_the_pools_owner_can_join_it_or_read_its_files_and_only_with_the_pools_code(state_dir, other_user, tmp_path):
    state, processes = started_pool("--idle-timeout", "600")
    ready_driver()  # its socket is one of the files the other user tries
    assert state.address.startswith("127.0.0.1:")
    status = privsilo("pool", "status").stdout.splitlines()  # the owner joins with the token
    assert status[1:] == ["no actor in the local pool yet (the next run, sweep, audit or attack starts them)"]
    assert listening_addresses(processes) == {"127.0.0.1"}  # the GCS, the raylet, its workers: loopback only
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    files = sorted(path.name for path in state_dir.iterdir())
    assert files == ["local-pool.json", "local-pool.log", "ray-auth-token", driver_protocol.SOCKET_NAME]
    assert all(stat.S_IMODE((state_dir / name).stat().st_mode) == 0o600 for name in files)

    def intrude(*how: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "tests.support.pool_intruder", other_user, str(state_dir), state.address,
                               *how], capture_output=True, text=True, cwd=REPO, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads(proc.stdout.splitlines()[-1])
        assert report["uid"] == pwd.getpwnam(other_user).pw_uid
        assert report["files"] == {name: "PermissionError" for name in [".", *files]}
        return report

    for how in (["--no-token"], ["--token-guess"]):
        assert intrude(*how)["joined"].startswith("AuthenticationError: RPC error: InvalidAuthToken"), how
    # the control: the same user, handed the token, gets in (so the token, not the user's files, is the gate)
    assert intrude("--token-from", str(state_dir / "ray-auth-token"))["joined"].startswith("read ")

    # the owner, running another copy of privsilo (edited): the pool's workers would run the pool's code, so the
    # command neither joins the pool nor hands itself to the pool's ready driver
    copy = tmp_path / "copy"
    shutil.copytree(REPO / "privsilo", copy / "privsilo", ignore=shutil.ignore_patterns("__pycache__"))
    for package in ("simulator", "mechanisms", "protocols"):  # laid out as the wheel installs them
        shutil.copytree(REPO / package, copy / "privsilo" / package, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "privsilo" / "simulator" / "engine" / "silo.py").open("a") as edited:
        edited.write("\nEDITED = True\n")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(federation={"rounds": 1, "client_rate": 1.0, "local_steps": 2,
                                                                  "batch_size": 32, "lr": 0.1})))
    other_code = subprocess.run([sys.executable, "-m", "privsilo.simulator.cli", "run", str(scenario), "--no-progress", "--out",
                                 str(tmp_path / "out")], capture_output=True, text=True, cwd=copy, timeout=600,
                                env={**os.environ, "PYTHONPATH": str(copy)})
    assert other_code.returncode == 0, other_code.stderr[-3000:]
    assert other_code.stdout.splitlines()[0] == (f"privsilo: the local pool runs privsilo from {REPO}, this command "
                                                 f"from {copy / 'privsilo'}; it starts Ray of its own")
    assert privsilo("pool", "status").stdout.splitlines()[1:] == status[1:]  # still no actor in the pool


@pytest.mark.timeout(1800)
def test_a_run_interrupted_on_the_pool_resumes_after_the_pool_is_gone_with_an_uninterrupted_runs_results(state_dir, tmp_path):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(name="outlives", checkpoint={"every": 1}, federation={
        "rounds": 40, "client_rate": 1.0, "local_steps": 5, "batch_size": 32, "lr": 0.1})))
    state, _ = started_pool("--idle-timeout", "600")
    interrupted = tmp_path / "interrupted"
    caller = subprocess.Popen([sys.executable, "-m", "privsilo.simulator.cli", "run", str(scenario), "--no-progress", "--out",
                               str(interrupted)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                              preexec_fn=foreground_job)
    deadline = time.monotonic() + GONE_WITHIN_S
    while not (interrupted / "checkpoint.pkl").exists():
        assert time.monotonic() < deadline and caller.poll() is None, f"no checkpoint: {caller.communicate()[1][-3000:]}"
        time.sleep(0.1)
    signals = signal_masks(caller.pid), signal_masks(local_pool.read_state().driver[0])  # should the SIGINT go unanswered
    caller.send_signal(signal.SIGINT)
    out, err = caller.communicate(timeout=600)
    assert caller.returncode == 130 and f"Ray head at {state.address}" in out, (signals, out[-2000:] + err[-3000:])
    privsilo("pool", "stop")

    resumed = privsilo("resume", str(interrupted), "--no-progress")  # the pool's head is gone: Ray of its own
    assert "local warm pool" not in resumed.stdout and state.address not in resumed.stdout + resumed.stderr
    privsilo("run", str(scenario), "--no-progress", "--out", str(tmp_path / "whole"))
    assert (metrics_without_wall_times(interrupted / "metrics.csv")
            == metrics_without_wall_times(tmp_path / "whole" / "metrics.csv"))
    whole, model = torch.load(tmp_path / "whole" / "model.pt"), torch.load(interrupted / "model.pt")
    assert whole.keys() == model.keys() and all(torch.equal(whole[k], model[k]) for k in whole)


def malformed_messages(seed: int, count: int) -> Iterator[tuple[bytes, bool]]:
    """``count`` byte strings that are not a caller's request (seeded), each with whether to send three file
    descriptors with it: random bytes, lengths up to 2**64 - 1, truncated bodies, JSON that is not an object, nested
    deeply, not UTF-8, and requests with fields missing, of the wrong type or holding non-strings."""
    import random

    rng = random.Random(seed)
    good = {"argv": ["run"], "cwd": "/", "environ": {}, "sys_path": [], "fingerprint": driver_protocol.fingerprint(),
            "umask": 0o22}

    def framed(body: bytes, length: int | None = None) -> bytes:
        return (len(body) if length is None else length).to_bytes(8, "big") + body

    def spoiled() -> dict:  # each field chosen is left out or given a value it may not hold
        request = dict(good)
        for name in rng.sample(sorted(good), rng.randint(1, 3)):
            kind = driver_protocol.REQUEST_FIELDS[name]
            wrong = [v for v in (None, True, 1.5, -1, "x", [], {}, 2 ** 70) if not isinstance(v, kind) or v is True]
            wrong += [[1], [None]] if kind is list else [{"a": 1}] if kind is dict else []
            if rng.random() < 0.4:
                del request[name]
            else:
                request[name] = rng.choice(wrong)
        return request

    makers = [
        lambda: rng.randbytes(rng.randint(0, 300)),
        lambda: framed(b"", rng.choice([2 ** 62, 2 ** 64 - 1, driver_protocol.MAX_MESSAGE_BYTES + 1])),
        lambda: framed(b'{"argv": [', rng.randint(11, 5000)),  # shorter than it says, then the sender leaves
        lambda: framed(json.dumps(rng.choice([[1, 2], "x", 3, None, 1.5, True])).encode()),
        lambda: framed(b"[" * rng.randint(10_000, 200_000)),
        lambda: framed(b'{"a": "\xff\xfe"}'),
        lambda: framed(json.dumps(spoiled()).encode()),
        lambda: framed(rng.randbytes(rng.randint(1, 200))),
    ]
    for _ in range(count):
        yield rng.choice(makers)(), rng.random() < 0.5


def test_the_ready_driver_survives_any_bytes_and_slow_senders_and_honours_the_callers_umask(state_dir, tmp_path):
    import socket

    started_pool("--idle-timeout", "600")
    driver = ready_driver()
    path = state_dir / driver_protocol.SOCKET_NAME
    sent = 0
    with open(os.devnull) as null:
        for message, with_fds in malformed_messages(seed=39, count=150):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.connect(str(path))
                try:
                    if with_fds:
                        socket.send_fds(connection, [message[:1] or b"\0"], [null.fileno()] * 3)
                        message = message[1:]
                    connection.sendall(message)
                    connection.shutdown(socket.SHUT_WR)
                    connection.recv(1 << 16)  # the refusal, or the end
                except OSError:
                    pass  # the driver closed first: it had read enough to refuse
            sent += 1
    assert process_start(driver) is not None and ready_driver() == driver
    log = (state_dir / "local-pool.log").read_text()
    assert log.count("ready driver: ignored a connection that sent no request") == sent and "Traceback" not in log

    slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a sender that stalls after its first bytes
    slow.connect(str(path))
    slow.sendall((100).to_bytes(8, "big") + b"{")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(federation={"rounds": 1, "client_rate": 1.0, "local_steps": 2,
                                                                  "batch_size": 32, "lr": 0.1})))
    proc = subprocess.run([sys.executable, "-m", "privsilo.simulator.cli", "run", str(scenario), "--no-progress", "--out",
                           str(tmp_path / "private")], capture_output=True, text=True, cwd=REPO, timeout=600,
                          preexec_fn=lambda: os.umask(0o077))
    slow.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    wait_until_gone({driver})  # the real command was served by that driver
    assert "(TimeoutError" in (state_dir / "local-pool.log").read_text()  # the stalled sender was dropped
    written = [tmp_path / "private", *(tmp_path / "private").rglob("*")]
    modes = {p.relative_to(tmp_path).as_posix(): oct(stat.S_IMODE(p.stat().st_mode)) for p in written}
    assert all(mode == ("0o700" if p.is_dir() else "0o600") for p, mode in zip(written, modes.values())), modes


@pytest.mark.timeout(1800)
def test_a_killed_ready_driver_supervisor_or_caller_ends_the_command_with_one_line_naming_the_resume_command(state_dir, tmp_path):
    state, _ = started_pool("--idle-timeout", "600")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(name="lost", checkpoint={"every": 1}, federation={
        "rounds": 400, "client_rate": 1.0, "local_steps": 20, "batch_size": 32, "lr": 0.1})))

    def killed_midway(name: str, victim) -> tuple[int, list[str], float]:
        """Start a run in the pool's ready driver, SIGKILL ``victim(caller)`` once the run checkpointed: the
        caller's exit status, its stderr lines (all the driver wrote there) and the seconds from the kill to then."""
        ready_driver()
        out = tmp_path / name
        caller = subprocess.Popen([sys.executable, "-m", "privsilo.simulator.cli", "run", str(scenario), "--no-progress",
                                   "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        deadline = time.monotonic() + GONE_WITHIN_S
        while not (out / "checkpoint.pkl").exists():
            assert time.monotonic() < deadline and caller.poll() is None, f"no checkpoint: {caller.communicate()[1][-3000:]}"
            time.sleep(0.1)
        os.kill(victim(caller), signal.SIGKILL)
        killed = time.monotonic()
        _, err = caller.communicate(timeout=600)  # until the driver too let go of the caller's stderr
        assert "Traceback" not in err, err[-3000:]
        return caller.returncode, err.splitlines(), time.monotonic() - killed

    resume = f"no results were written; continue from the last checkpoint with: privsilo resume {tmp_path / '{}'}"
    driver = ready_driver()
    code, err, seconds = killed_midway("driver", lambda _: driver)
    assert code == 1 and err == [f"privsilo: error: the local pool's ready driver (pid {driver}) that ran this command "
                                 f"ended without an exit status (log: {state_dir / 'local-pool.log'}); {resume.format('driver')}"]
    print(f"a killed ready driver: the caller exited {seconds:.1f} s after")
    code, err, _ = killed_midway("caller", lambda caller: caller.pid)  # the driver interrupts the run, as Ctrl-C would
    assert code == -signal.SIGKILL and err == [f"privsilo: interrupted; {resume.format('caller')}"]
    code, err, seconds = killed_midway("supervisor", lambda _: state.pid)
    assert code == 1 and err == [f"privsilo: error: the local pool stopped while this command ran (its supervisor, pid "
                                 f"{state.pid}, is gone); {resume.format('supervisor')}"]  # none of Ray's complaints
    print(f"a killed supervisor: the caller exited {seconds:.1f} s after")


@pytest.mark.timeout(1800)
def test_concurrent_runs_of_different_actor_shapes_on_a_two_cpu_pool_all_finish(state_dir, tmp_path):
    """Two runs started at the same moment while a third runs, no two of which fit the pool at once: they take
    turns at starting actors (all or nothing) instead of each holding part of what the other needs, the one that
    waits says for whom, and all three finish."""
    started_pool("--idle-timeout", "600", "--num-cpus", "2")
    commands, runs, drivers = {}, {}, set()
    for name, cpus, rounds in (("a", 0.6, 40), ("b", 0.5, 30), ("c", 0.4, 30)):  # no two of them fit the pool at once
        scenario = tmp_path / f"{name}.yaml"
        scenario.write_text(yaml.safe_dump(small_scenario(name=name, checkpoint={"every": 1}, resources={"server": {"num_cpus": 1.0}, "silo": {
            "num_cpus": cpus, "num_gpus": 0}}, federation={"rounds": rounds, "client_rate": 1.0, "local_steps": 5,
                                                           "batch_size": 32, "lr": 0.1})))
        commands[name] = [sys.executable, "-m", "privsilo.simulator.cli", "run", str(scenario), "--no-progress", "--out", str(tmp_path / name)]
    drivers.add(ready_driver())  # it serves a, the first command
    runs["a"] = subprocess.Popen(commands["a"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.monotonic() + GONE_WITHIN_S
    while not (tmp_path / "a" / "checkpoint.pkl").exists():
        assert time.monotonic() < deadline and runs["a"].poll() is None, "run a did not start its rounds"
        time.sleep(0.2)
    if (state := local_pool.read_state()).driver is not None:  # the next ready driver, if it listens, serves b or c
        drivers.add(state.driver[0])
    for name in ("b", "c"):  # at the same moment, while a runs
        runs[name] = subprocess.Popen(commands[name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline, outputs = time.monotonic() + 900, {}  # a deadlock fails the test, not the CI run's time limit
    try:
        for name, run in runs.items():
            outputs[name] = run.communicate(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        for run in runs.values():
            run.kill()
        pytest.fail(f"runs {sorted(set(runs) - set(outputs))} did not finish within 900 s: "
                    f"{[run.communicate()[1][-2000:] for run in runs.values()]}")
    for name, run in runs.items():
        assert run.returncode == 0, outputs[name][0][-2000:] + outputs[name][1][-3000:]
        assert (tmp_path / name / "summary.json").exists()
    holders = {run.pid for run in runs.values()} | drivers  # a command runs in its caller's process or a ready driver
    waited = [line for name in ("b", "c") for line in outputs[name][1].splitlines() if line.startswith("privsilo: waiting")]
    print("\n".join(waited))
    assert waited, outputs  # one of them waited for the other (or for a)
    for line in waited:
        named = {int(pid) for pid in re.findall(r"the run of pid (\d+) on ", line)}
        assert line.startswith("privsilo: waiting for CPUs/GPUs held by the run of pid ") and named <= holders, (line, holders)


def test_runs_take_turns_at_starting_actors_in_any_order_of_leases_ends_and_deaths(monkeypatch):
    """The pool's registry (no Ray: its kills and Ray's job table stand in) under random interleavings of six
    drivers leasing, getting their actors scheduled, giving them back and dying: at most one run at a time holds
    part of its actors while waiting for the rest, a run told to wait holds nothing, the line is first come first
    served, and a run that died gives up its turn, its place and its actors."""
    import random

    from privsilo.simulator.runtime.pool import registry as detached_pool

    class NoThread:  # the registry's expiry thread: the test calls what it would
        def __init__(self, **_) -> None:
            pass

        def start(self) -> None:
            pass

    alive, killed = set(), []
    monkeypatch.setattr(detached_pool.threading, "Thread", NoThread)
    monkeypatch.setattr(detached_pool, "running_jobs", lambda: set(alive))
    monkeypatch.setattr(detached_pool, "_kill", killed.append)
    rng = random.Random(39)
    for _ in range(40):
        registry = detached_pool.PoolRegistry()
        keys = [detached_pool.PoolKey("SiloWorker", cpus, 0.0, "v") for cpus in (0.4, 0.5, 0.6)]
        state, asked = {}, {}  # job -> "out" | "queued" | "starting" | "running"; queued job -> when it asked
        names: dict[str, list[str]] = {}
        for job in map(str, range(6)):
            state[job] = "out"
            alive.add(job)
        for step in range(200):
            if not alive:
                break
            job = rng.choice(sorted(alive))
            if state[job] in ("out", "queued"):
                answer, _ = registry.lease(job, [(rng.choice(keys), rng.randint(1, 3))], holder=f"pid {job}")
                ahead = [other for other in asked if other != job and other in alive and asked[other] < asked.get(job, step)]
                if answer is None:  # only while another run starts actors, or one that asked first waits
                    assert ahead or any(state[other] == "starting" for other in alive if other != job), (job, state)
                    asked.setdefault(job, step)
                    state[job] = "queued"
                else:
                    assert not ahead and all(state[other] != "starting" for other in alive if other != job), (job, state)
                    asked.pop(job, None)
                    names[job] = [name for idle, new in answer for name in idle + new]
                    state[job] = "starting" if any(new for _, new in answer) else "running"
            elif state[job] == "starting" and rng.random() < 0.7:
                registry.wait(job)
                registry.done(job)  # its actors are scheduled
                state[job] = "running"
            elif state[job] == "running" and rng.random() < 0.5:
                registry.give_back(names.pop(job), idle_timeout=rng.choice([0.0, 600.0]))
                registry.done(job)
                state[job] = "out"
            elif rng.random() < 0.1:  # its driver dies, whatever it was doing
                alive.discard(job)
                asked.pop(job, None)
                registry.status()  # the registry notices (as its thread would within 2 s)
                assert not any(entry.job == job for entry in registry.status()) and job not in registry._queue
                state[job] = "dead"
            holding = {entry.job for entry in registry.status() if entry.job is not None}
            assert holding == {other for other in alive if state[other] in ("starting", "running")}
            assert sum(state[other] == "starting" for other in alive) <= 1
            assert registry._turn in {None} | {other for other in alive if state[other] == "starting"}
        alive.clear()
    assert killed  # idle actors not taken were stopped, and so were the actors of runs that died
