"""The federation of one run: its server and silo worker actors, their start-up (data, Ray, protocol set-up),
recovery from crashed workers, and what scripts may read of it."""
from __future__ import annotations

import time
import warnings
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import ray
import torch

from privsilo.mechanisms.base import PrivacyBudgetError, model_to_vector
from privsilo.mechanisms.canaries import SiloCanaries
from privsilo.protocols.fixed_point import EncodingOverflowError
from privsilo.simulator.engine.actors import ServerActor, SiloWorker
from privsilo.simulator.runtime.cluster import ray_session
from privsilo.simulator.data import Dataset
from privsilo.simulator.data.rotations import rotate_silos
from privsilo.simulator.data.silos import run_seeds, silo_records
from privsilo.simulator.data.sources import scenario_dataset
from privsilo.simulator.data.users import UserAllocation
from privsilo.simulator.runtime.pool.registry import pool_for
from privsilo.simulator.engine.background import in_background
from privsilo.simulator.engine.placement import pack_silos, resources_needed
from privsilo.simulator.engine.task_errors import overflow_as_scenario_error, root_cause, user_code_error
from privsilo.simulator.errors import PrivsiloError, RuntimeFault, ScenarioError
from privsilo.simulator.engine.faults import crash_plan
from privsilo.simulator.engine.messages import RoundReport, SiloInfo
from privsilo.simulator.models.builtin import build_scenario_model
from privsilo.simulator.runtime.node_watch import Node, NodeWatch
from privsilo.simulator.scenario import Scenario, resolve_scenario
from privsilo.simulator.runtime.shipping import code_to_ship
from privsilo.simulator.engine.silo import SiloSpec
from privsilo.simulator.engine.snapshots import SnapshotVault
from privsilo.simulator.runtime.pool.lease import ActorShape, WorkerPool, wait_until_scheduled

ACTOR_START_TIMEOUT_S = 300
HEAD_NODE_RESOURCE = "node:__internal_head__"  # Ray gives the head node one unit of it
UNREADY_RELEASE_TIMEOUT_S = 5  # a failed start hands back the actors that answer by then, and stops the others


def initial_state(scenario: Scenario, dataset: Dataset, seed: int) -> tuple[np.ndarray, ...]:
    """One freshly initialised model per hypothesis, drawn one after the other from ``seed`` (the first is the
    single model of every one-hypothesis mechanism): the global state a run starts from, given its ``init`` seed
    (``privsilo.simulator.data.silos.run_seeds``)."""
    count = scenario.mechanism.build().num_hypotheses()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        models = [build_scenario_model(scenario.model, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes) for _ in range(count)]
    return tuple(model_to_vector(model) for model in models)


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
        server_actor: type[ServerActor] = ServerActor,
    ) -> None:
        """``snapshots``: the silos keep snapshots in a vault (always with injected crashes; needed for
        checkpoints); ``resume_from``: a checkpoint (``privsilo.simulator.run_dir.checkpoint``) whose state the federation
        takes instead of running the protocol set-up; ``canaries``: an audit's canaries by host silo;
        ``server_actor``: the server actor's class, ``ServerActor`` or a subclass that only measures (a benchmark's
        timed server, ``benchmarks/support/round_parts.py``)."""
        self.scenario = resolve_scenario(scenario)
        self.resume_from = resume_from
        self.canaries = dict(canaries or {})
        self.snapshots = snapshots or self.scenario.faults.any or resume_from is not None
        self.server_actor = server_actor
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
        loading = in_background(self._load_data)
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
        server_shape = ActorShape(self.server_actor, num_cpus=res.server.num_cpus, num_gpus=res.server.num_gpus)
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
            initial_state=initial_state(scenario, self.dataset, seeds["init"]),
            feature_shape=self.dataset.feature_shape,
            num_classes=self.dataset.num_classes,
            seed=seeds["server"],
        )
        try:
            construction, t_workers, t_protocol = self._set_up(hosting, opened)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
            if not _lost_an_actor(exc):
                raise
            # no silo has a snapshot yet (or, resuming, not all are restored): nothing could bring the lost ones back
            raise self.fault("an actor of the run (a silo worker or the server) was lost during its set-up, before "
                             "every silo's first snapshot was kept") from None
        t_setup = time.perf_counter()
        # data_seconds: what the data cost beyond the start of Ray and the actors (it loads meanwhile); the silos'
        # first snapshots (or, resuming, their restoration) count with the workers, not with the protocol set-up
        self.timing.update(data_seconds=t_data - t_ray, workers_seconds=t_ray - t0 + t_workers - t_data + t_setup - t_protocol,
                           protocol_setup_seconds=t_protocol - t_workers)
        self.silo_construction_seconds = construction
        self._ready = True

    def _set_up(self, hosting: list[Any], opened: Any) -> tuple[float, float, float]:
        """Wait for the silos to be built and the server opened, then run the protocol's set-up and keep every silo's
        first snapshot (or, resuming, restore them all). Returns the longest silo construction (s) and the times the
        workers and the protocol were ready."""
        scenario = self.scenario
        try:
            infos, construction = _wait_for_workers(hosting, self._pool)
            ray.get(opened)
        except ray.exceptions.RayTaskError as exc:
            if (error := user_code_error(scenario, exc)) is None:
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
        return construction, t_workers, t_protocol

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
        again and replaces each by its latest snapshot (see ``privsilo.simulator.engine.snapshots``). A worker that was on a node
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
            if isinstance(exc, ray.exceptions.RayTaskError) and not isinstance(root_cause(exc), ray.exceptions.RayActorError):
                raise
            raise self.fault(f"the silo workers {sorted(crashed_workers)} that crashed could not get their silos back: "
                             f"an actor of the run was lost ({type(root_cause(exc)).__name__})") from None

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
        try:
            server, silos = ray.get([self.server.snapshot.remote(), self.vault.everything.remote()])
        except ray.exceptions.RayActorError:
            raise self.fault("the server actor or the snapshot vault was lost as the checkpoint was taken") from None
        return {"server": server, "silos": silos}

    def _lease(self, counts: dict[ActorShape, int]) -> dict[ActorShape, list[Any]]:
        """Actors from the run's pool (``privsilo.simulator.runtime.pool.registry.pool_for``), handed back when the federation
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
            cause = root_cause(exc)
            if isinstance(cause, EncodingOverflowError):
                raise overflow_as_scenario_error(self.scenario, cause) from None
            raise

    def watch_inputs(self, silo_ids: Sequence[int]) -> None:
        """Measurement only, for attack reports (never the server): the named silos note which of their records
        local training feeds to the model from now on (see [`watched_records`][privsilo.simulator.engine.federation.Federation.watched_records])."""
        ray.get([self.workers[w].watch_inputs.remote(ids) for w, ids in self._by_worker(silo_ids).items()])

    def watched_records(self, silo_ids: Sequence[int]) -> dict[int, list[np.ndarray]]:
        """Per named silo, the record ids its local training fed to the model since [`watch_inputs`][privsilo.simulator.engine.federation.Federation.watch_inputs]."""
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


def _lost_an_actor(exc: BaseException) -> bool:
    """Whether a remote call failed because one of the run's actors died (or came back empty after a restart)."""
    from privsilo.simulator.engine.actors import WorkerRestarted

    return isinstance(exc, ray.exceptions.RayActorError) or isinstance(root_cause(exc), (ray.exceptions.RayActorError, WorkerRestarted))


def _wait_for_workers(refs: list[Any], pool: WorkerPool) -> tuple[list[SiloInfo], float]:
    """Every hosted silo's info, and the longest time a worker spent constructing its silos (waiting while other
    runs hold the pool's actors: ``privsilo.simulator.runtime.pool.lease.wait_until_scheduled``)."""
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


def _warn_gpu_fallback(placement: tuple[SiloInfo, ...]) -> None:
    fallback = [info.silo_id for info in placement if info.gpu_fallback]
    if fallback:
        warnings.warn(
            f"silos {fallback} were given a GPU share (resources.silo.num_gpus) but torch sees no CUDA device "
            "there; they train on the CPU",
            RuntimeWarning,
            stacklevel=3,
        )
