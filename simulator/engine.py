"""The round loop: builds the federation of Ray actors for a scenario, runs it and collects the results.

``run(scenario)`` is the Python form of ``privsilo run``: it returns a [`RunResult`][simulator.engine.RunResult] and, given
``out_dir``, writes the run's files there atomically (see ``simulator.reports``).
"""
from __future__ import annotations

import math
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import ray
import torch
from tqdm.auto import tqdm

from mechanisms.base import PrivacyAccountant, PrivacyBudgetError, model_to_vector
from mechanisms.canaries import SiloCanaries
from mechanisms.events import PrivacyEvent
from protocols.fixed_point import EncodingOverflowError
from simulator.actors import ServerActor, SiloWorker
from simulator.cluster import ActorDemand, Capacity, ray_session, worker_count
from simulator.data import Dataset
from simulator.data.sources import scenario_dataset
from simulator.data.rotations import rotate_silos
from simulator.data.silos import run_seeds, silo_records
from simulator.data.users import UserAllocation
from simulator.checkpoint import check_parts, read_checkpoint, write_checkpoint
from simulator.errors import PrivsiloError, RuntimeFault, ScenarioError
from simulator.messages import RoundReport, SiloInfo
from simulator.models import build_scenario_model
from simulator.node_watch import Node, NodeWatch
from simulator.output_dirs import check_replaceable
from simulator.personalisation.evaluation import personalised_evaluator
from simulator.run_directory import clear, settle
from simulator.run_lock import locked
from simulator.results import RoundRecord, RunResult
from simulator.scenario import Scenario, resolve_scenario, with_changes
from simulator.shipping import code_to_ship
from simulator.silo import SiloSpec
from simulator.faults import crash_plan
from simulator.snapshots import SnapshotVault
from simulator.detached_pool import pool_for
from simulator.worker_pool import ActorShape, WorkerPool, wait_until_scheduled

ACTOR_START_TIMEOUT_S = 300
HEAD_NODE_RESOURCE = "node:__internal_head__"  # Ray gives the head node one unit of it
UNREADY_RELEASE_TIMEOUT_S = 5  # a failed start hands back the actors that answer by then, and stops the others


def run(
    scenario: Scenario | Mapping[str, Any] | str | Path,
    *,
    out_dir: str | Path | None = None,
    address: str | None = None,
    overrides: list[str] | None = None,
    progress: bool = False,
    log: Sequence[str] = (),
    invocation: Mapping[str, Any] | None = None,
    resume: bool = False,
    checkpoint_dir: str | Path | None = None,
    canaries: Mapping[int, SiloCanaries] | None = None,
    on_round: Callable[["Federation"], None] | None = None,
    tracking_dir: str | Path | None = None,
) -> RunResult:
    """Run a scenario on Ray and return its results; write them to ``out_dir`` if given (a fresh run first
    empties it), with each round's metrics also logged, as the round ends, for each tracker in ``log``
    (``"tensorboard"``) into ``tracking_dir`` (default ``out_dir/tensorboard``). ``invocation`` is recorded in
    summary.json (default: this call's ``overrides``, no command line; see ``simulator.invocation``). ``address``:
    the Ray head to join for this run alone; summary.json and the checkpoint record it as ``ray.address``, but a
    resume joins the head its own command gives (a local pool's head may be gone by then).

    Checkpoints go to ``checkpoint_dir`` (default ``out_dir``; none without either) every ``checkpoint.every``
    rounds; ``resume`` continues the run from the checkpoint there, with the same results as a run never
    interrupted (see ``simulator.checkpoint``). Both directories are locked for the run
    (``simulator.run_lock``), and the run finishes in one step (``simulator.run_directory``).
    ``canaries``: an audit's canaries by host silo (see ``simulator.audit``); ``on_round``: called with the
    federation after each round (an audit reading what the server received, ``server_inbox()``)."""
    from simulator.invocation import invocation as api_invocation
    from simulator.tracking import TENSORBOARD_DIR, check_trackers

    check_trackers(log)
    scenario = resolve_scenario(scenario, overrides)
    if scenario.audit is not None and canaries is None:
        raise ScenarioError("audit", scenario.audit.model_dump(), "a plain run does nothing with it (privsilo audit reads it); "
                            "remove the block, or run privsilo audit (`--set audit=null` runs the scenario without it)")
    given = scenario.explicit_dict()  # what a resume runs: not the head it ran on (a local pool's lives no longer)
    if address:
        scenario = with_changes(scenario, {"ray": {"address": address}})
    checkpoints = checkpoint_dir if checkpoint_dir is not None else out_dir
    if resume and checkpoints is None:
        raise ScenarioError("resume", True, "needs the directory of the interrupted run (out_dir or checkpoint_dir)")
    invocation = invocation or api_invocation(None, overrides)
    if tracking_dir is None and out_dir is not None:
        tracking_dir = Path(out_dir) / TENSORBOARD_DIR
    output = LiveOutput(fresh=None if resume or out_dir is None else Path(out_dir), log=log if tracking_dir else (),
                        tracking_dir=tracking_dir, resume_with={"overrides": list(invocation["overrides"]), "log": list(log),
                                                          "scenario": given})
    with ExitStack() as held:
        for directory in dict.fromkeys(Path(d) for d in (out_dir, checkpoints) if d is not None):
            held.enter_context(locked(directory))
        if out_dir is not None:
            settle(Path(out_dir))
            if not resume:  # before any work: a fresh run empties it (LiveOutput.open)
                check_replaceable(Path(out_dir))
        result = _run(scenario, progress=progress, checkpoint_dir=None if checkpoints is None else Path(checkpoints),
                      resume=resume, import_reports=out_dir is not None, canaries=canaries, on_round=on_round, output=output)
        if out_dir is not None:
            from simulator.reports import write_run  # imported during the rounds

            write_run(result, Path(out_dir), invocation=invocation)
    return result


class LiveOutput:
    """What a run writes while it runs, besides checkpoints: once its federation is ready, a fresh run empties its
    output directory ``fresh``; then each round's metrics go to the trackers in ``log`` (into ``tracking_dir``)
    as the round ends. ``resume_with`` goes into every checkpoint's header (``write_checkpoint``)."""

    def __init__(self, *, fresh: Path | None = None, log: Sequence[str] = (), tracking_dir: str | Path | None = None,
                 resume_with: Mapping[str, Any] | None = None) -> None:
        self.fresh, self.log, self.tracking_dir = fresh, tuple(log), tracking_dir
        self.resume_with = dict(resume_with or {})
        self.trackers: list[Any] = []

    @contextmanager
    def open(self, *, first_round: int) -> Iterator[LiveOutput]:
        """Empty ``fresh`` and open the trackers, logging from round ``first_round`` (0-based) on."""
        from simulator.tracking import open_trackers

        if self.fresh is not None:
            clear(self.fresh)
        if self.log:
            self.trackers = open_trackers(self.log, Path(self.tracking_dir), first_step=first_round + 1)
        try:
            yield self
        finally:
            for tracker in self.trackers:
                tracker.close()

    def round_done(self, record: RoundRecord) -> None:
        for tracker in self.trackers:
            tracker.write(record.report.round_index + 1, record)


def _reports_module() -> None:
    """Import ``simulator.reports`` (and so matplotlib)."""
    from simulator import reports  # noqa: F401


def _in_background(function: Callable[..., Any], *args: Any) -> Future:
    """``function(*args)`` in a thread of its own, while the caller goes on."""
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="privsilo")
    future = thread.submit(function, *args)
    thread.shutdown(wait=False)
    return future


def _initial_state(scenario: Scenario, dataset: Dataset, seed: int) -> tuple[np.ndarray, ...]:
    """One freshly initialised model per hypothesis, drawn one after the other from ``seed`` (the first is the
    single model of every one-hypothesis mechanism)."""
    count = scenario.mechanism.build().num_hypotheses()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        models = [build_scenario_model(scenario.model, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes) for _ in range(count)]
    return tuple(model_to_vector(model) for model in models)


def resources_needed(scenario: Scenario, capacity: Capacity) -> ActorDemand:
    """What a run asks Ray for at once: a server actor and the silo workers (``resources.silos_per_actor``, with
    ``auto`` resolved against ``capacity``)."""
    res = scenario.resources
    shares = dict(server_cpus=res.server.num_cpus, server_gpus=res.server.num_gpus, silo_cpus=res.silo.num_cpus,
                  silo_gpus=res.silo.num_gpus)
    workers = worker_count(silos=scenario.data.silos, silos_per_actor=res.silos_per_actor, capacity=capacity, **shares)
    return ActorDemand(silos=scenario.data.silos, workers=workers, **shares)


def pack_silos(num_silos: int, workers: int) -> tuple[tuple[int, ...], ...]:
    """Silo ids hosted by each worker: consecutive blocks whose sizes differ by at most one."""
    return tuple(tuple(int(i) for i in block) for block in np.array_split(np.arange(num_silos), workers))


def record_events(accountant: PrivacyAccountant, events_by_silo: Mapping[int, Sequence[PrivacyEvent]]) -> None:
    """Feed privacy events (a round's, or the silos' start-up announcements) to the accountant, in silo id order."""
    for silo_id, events in sorted(events_by_silo.items()):
        for event in events:
            accountant.record(silo_id, event)


class Federation:
    """The server and silo actors of one scenario, for scripts that drive rounds themselves (e.g. attacks).

    Use as a context manager: entering loads the data, starts (or joins) Ray, starts the actors and runs the
    protocol set-up; leaving stops exactly the actors it started (and Ray, if it started it).

    An attack script plays an adversary: it may use what that adversary sees (``server_inbox()``,
    ``model_state()``, round reports, ``placement``) but must not read ``scenario.seed`` or anything derived
    from it. Without ``secure_rng`` every silo's sampling and noise follow from the seed, so a script that reads
    it replays the noise and defeats the DP guarantee by construction rather than by attack.
    """

    def __init__(
        self,
        scenario: Scenario | Mapping[str, Any] | str | Path,
        *,
        snapshots: bool = False,
        resume_from: Mapping[str, Any] | None = None,
        canaries: Mapping[int, SiloCanaries] | None = None,
    ) -> None:
        """``snapshots``: the silos keep snapshots in a vault (always with injected crashes; needed for
        checkpoints); ``resume_from``: a checkpoint (``simulator.checkpoint``) whose state the federation
        takes instead of running the protocol set-up; ``canaries``: an audit's canaries by host silo."""
        self.scenario = resolve_scenario(scenario)
        self.resume_from = resume_from
        self.canaries = dict(canaries or {})
        self.snapshots = snapshots or self.scenario.faults.any or resume_from is not None
        self.crash_plan = crash_plan(self.scenario.faults, seed=self.scenario.seed, num_silos=self.scenario.data.silos,
                                     rounds=self.scenario.federation.rounds)
        self._stack = ExitStack()
        self.timing: dict[str, float] = {}
        self.protocol_timing: dict[str, float] = {}  # parts of protocol_setup_seconds: the protocol's set-up, silo and server side
        self.users: UserAllocation | None = None
        self._ready = False  # the actors answered their set-up (see _lease)

    def __enter__(self) -> "Federation":
        try:
            self._start()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _start(self) -> None:
        scenario, t0 = self.scenario, time.perf_counter()
        # The data loads in a thread while Ray starts (or is joined) and the actors start: the main thread mostly
        # waits for other processes meanwhile.
        loading = _in_background(self._load_data)
        demand = self._stack.enter_context(ray_session(
            address=scenario.ray.address, demand_for=lambda capacity: resources_needed(scenario, capacity),
            connect_timeout=scenario.ray.connect_timeout, ship=code_to_ship([scenario]),
        ))
        self.packing = pack_silos(scenario.data.silos, demand.workers)
        if self.resume_from is not None and tuple(self.resume_from["packing"]) != self.packing:
            # which silos share a worker decides which crash together: a resumed run must pack as the first did
            raise ScenarioError("resources.silos_per_actor", scenario.resources.silos_per_actor,
                                f"the checkpoint's run packed the silos into {len(self.resume_from['packing'])} workers, this one "
                                f"into {len(self.packing)}; set resources.silos_per_actor to "
                                f"{max(len(h) for h in self.resume_from['packing'])} (and give Ray the CPUs it needs) to resume")
        res = scenario.resources
        worker_shape = ActorShape(SiloWorker, num_cpus=res.silo.num_cpus, num_gpus=res.silo.num_gpus)
        server_shape = ActorShape(ServerActor, num_cpus=res.server.num_cpus, num_gpus=res.server.num_gpus)
        leased = self._lease({worker_shape: len(self.packing), server_shape: 1})  # new actors start meanwhile
        self.workers, (self.server,) = leased[worker_shape], leased[server_shape]
        t_ray = time.perf_counter()
        self._specs = loading.result()
        t_data = time.perf_counter()
        seeds = run_seeds(scenario.seed, scenario.data.silos)
        self.vault = None
        if self.snapshots:
            # the silos' stable storage lives on the head node (whose loss ends the cluster anyway), so that losing
            # another node never loses it
            self.vault = ray.remote(SnapshotVault).options(num_cpus=0, resources={HEAD_NODE_RESOURCE: 0.001}).remote()
            self._stack.callback(ray.kill, self.vault)
        # The training set goes into the object store once; every worker reads its silos' records from there.
        histogram = None if self.users is None else self.users.histogram()
        self._hosting = dict(features=ray.put(self.dataset.x_train), labels=ray.put(self.dataset.y_train), scenario=scenario,
                             feature_shape=self.dataset.feature_shape, num_classes=self.dataset.num_classes,
                             user_histogram=histogram, vault=self.vault)
        hosting = [self._host(index) for index in range(len(self.workers))]
        opened = self.server.open.remote(
            scenario=scenario,
            workers=tuple(zip(self.workers, self.packing)),
            test_features=self.dataset.x_test,
            test_labels=self.dataset.y_test,
            initial_state=_initial_state(scenario, self.dataset, seeds["init"]),
            feature_shape=self.dataset.feature_shape,
            num_classes=self.dataset.num_classes,
            seed=seeds["server"],
        )
        try:
            infos, construction = _wait_for_workers(hosting, self._pool)
            ray.get(opened)
        except ray.exceptions.RayTaskError as exc:
            if (error := _user_code_error(scenario, exc)) is None:
                raise
            raise error from None
        self.placement = tuple(sorted(infos, key=lambda info: info.silo_id))
        self._note_nodes(infos)
        self.nodes = self._stack.enter_context(NodeWatch(self._node_died))
        _warn_gpu_fallback(self.placement)
        t_workers = time.perf_counter()
        if self.resume_from is None:
            self.protocol_timing = ray.get(self.server.setup.remote())
            t_protocol = time.perf_counter()
            if self.vault is not None:  # a silo that crashes before its first upload comes back with its keys
                ray.get([worker.save_snapshots.remote() for worker in self.workers])
        else:
            t_protocol = t_workers
            ray.get(self.vault.put.remote(self.resume_from["silos"]))
            ray.get([worker.restore_snapshots.remote() for worker in self.workers] + [self.server.restore.remote(self.resume_from["server"])])
        t_setup = time.perf_counter()
        # data_seconds: what the data cost beyond the start of Ray and the actors (it loads meanwhile); the silos'
        # first snapshots (or, resuming, their restoration) count with the workers, not with the protocol set-up
        self.timing.update(data_seconds=t_data - t_ray, workers_seconds=t_ray - t0 + t_workers - t_data + t_setup - t_protocol,
                           protocol_setup_seconds=t_protocol - t_workers)
        self.silo_construction_seconds = construction
        self._ready = True

    def _load_data(self) -> list[SiloSpec]:
        """Load the dataset and partition it (``dataset``, ``users``, ``parts``); the silos' specs."""
        scenario = self.scenario
        self.dataset = scenario_dataset(scenario.data, seed=scenario.seed)
        seeds = run_seeds(scenario.seed, scenario.data.silos)
        self.parts, self.users = silo_records(scenario, self.dataset)
        if scenario.data.rotations is not None:  # never with data.users: the parts are the partition's
            self.dataset = rotate_silos(self.dataset, self.parts, angles=scenario.data.rotations)
        return [SiloSpec(silo_id=i, record_ids=idx, seed=seeds["silos"][i],
                         user_ids=None if self.users is None else self.users.silo_user_ids[i], canaries=self.canaries.get(i))
                for i, idx in enumerate(self.parts)]

    def _host(self, worker_index: int) -> Any:
        """Have worker ``worker_index`` build its silos (and know their injected crashes); returns the call's ref."""
        hosted = self.packing[worker_index]
        return self.workers[worker_index].host.remote(
            specs=tuple(self._specs[i] for i in hosted), crashes=self.crash_plan.restricted_to(hosted), **self._hosting)

    def _note_nodes(self, infos: Sequence[SiloInfo]) -> None:
        """Which node hosts each worker now (from its silos' infos)."""
        host = {silo: worker for worker, hosted in enumerate(self.packing) for silo in hosted}
        self._node_of_worker = getattr(self, "_node_of_worker", {}) | {host[info.silo_id]: info.node_id for info in infos}

    def _node_died(self, node: Node) -> None:
        """Say at once that a node died and what the run loses with it (the watch's thread calls this)."""
        silos = [silo for worker, node_id in self._node_of_worker.items() if node_id == node.node_id for silo in self.packing[worker]]
        hosted = (f"its silos {silos} drop out and rejoin once Ray restarts their workers on a node with room (the run "
                  f"stops if that takes over federation.round_timeout = {self.scenario.federation.round_timeout:g} s)"
                  if silos else "it hosted none of this run's silos")
        warnings.warn(f"Ray node {node} died; {hosted}", RuntimeWarning, stacklevel=2)

    def _lost_nodes(self) -> str:
        """The nodes seen dead during the run, in words (empty if none)."""
        dead = list(self.nodes.dead.values()) if hasattr(self, "nodes") else []
        return f" (Ray node {', '.join(map(str, dead))} died)" if dead else ""

    def fault(self, problem: str) -> RuntimeFault:
        """The run cannot go on because its processes or nodes failed: ``problem``, and the nodes that died. The
        federation then waits only briefly for its actors as it closes (some are gone)."""
        self._ready = False
        return RuntimeFault(f"{problem}{self._lost_nodes()}; the cluster lost the run's actors, not its input")

    def recover(self, crashed_workers: Sequence[int], *, round_index: int | None = None) -> None:
        """Bring back the silos of workers whose process died: Ray restarts the process, which builds its silos
        again and replaces each by its latest snapshot (see ``simulator.snapshots``). A worker that was on a node
        that died gets ``federation.round_timeout`` seconds to come back elsewhere, any other
        ``ACTOR_START_TIMEOUT_S``; then the run stops (``RuntimeFault``, naming ``round_index`` where given)."""
        if self.vault is None:  # rebuilding from the seed would replay draws whose results were released
            raise PrivsiloError(
                f"silo workers {sorted(crashed_workers)} died and this run keeps no snapshots to bring their silos back "
                "(they are kept with an output directory and checkpoint.every > 0, or with a faults block)")
        started = time.monotonic()
        for index in crashed_workers:
            self._wait_until_alive(index, started=started, round_index=round_index)
        try:
            infos, _ = _wait_for_workers([self._host(index) for index in crashed_workers], self._pool)
            self._note_nodes(infos)
            ray.get([self.workers[index].restore_snapshots.remote() for index in crashed_workers])
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
            if isinstance(exc, ray.exceptions.RayTaskError) and not isinstance(_root_cause(exc), ray.exceptions.RayActorError):
                raise
            raise self.fault(f"the silo workers {sorted(crashed_workers)} that crashed could not get their silos back: "
                             f"an actor of the run was lost ({type(_root_cause(exc)).__name__})") from None

    def _wait_until_alive(self, index: int, *, started: float, round_index: int | None) -> None:
        """Wait for Ray to restart worker ``index``, whose process died (calls to it fail while it restarts)."""
        while True:
            lost = self._node_of_worker.get(index) in self.nodes.dead
            limit = self.scenario.federation.round_timeout if lost else ACTOR_START_TIMEOUT_S
            when = "" if round_index is None else f" in round {round_index + 1}"
            what = f"silo worker {index} (silos {list(self.packing[index])}), which crashed{when},"
            try:
                ray.get(self.workers[index].__ray_ready__.remote(), timeout=max(limit - (time.monotonic() - started), 0.05))
                return
            except ray.exceptions.ActorDiedError:
                raise self.fault(f"{what} could not be restarted (Ray reports it dead)") from None
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
                if time.monotonic() - started > limit:
                    setting = "federation.round_timeout" if lost else "the restart limit"
                    raise self.fault(f"{what} was not restarted within {setting} = {limit:g} s: no node with room for it") from None
                time.sleep(0.05)

    def checkpoint_state(self) -> dict[str, Any]:
        """The server's snapshot and every silo's latest snapshot, for a checkpoint."""
        server, silos = ray.get([self.server.snapshot.remote(), self.vault.everything.remote()])
        return {"server": server, "silos": silos}

    def _lease(self, counts: dict[ActorShape, int]) -> dict[ActorShape, list[Any]]:
        """Actors from the run's pool (``simulator.detached_pool.pool_for``), handed back when the federation
        closes, after they dropped this run (those that do not answer are stopped; a federation that failed before
        it was ready waits for them only briefly)."""
        pool = self._pool = pool_for(self.scenario.ray)
        leased = pool.lease(counts)

        def hand_back() -> None:  # actors of a federation that never got ready may not even be scheduled
            for shape, handles in leased.items():
                pool.give_back(shape, handles, **({} if self._ready else {"timeout": UNREADY_RELEASE_TIMEOUT_S}))

        self._stack.callback(hand_back)
        return leased

    def run_round(self, round_index: int) -> RoundReport:
        """Run one round on the server actor and return its report.

        A secure-aggregation overflow in a silo or in the server's decoding surfaces as a one-line
        ``ScenarioError`` naming the setting to change, not as Ray's nested traceback.
        """
        try:
            return ray.get(self.server.run_round.remote(round_index))
        except ray.exceptions.RayActorError:
            raise self.fault(f"round {round_index + 1}: the server actor was lost") from None
        except ray.exceptions.RayTaskError as exc:
            cause = _root_cause(exc)
            if isinstance(cause, EncodingOverflowError):
                raise _overflow_as_scenario_error(self.scenario, cause) from None
            raise

    def watch_inputs(self, silo_ids: Sequence[int]) -> None:
        """Measurement only, for attack reports (never the server): the named silos note which of their records
        local training feeds to the model from now on (see [`watched_records`][simulator.engine.Federation.watched_records])."""
        ray.get([self.workers[w].watch_inputs.remote(ids) for w, ids in self._by_worker(silo_ids).items()])

    def watched_records(self, silo_ids: Sequence[int]) -> dict[int, list[np.ndarray]]:
        """Per named silo, the record ids its local training fed to the model since [`watch_inputs`][simulator.engine.Federation.watch_inputs]."""
        replies = ray.get([self.workers[w].watched_records.remote(ids) for w, ids in self._by_worker(silo_ids).items()])
        return {silo: records for reply in replies for silo, records in reply.items()}

    def _by_worker(self, silo_ids: Sequence[int]) -> dict[int, tuple[int, ...]]:
        host = {silo: worker for worker, hosted in enumerate(self.packing) for silo in hosted}
        grouped: dict[int, tuple[int, ...]] = {}
        for silo in silo_ids:
            grouped[host[silo]] = grouped.get(host[silo], ()) + (int(silo),)
        return grouped

    def server_inbox(self) -> dict[int, Any]:
        """The protocol messages the server received in the last round, by silo id."""
        return ray.get(self.server.last_round_inbox.remote())

    def model_state(self) -> dict[str, torch.Tensor]:
        """The global model as a torch state_dict."""
        return ray.get(self.server.model_state_dict.remote())

    def global_state(self) -> tuple[np.ndarray, ...]:
        """Every hypothesis of the global state, as flat vectors."""
        return ray.get(self.server.global_state.remote())


# What a run's checkpoint holds (besides the federation's snapshots), by name and type: a file of the right format
# and digest without them is not a run's checkpoint and is refused before anything is started from it.
CHECKPOINT_PARTS: dict[str, type | tuple[type, ...]] = {
    "accountant": PrivacyAccountant, "records": list, "packing": (tuple, list), "evaluator": (tuple, type(None)),
    "server": bytes, "silos": dict,
}


def _run(scenario: Scenario, *, progress: bool, checkpoint_dir: Path | None = None, resume: bool = False,
         import_reports: bool = False, canaries: Mapping[int, SiloCanaries] | None = None,
         on_round: Callable[[Federation], None] | None = None, output: LiveOutput | None = None) -> RunResult:
    """The round loop; with ``checkpoint_dir`` a checkpoint every ``checkpoint.every`` rounds, and with ``resume``
    the run continues from the checkpoint there (see ``simulator.checkpoint``). ``import_reports``: import
    the report code (matplotlib) in a thread once the actors are ready, while the driver mostly waits for the
    rounds (during the start-up it would slow the driver's own work). ``output``: what the run writes as it goes."""
    checkpoint = None
    if resume:
        checkpoint = read_checkpoint(checkpoint_dir, scenario=scenario.to_dict(every_key=True))
        check_parts(checkpoint, CHECKPOINT_PARTS, directory=checkpoint_dir)
    every = scenario.checkpoint.every if checkpoint_dir is not None else 0
    output = output or LiveOutput()
    t0 = time.perf_counter()
    with (Federation(scenario, snapshots=every > 0, resume_from=checkpoint, canaries=canaries) as federation,
          output.open(first_round=0 if checkpoint is None else len(checkpoint["records"]))):
        if import_reports:
            _in_background(_reports_module)
        evaluator = personalised_evaluator(scenario, federation.dataset, federation.parts)
        if checkpoint is None:
            accountant = scenario.mechanism.build().accountant()
            accountant.enrol(info.silo_id for info in federation.placement)
            record_events(accountant, {info.silo_id: info.events for info in federation.placement})
            records: list[RoundRecord] = []
        else:
            accountant, records = checkpoint["accountant"], list(checkpoint["records"])
            if evaluator is not None:
                evaluator.history, evaluator.final_state = checkpoint["evaluator"]
        first = len(records)
        bar = tqdm(range(first, scenario.federation.rounds), desc=scenario.name, unit="round", disable=not progress,
                   initial=first, total=scenario.federation.rounds)
        for round_index in bar:
            started = time.perf_counter()
            report = federation.run_round(round_index)
            if report.crashed_workers:
                federation.recover(report.crashed_workers, round_index=round_index)
            if on_round is not None:
                on_round(federation)
            if evaluator is not None:  # personalised: loss and accuracy of the hypothesis each client picks
                report = evaluator.after_round(report, federation.global_state())
            trained = time.perf_counter()
            accountant.round_held(round_index, client_rate=scenario.federation.client_rate)
            record_events(accountant, report.events)
            epsilon = accountant.report()["epsilon"]
            records.append(
                RoundRecord(
                    report=report,
                    epsilon=epsilon,
                    training_seconds=trained - started,
                    accounting_seconds=time.perf_counter() - trained,
                )
            )
            bar.set_postfix(acc=f"{report.accuracy:.3f}", eps="-" if epsilon is None else f"{epsilon:.2f}")
            output.round_done(records[-1])
            if every and (round_index + 1) % every == 0:
                write_checkpoint(checkpoint_dir, {
                    "accountant": accountant, "records": records, "packing": federation.packing,
                    "evaluator": None if evaluator is None else (evaluator.history, evaluator.final_state),
                    **federation.checkpoint_state(),
                }, scenario=scenario.to_dict(every_key=True), resume_with=output.resume_with)
        model_state = federation.model_state()
        placement = federation.placement
        users = None if federation.users is None else federation.users.summary()
        personalisation = None if evaluator is None else evaluator.summary()
        startup = dict(federation.timing)
        construction = federation.silo_construction_seconds
        packing = federation.packing
        protocol_setup = dict(federation.protocol_timing)
    _warn_excess_dropouts(scenario, records)
    privacy = accountant.report()
    ran = records[first:]
    return RunResult(
        scenario=scenario,
        rounds=tuple(records),
        privacy=privacy,
        timing={**_timing(startup, ran, total_seconds=time.perf_counter() - t0), "silo_construction_seconds": construction,
                **_protocol_timing(protocol_setup, ran)},
        placement=placement,
        model_state=model_state,
        users=users,
        packing=packing,
        personalisation=personalisation,
        failures=_failures(scenario, records),
        resumed_from_round=first if checkpoint is not None else None,
    )


def _warn_excess_dropouts(scenario: Scenario, records: Sequence[RoundRecord]) -> None:
    """One warning line when secure aggregation lost more silos in some round than ``protocol.dropout_rate``
    assumed (``summary.json`` lists those rounds)."""
    protocol = scenario.protocol
    if not protocol.secure_aggregation or scenario.mechanism.build().brings_protocol():
        return
    from protocols.secure_aggregation import excess_dropouts, excess_warning

    rounds = ((r.report.round_index, len(r.report.participants), len(r.report.dropped)) for r in records)
    message = excess_warning(excess_dropouts(rounds, dropout_rate=protocol.dropout_rate), dropout_rate=protocol.dropout_rate)
    if message:
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _failures(scenario: Scenario, records: Sequence[RoundRecord]) -> dict[str, Any] | None:
    """``summary.json``'s ``failures``, from the round reports: crashed worker processes (each restarted before the
    next round, or the run stops), silos dropped and rounds abandoned (None for a run without injected crashes in
    which nothing failed). ``left_out`` (only when some round had one) lists every participant the protocol left
    out of a round without a crash (it refused a step or sent a malformed message), with why; ``abandoned``, each
    abandoned round's reason."""
    crashes = sum(len(r.report.crashed_workers) for r in records)
    abandoned = sum(1 for r in records if r.report.abandoned)
    left_out = [{"round": r.report.round_index + 1, "silo": silo, "reason": reason}
                for r in records for silo, reason in sorted(r.report.left_out.items())]
    if not scenario.faults.any and not (crashes or abandoned or left_out):
        return None
    failures = {"crashes": crashes, "restarts": crashes, "silos_dropped": sum(len(r.report.dropped) for r in records),
                "rounds_with_dropouts": sum(1 for r in records if r.report.dropped), "rounds_abandoned": abandoned}
    if left_out:
        failures["left_out"] = left_out
    reasons = [{"round": r.report.round_index + 1, "reason": r.report.abandoned_reason}
               for r in records if r.report.abandoned_reason]
    return {**failures, "abandoned": reasons} if reasons else failures


def _timing(startup: Mapping[str, float], records: Sequence[RoundRecord], *, total_seconds: float) -> dict[str, float]:
    """``summary.json`` timing, in parts that add up: total = the start-up parts (data; workers: starting Ray and
    the worker actors and building the silos; protocol set-up) + rounds + other, and rounds = training +
    accounting (= the sum of ``metrics.csv``'s ``wall_seconds``). ``other_seconds`` is the rest: the start-up
    privacy accounting, fetching the final model, stopping the actors, the final report."""
    training = sum(r.training_seconds for r in records)
    accounting = sum(r.accounting_seconds for r in records)
    rounds = training + accounting
    return {
        **startup,
        "rounds_seconds": rounds,
        "training_seconds": training,
        "accounting_seconds": accounting,
        "seconds_per_round": rounds / len(records) if records else 0.0,
        "other_seconds": total_seconds - sum(startup.values()) - rounds,
        "total_seconds": total_seconds,
    }


def _protocol_timing(setup: Mapping[str, float], records: Sequence[RoundRecord]) -> dict[str, float]:
    """The aggregation protocol's share of the run (not extra to the totals of ``_timing``): its set-up seconds
    (part of ``protocol_setup_seconds``) and its mean seconds per round that ran (part of ``training_seconds``), silo side
    (the slowest participant) and server side."""
    ran = [r.report.protocol_seconds for r in records if not r.report.skipped]
    return {
        **setup,
        "protocol_round_silo_seconds": float(np.mean([p.get("silo", 0.0) for p in ran])) if ran else 0.0,
        "protocol_round_server_seconds": float(np.mean([p.get("server", 0.0) for p in ran])) if ran else 0.0,
    }


def _wait_for_workers(refs: list[Any], pool: WorkerPool) -> tuple[list[SiloInfo], float]:
    """Every hosted silo's info, and the longest time a worker spent constructing its silos (waiting while other
    runs hold the pool's actors: ``simulator.worker_pool.wait_until_scheduled``)."""
    ready, pending, held = wait_until_scheduled(refs, pool=pool, timeout=ACTOR_START_TIMEOUT_S)
    if pending:
        free = ray.available_resources()
        raise PrivsiloError(
            f"resources: only {len(ready)} of {len(refs)} silo worker actors could be scheduled within "
            f"{ACTOR_START_TIMEOUT_S} s; free: {free.get('CPU', 0):g} CPUs, {free.get('GPU', 0):g} GPUs; pending: "
            f"{len(pending)} silo worker actors; held by this run: {len(ready)} silo worker actors and its server; "
            f"held by other runs: {held}"
        )
    try:
        replies = ray.get(refs)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, PrivacyBudgetError):
            raise PrivsiloError(str(exc.cause)) from None
        raise
    return [info for infos, _ in replies for info in infos], max(seconds for _, seconds in replies)


def _root_cause(exc: BaseException) -> BaseException:
    """The exception a remote task raised, through any Ray task errors that wrap it (a silo's error reaches the
    driver wrapped twice: by the silo's task and by the server's)."""
    while isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None:
        exc = exc.cause
    return exc


def _user_code_error(scenario: Scenario, exc: ray.exceptions.RayTaskError) -> ScenarioError | None:
    """The user's model or dataset failing in a worker (on a cluster: code the workers cannot import), as one line
    naming the field; None for any other error."""
    from simulator.user_code import UserCodeError

    cause = _root_cause(exc)
    if not isinstance(cause, (UserCodeError, ImportError)):
        return None
    field, value = ("data.dataset", scenario.data.dataset) if scenario.model.builtin else ("model.name", scenario.model.name)
    hint, mode = "", scenario.ray.ship_code
    if scenario.ray.address and mode != "always" and "import" in str(cause):
        hint = (f"; ray.ship_code is '{mode}': set it to 'always' to send the module with the run (or 'auto' for modules "
                "under the current directory), or install it on every node")
    return ScenarioError(field, value, f"fails in a worker: {type(cause).__name__}: {' '.join(str(cause).split())}{hint}")


def _overflow_as_scenario_error(scenario: Scenario, error: EncodingOverflowError) -> ScenarioError:
    if not math.isfinite(error.value):
        return ScenarioError(
            "federation.lr", scenario.federation.lr,
            "training diverged: a silo's update holds NaN or infinite values, which secure aggregation cannot "
            "encode; lower the learning rate",
        )
    return ScenarioError(
        "protocol.fractional_bits", scenario.protocol.fractional_bits,
        f"secure aggregation overflowed: {error}; each fractional bit fewer doubles the range, or make the "
        "updates smaller (e.g. a lower federation.lr)",
    )


def _warn_gpu_fallback(placement: tuple[SiloInfo, ...]) -> None:
    fallback = [info.silo_id for info in placement if info.gpu_fallback]
    if fallback:
        warnings.warn(
            f"silos {fallback} were given a GPU share (resources.silo.num_gpus) but torch sees no CUDA device "
            "there; they train on the CPU",
            RuntimeWarning,
            stacklevel=3,
        )


__all__ = ["Federation", "RoundRecord", "RunResult", "record_events", "resolve_scenario", "resources_needed", "run"]
