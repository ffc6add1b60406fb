"""The Ray actors: one server and the silo workers, each hosting one or more logical silos
(:mod:`privsilo.simulator.engine.silo`). Each is a thin shell around pure mechanism and protocol code.

The server coordinates: it samples the round's participants (client-level Poisson sampling with rate
``client_rate``; a round with fewer than ``protocol.min_participants`` sampled silos is skipped), broadcasts,
collects the silos' protected contributions, lets the protocol combine them, applies the mechanism's
aggregation (then the scenario's server optimiser, if any: :mod:`privsilo.mechanisms.server_optimizers`) and evaluates.
Protocol set-up stages are relayed through the server.
"""
from __future__ import annotations

import os
import pickle
import time
from typing import Any, Mapping, Sequence

import numpy as np
import ray
import torch

from privsilo.mechanisms.base import load_vector_into_model
from privsilo.protocols.base import ProtocolStateError, RoundAbandoned
from privsilo.simulator.engine.protocol_setup import server_protocol
from privsilo.simulator.engine.faults import CrashPlan
from privsilo.simulator.engine.messages import Refusal, RoundBroadcast, RoundReport, SiloInfo, SiloUpdate
from privsilo.simulator.models.builtin import build_scenario_model, evaluate_model
from privsilo.simulator.scenario import Scenario
from privsilo.simulator.engine.secure_rng import os_entropy_generator
from privsilo.simulator.engine.silo import Silo, SiloSpec, deterministic_kernels
from privsilo.simulator.engine.snapshots import dump_by_reference
from privsilo.simulator.engine.task_errors import root_cause


SERVER_STATE = ("state", "rng", "plan_rng", "mechanism", "protocol", "optimizer")
CRASH_EXIT_CODE = 70  # an injected crash's exit status (EX_SOFTWARE)


class WorkerRestarted(Exception):
    """A silo worker was asked about silos it does not host: its process died while idle (between rounds, e.g.
    with its node, or during the run's set-up) and Ray restarted it empty. A round treats it as a crash of that
    worker; the set-up, before any snapshot exists, as a runtime fault."""


def sample_participants(
    rng: np.random.Generator, *, num_silos: int, client_rate: float, min_participants: int
) -> tuple[int, ...]:
    """Client-level Poisson sampling with a minimum round size: the round's participants, or ``()`` to skip it.

    Each silo is sampled independently with probability ``client_rate`` (lambda), one uniform draw per silo per
    round whatever the outcome; if fewer than ``min_participants`` (m >= 1) silos are sampled, nobody trains and
    the round is skipped. Silo i therefore trains in a round with probability
    ``lambda' = lambda * P[Binomial(N - 1, lambda) >= m - 1] <= lambda``, decided by the server's coins alone.

    Accounting (Liu et al., CCS 2024, Lemma 6, third-party view): given the past, a round's output under
    neighbouring data D, D' (one record of silo i differs) is the mixture ``(1 - lambda') Q + lambda' P_D``, where
    Q, the output when silo i does not train (not sampled, or round skipped), is the same under D and D', and
    ``D_a(P_D || P_D') <= rho_tau`` (silo i's tau local steps; the other silos' part is data-independent
    post-processing). Joint convexity of ``exp((a - 1) D_a)`` gives
    ``D_a <= log(1 - lambda' + lambda' exp((a - 1) rho_tau)) / (a - 1)``, which is nondecreasing in lambda'
    because ``exp((a - 1) rho_tau) >= 1``; so the bound computed with lambda still holds for every order a, and
    T rounds compose as before. The skip flag is a function of the coins that is constant (not skipped) when
    silo i trains, so publishing it changes nothing; publishing who was sampled would forfeit the
    amplification, as it always does. Realised accounting (dp_sgd, rPDP's budget accountant) counts only rounds
    actually run: a skipped round has no privacy event.
    """
    chosen = np.flatnonzero(rng.random(num_silos) < client_rate)
    if chosen.size < min_participants:
        return ()
    return tuple(int(i) for i in chosen)


class WorkerCalls:
    """One round's calls to the silo workers, and which of them died (an injected or real crash of the process)
    or did not answer within ``timeout`` seconds (a straggler, killed so that Ray restarts it: a crash).

    ``each`` calls every worker that hosts some of the named silos still alive, waits for all of them (at most
    ``timeout``), and drops the silos of a worker that died or straggled from the rest of the round; a silo that
    refused a step (a ``Refusal`` reply) is left out of the replies and of the rest of the round (``refused``,
    with its reason). Every reply
    is retrieved before a task's own error is raised (``ray.get(refs)`` would stop at the first and leave Ray to
    print the others as "unhandled error" tracebacks).
    """

    def __init__(self, workers: Sequence[Any], host_of: Mapping[int, int], *, timeout: float | None = None) -> None:
        self.workers, self.host_of, self.timeout = workers, host_of, timeout
        self.crashed: set[int] = set()
        self.dropped: set[int] = set()
        self.refused: dict[int, str] = {}

    def _drop(self, worker: int) -> None:
        self.crashed.add(worker)
        self.dropped |= {silo for silo, host in self.host_of.items() if host == worker}

    def each(self, silo_ids: Sequence[int], call: Any) -> dict[int, Any]:
        """``call(worker, ids)`` for every live worker hosting some of ``silo_ids``; the workers' replies (each a
        dict by silo id) merged into one."""
        by_worker: dict[int, list[int]] = {}
        for silo_id in silo_ids:
            if silo_id not in self.dropped and silo_id not in self.refused:
                by_worker.setdefault(self.host_of[silo_id], []).append(silo_id)
        refs = {w: call(self.workers[w], tuple(ids)) for w, ids in by_worker.items()}
        if not refs:
            return {}
        answered, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.timeout)
        answered = set(answered)
        replies, failure = {}, None
        for w, ref in refs.items():
            if ref not in answered:  # a straggler: its answer is never read, its process restarted
                ray.kill(self.workers[w], no_restart=False)
                self._drop(w)
                continue
            try:
                replies[w] = ray.get(ref)
            except ray.exceptions.RayActorError:
                self._drop(w)
            except ray.exceptions.RayTaskError as exc:
                if isinstance(root_cause(exc), WorkerRestarted):
                    self._drop(w)
                else:
                    failure = failure or exc
        if failure is not None:
            raise failure
        merged = {silo: reply for batch in replies.values() for silo, reply in batch.items()}
        self.refused.update({silo: reply.reason for silo, reply in merged.items() if isinstance(reply, Refusal)})
        return {silo: reply for silo, reply in merged.items() if not isinstance(reply, Refusal)}


def _limit_threads(num_cpus: float) -> None:
    torch.set_num_threads(max(1, int(num_cpus)))


def _silo_records(spec: SiloSpec, features: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """A silo's records: its slice of the training set and, in an audit with input canaries, the included canaries
    it hosts after them."""
    own = {"features": features[spec.record_ids], "labels": labels[spec.record_ids]}
    canaries = spec.canaries
    if canaries is None or not canaries.are_inputs:
        return own
    return {"features": np.concatenate([own["features"], canaries.features.astype(own["features"].dtype)]),
            "labels": np.concatenate([own["labels"], canaries.labels.astype(own["labels"].dtype)])}


def _or_refusal(step: Any, *args: Any, round_index: int) -> Any:
    """A silo's protocol ``step``, or a ``Refusal`` when the silo refuses it (``ProtocolStateError``: a message it
    will not accept, e.g. a ciphertext that does not open or a claim it will not sign): the silo then sits the rest
    of the round out, as if it had dropped, instead of ending the run."""
    try:
        return step(*args, round_index=round_index)
    except ProtocolStateError as error:
        return Refusal(str(error))


class SiloWorker:
    """A worker process hosting one or more logical silos of one run at a time (``resources.silos_per_actor``).

    Runs lease workers from :mod:`privsilo.simulator.runtime.pool.lease`: ``host`` gives the worker a run's silos, ``release``
    drops them. The training set arrives once, through Ray's object store (``features``/``labels`` are the
    whole arrays, read-only and shared by every worker of a node); each silo copies out its own records. The
    worker's silos train one after another, in the order the server lists them; workers run in parallel.
    """

    def __init__(self, *, num_cpus: float) -> None:
        _limit_threads(num_cpus)
        self.silos: dict[int, Silo] = {}
        self.vault: Any = None
        self.crashes = CrashPlan()

    def host(
        self,
        *,
        specs: tuple[SiloSpec, ...],
        features: np.ndarray,
        labels: np.ndarray,
        scenario: Scenario,
        feature_shape: tuple[int, ...],
        num_classes: int,
        user_histogram: np.ndarray | None = None,
        vault: Any = None,
        crashes: CrashPlan = CrashPlan(),
    ) -> tuple[tuple[SiloInfo, ...], float]:
        """Build the run's silos; return :meth:`info`. With a ``vault`` (a :class:`SnapshotVault` actor) every
        silo writes its snapshot there after each local training, before its update leaves; ``crashes`` are the
        hosted silos' injected crashes (:mod:`privsilo.simulator.engine.faults`)."""
        started = time.perf_counter()
        self.silos, self.vault, self.crashes = {}, vault, crashes
        wants_gpu = scenario.resources.silo.num_gpus > 0
        self.device = torch.device("cuda" if wants_gpu and torch.cuda.is_available() else "cpu")
        self.gpu_fallback = wants_gpu and self.device.type == "cpu"
        self.silos = {
            spec.silo_id: Silo(
                spec,
                **_silo_records(spec, features, labels),
                scenario=scenario,
                feature_shape=feature_shape,
                num_classes=num_classes,
                device=self.device,
                user_histogram=user_histogram,
            )
            for spec in specs
        }
        self.construction_seconds = time.perf_counter() - started
        return self.info()

    def watch_inputs(self, silo_ids: tuple[int, ...]) -> None:
        """Measurement only (attack reports, never the server): see :meth:`Silo.watch_inputs`."""
        for silo_id in silo_ids:
            self.silos[silo_id].watch_inputs()

    def watched_records(self, silo_ids: tuple[int, ...]) -> dict[int, list[np.ndarray]]:
        """Per named silo, the records noted since ``watch_inputs`` (see :meth:`Silo.watched_records`)."""
        return {silo_id: self.silos[silo_id].watched_records() for silo_id in silo_ids}

    def release(self) -> None:
        """Drop the hosted silos (the run is over)."""
        self.silos, self.vault, self.crashes = {}, None, CrashPlan()

    def save_snapshots(self, silo_ids: tuple[int, ...] | None = None) -> None:
        """Write the named hosted silos' snapshots (default: all, as after set-up, so that a silo that crashes
        before its first upload comes back with its protocol keys) to the vault."""
        if silo_ids is None and not self.silos:
            raise WorkerRestarted("this worker hosts no silo to keep: its process was restarted during the run's set-up")
        ids = tuple(self.silos) if silo_ids is None else silo_ids
        ray.get(self.vault.put.remote({silo_id: self.silos[silo_id].snapshot() for silo_id in ids}))

    def restore_snapshots(self) -> None:
        """Replace every hosted silo by its latest snapshot in the vault (after a restart, or to resume a run)."""
        blobs = ray.get(self.vault.get.remote(tuple(self.silos)))
        self.silos = {silo_id: silo.restored(blobs[silo_id]) for silo_id, silo in self.silos.items()}

    def _check_hosted(self, silo_ids: Any) -> None:
        """Raise ``WorkerRestarted`` if this worker hosts nothing (Ray restarted its process since it hosted the named
        silos); a worker that hosts some silos but not all of those named is a bug, raised as such."""
        missing = sorted(set(silo_ids) - set(self.silos))
        if missing and not self.silos:
            raise WorkerRestarted(f"silos {missing} are not hosted here: the worker process was restarted")
        if missing:
            raise LookupError(f"silos {missing} were asked of a worker hosting silos {sorted(self.silos)}")

    def _crash_if_due(self, silo_ids: tuple[int, ...], *, round_index: int, at: str) -> None:
        """Injected crash: the whole worker process exits at once, as a crash would (every hosted silo is lost)."""
        if self.crashes.due(silo_ids, round_index=round_index, at=at):
            os._exit(CRASH_EXIT_CODE)

    def info(self) -> tuple[tuple[SiloInfo, ...], float]:
        """Where each hosted silo runs and what it announces (raises a silo's budget refusal), and the seconds
        this worker spent constructing its silos."""
        context = ray.get_runtime_context()
        infos = tuple(
            SiloInfo(
                silo_id=silo.silo_id,
                num_records=silo.num_records,
                node_id=context.get_node_id(),
                gpu_ids=tuple(str(g) for g in ray.get_gpu_ids()),
                device=str(self.device),
                gpu_fallback=self.gpu_fallback,
                events=silo.setup_events(),
            )
            for silo in self.silos.values()
        )
        return infos, self.construction_seconds

    def setup_reply(self, stage: Any, inbound: Mapping[int, Any]) -> dict[int, Any]:
        """Each hosted silo's reply to a protocol set-up stage, given what the server relayed to it."""
        if not self.silos:  # the first stage relays nothing: a worker restarted empty would answer for no silo
            raise WorkerRestarted("this worker hosts no silo: its process was restarted during the protocol's set-up")
        return {silo_id: silo.protocol.setup_reply(stage, inbound.get(silo_id)) for silo_id, silo in self.silos.items()}

    def round_reply(self, stage: Any, inbound: Mapping[int, Any], *, round_index: int, first: bool) -> dict[int, Any]:
        """The named hosted silos' replies to one of the protocol's per-round stages (``inbound``: what the server
        relayed to each; ``first``: the round's first stage, where a ``setup`` crash happens)."""
        self._check_hosted(inbound)
        if first:
            self._crash_if_due(tuple(inbound), round_index=round_index, at="setup")
        return {silo_id: _or_refusal(self.silos[silo_id].protocol.round_reply, stage, message, round_index=round_index)
                for silo_id, message in inbound.items()}

    def train(self, broadcast: RoundBroadcast, silo_ids: tuple[int, ...], *, set_up: bool = True) -> dict[int, SiloUpdate]:
        """Local training of the named hosted silos, one after another; each silo's snapshot goes to the vault
        before any update is returned (``set_up``: the round's protocol stages already ran, else a ``setup``
        crash happens here)."""
        self._check_hosted(silo_ids)
        round_index = broadcast.round_index
        if not set_up:
            self._crash_if_due(silo_ids, round_index=round_index, at="setup")
        updates = {}
        for silo_id in silo_ids:
            updates[silo_id] = self.silos[silo_id].train(broadcast)
            self._crash_if_due((silo_id,), round_index=round_index, at="before_upload")
        if self.vault is not None:
            self.save_snapshots(silo_ids)
        return updates

    def finish_round(self, requests: Mapping[int, Any], *, round_index: int) -> dict[int, Any]:
        """After the uploads: the named hosted silos' answers to the protocol's unmasking requests (for the silos
        asked something: a request of ``None`` is nothing to answer); an ``after_upload`` crash happens here."""
        self._check_hosted(requests)
        self._crash_if_due(tuple(requests), round_index=round_index, at="after_upload")
        return {silo_id: _or_refusal(self.silos[silo_id].protocol.unmask_reply, request, round_index=round_index)
                for silo_id, request in requests.items() if request is not None}


class ServerActor:
    """The federation's server: sampling, broadcast, protocol relay, aggregation, evaluation.

    Never restarted (``max_restarts`` 0): its state lives only in it and in the checkpoint, so a lost server ends the
    run with the resume command instead of coming back empty.

    Leased from :mod:`privsilo.simulator.runtime.pool.lease` like the silo workers: ``open`` starts a run, ``release`` ends it.
    """

    max_restarts = 0

    def __init__(self, *, num_cpus: float) -> None:
        _limit_threads(num_cpus)

    def open(
        self,
        *,
        scenario: Scenario,
        workers: Sequence[tuple[Any, tuple[int, ...]]],
        test_features: np.ndarray,
        test_labels: np.ndarray,
        initial_state: tuple[np.ndarray, ...],
        feature_shape: tuple[int, ...],
        num_classes: int,
        seed: int,
    ) -> None:
        self.workers = tuple(handle for handle, _ in workers)
        self.hosted = tuple(hosted for _, hosted in workers)
        self.host_of = {silo_id: index for index, (_, hosted) in enumerate(workers) for silo_id in hosted}
        self.num_silos = len(self.host_of)
        self.client_rate = scenario.federation.client_rate
        self.round_timeout = scenario.federation.round_timeout
        self.min_participants = scenario.protocol.min_participants
        self.rng = np.random.default_rng(seed)
        # secure mode: the round plan (ULDP's user sample) must not follow from the seed; client sampling stays seeded
        self.plan_rng = os_entropy_generator() if scenario.secure_rng else self.rng
        self.state = tuple(np.asarray(v, dtype=np.float64) for v in initial_state)
        # the test set and the model live on the server's GPU share, if it has one
        device = torch.device("cuda" if scenario.resources.server.num_gpus > 0 and torch.cuda.is_available() else "cpu")
        deterministic_kernels(device)
        self.model = build_scenario_model(scenario.model, feature_shape=feature_shape, num_classes=num_classes).to(device)
        self.test_features = torch.tensor(test_features, device=device)
        self.test_labels = torch.tensor(test_labels, device=device)
        num_users = None if scenario.data.users is None else scenario.data.users.count
        mechanism = scenario.mechanism.build()
        self.mechanism = mechanism.server_for(num_silos=self.num_silos, num_users=num_users)
        self.protocol = server_protocol(scenario, mechanism, num_silos=self.num_silos, num_users=num_users,
                                        length=self.state[0].size)
        # the scenario refuses secure aggregation for these, so the protocol is plain summation
        self.individual = type(mechanism).needs_individual_contributions
        optimizer = scenario.federation.server_optimizer
        self.optimizer = None if optimizer is None else optimizer.build()
        self.uploads: dict[int, SiloUpdate] = {}
        self.view: dict[Any, Any] = {}
        # With injected crashes every round ends with a call to the uploaders (where an after_upload crash happens)
        self.finish_always = scenario.faults.any

    def setup(self) -> dict[str, float]:
        """Run the protocol's set-up stages, relaying every message through this server; return the seconds spent
        waiting for the silos' replies and relaying them."""
        inbound: dict[int, Any] = {}
        silo_seconds = server_seconds = 0.0
        for stage in self.protocol.setup_stages:
            started = time.perf_counter()
            replies: dict[int, Any] = {}
            # Each worker gets only what is addressed to its own silos.
            calls = [worker.setup_reply.remote(stage, {i: inbound[i] for i in hosted if i in inbound})
                     for worker, hosted in zip(self.workers, self.hosted)]
            for worker_replies in ray.get(calls):
                replies.update(worker_replies)
            replied = time.perf_counter()
            inbound = dict(self.protocol.relay(stage, dict(sorted(replies.items()))))
            silo_seconds, server_seconds = silo_seconds + replied - started, server_seconds + time.perf_counter() - replied
        return {"protocol_setup_silo_seconds": silo_seconds, "protocol_setup_server_seconds": server_seconds}

    def run_round(self, round_index: int) -> RoundReport:
        """Sample, train, combine, aggregate, evaluate; a skipped round (no participants) only evaluates.

        A silo whose worker process dies during the round drops out of it (with every silo of that worker), and so
        does a silo that refuses a protocol step or whose message the server cannot use (``left_out``): the
        protocol finishes with the survivors, and a round whose sum cannot be recovered is abandoned (the model
        unchanged, ``abandoned_reason`` says why). Only uploads that reached the server carry privacy events: a silo that crashed before
        uploading released nothing of the round.
        """
        start = time.perf_counter()
        participants = sample_participants(
            self.rng, num_silos=self.num_silos, client_rate=self.client_rate, min_participants=self.min_participants
        )
        self.uploads, self.view = {}, {}
        calls = WorkerCalls(self.workers, self.host_of, timeout=self.round_timeout)
        combine_seconds, abandoned, reason = 0.0, False, ""
        if participants:
            try:
                combine_seconds = self._train_and_combine(round_index, participants, calls)
            except RoundAbandoned as error:
                abandoned, reason = True, str(error)
        updates = list(self.uploads.values())
        loss, accuracy = self.evaluate()
        train_losses = [u.metrics["train_loss"] for u in updates if "train_loss" in u.metrics]
        return RoundReport(
            round_index=round_index,
            participants=participants,
            loss=loss,
            accuracy=accuracy,
            events={u.sender: u.events for u in updates},
            train_loss=float(np.mean(train_losses)) if train_losses else float("nan"),
            seconds=time.perf_counter() - start,
            protocol_seconds={"silo": max((u.metrics["protocol_seconds"] for u in updates), default=0.0), "server": combine_seconds},
            dropped=tuple(sorted(calls.dropped & set(participants))),
            crashed_workers=tuple(sorted(calls.crashed)),
            abandoned=abandoned,
            left_out={**getattr(self.protocol, "left_out", {}), **calls.refused} if participants else {},
            abandoned_reason=reason,
        )

    def _train_and_combine(self, round_index: int, participants: tuple[int, ...], calls: "WorkerCalls") -> float:
        """The round's protocol stages, local training and combination, with whichever silos survive each step
        (see :mod:`privsilo.protocols.base`); the uploads that arrived go to ``self.uploads`` (kept when the round is
        abandoned: they carry privacy events). Raises ``RoundAbandoned``; returns the seconds combining."""
        plan = self.round_plan(round_index)
        # Stored once in the object store; every participant reads the same copy.
        broadcast = ray.put(RoundBroadcast(round_index=round_index, participants=participants, state=self.state, plan=plan))
        self.protocol.begin_round(round_index=round_index, participants=participants)
        inbound: Mapping[int, Any] = {}
        stages = self.protocol.round_stages
        for number, stage in enumerate(stages):
            replies = calls.each(participants, lambda worker, ids: worker.round_reply.remote(
                stage, {i: inbound.get(i) for i in ids}, round_index=round_index, first=number == 0))
            self.view[stage] = replies
            inbound = self.protocol.round_relay(stage, replies, round_index=round_index)
        uploads = calls.each(participants, lambda worker, ids: worker.train.remote(broadcast, ids, set_up=bool(stages)))
        # In silo order whatever the packing, so every sum over silos adds in the same order.
        self.uploads = {silo: uploads[silo] for silo in sorted(uploads)}
        inbox = self.last_round_inbox()
        if not inbox:
            raise RoundAbandoned(f"round {round_index}: no participant's update arrived")
        if len(inbox) < len(participants) and not self.protocol.survives_missing_uploads:
            raise RoundAbandoned(f"round {round_index}: {type(self.protocol).__name__} cannot sum without every participant")
        requests = self.protocol.unmask_requests(inbox, round_index=round_index)
        uploaded = tuple(inbox)  # sorted
        unmasking: dict[int, Any] = {}
        if requests or self.finish_always:
            unmasking = calls.each(uploaded, lambda worker, ids: worker.finish_round.remote(
                {i: requests.get(i) for i in ids}, round_index=round_index))
            while requests := self.protocol.unmask_follow_up(unmasking, round_index=round_index):  # consistency round
                self.view["consistency"] = unmasking
                unmasking = calls.each(tuple(requests), lambda worker, ids: worker.finish_round.remote(
                    {i: requests[i] for i in ids}, round_index=round_index))
            self.view["unmasking"] = unmasking
        combining = time.perf_counter()
        if self.individual:
            vectors = self.protocol.vectors(inbox, round_index=round_index, participants=uploaded)
            combine_seconds = time.perf_counter() - combining
            aggregate = self.mechanism.aggregate_individual(self.state, vectors)
        else:
            total = self.protocol.combine(inbox, round_index=round_index, participants=uploaded, unmasking=unmasking)
            combine_seconds = time.perf_counter() - combining
            # secure aggregation against a server that may lie leaves out uploaders that did not sign (``summed``)
            summed = getattr(self.protocol, "summed", uploaded)
            aggregate = self.mechanism.aggregate(self.state, total, num_participants=len(summed))
        # the server optimiser post-processes the aggregate (privsilo.mechanisms.server_optimizers)
        self.state = aggregate if self.optimizer is None else self.optimizer.step(self.state, aggregate)
        return combine_seconds

    def round_plan(self, round_index: int) -> Any:
        """The mechanism's plan for a round (ULDP's user sample), from OS entropy in secure mode."""
        return self.mechanism.round_plan(self.plan_rng, round_index=round_index)

    def evaluate(self) -> tuple[float, float]:
        """Test loss and accuracy of the global model (the first hypothesis), without autograd; no accuracy (NaN)
        for regression."""
        return evaluate_model(self.model, self.state[0], features=self.test_features, labels=self.test_labels)

    def global_state(self) -> tuple[np.ndarray, ...]:
        """Every hypothesis of the global state (for the experimenter's per-client evaluation)."""
        return self.state

    def last_round_inbox(self) -> dict[int, Any]:
        """The uploads the server received in the last round, by silo id."""
        return {silo: update.payload for silo, update in self.uploads.items()}

    def last_round_view(self) -> dict[Any, Any]:
        """Everything the server received in the last round (what an honest-but-curious server sees): each
        per-round protocol stage's replies, ``"uploads"``, ``"consistency"`` (the signatures of the consistency round,
        when the silos assume a server that may lie) and ``"unmasking"`` (the answers after the uploads)."""
        return {**self.view, "uploads": self.last_round_inbox()}

    def snapshot(self) -> bytes:
        """The run's server state between rounds (global state, generators, mechanism, protocol, optimiser)."""
        return dump_by_reference({name: getattr(self, name) for name in SERVER_STATE})

    def restore(self, blob: bytes) -> None:
        """Continue from a :meth:`snapshot` (resuming a run)."""
        self.__dict__.update(pickle.loads(blob))

    def release(self) -> None:
        """Drop the run (its model, test data, mechanism and protocol state)."""
        self.__dict__.clear()

    def model_state_dict(self) -> dict[str, torch.Tensor]:
        load_vector_into_model(self.model, self.state[0])
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}
