"""The round loop: builds the federation of Ray actors for a scenario, runs it and collects the results.

``run(scenario)`` is the Python form of ``privsilo run``: it returns a :class:`RunResult` and, given
``out_dir``, writes the run's files there atomically (see :mod:`simulator.reports`).
"""
from __future__ import annotations

import math
import time
import warnings
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import ray
import torch
from tqdm.auto import tqdm

from mechanisms.base import PrivacyAccountant, PrivacyBudgetError, model_to_vector
from mechanisms.events import PrivacyEvent
from mechanisms.registry import mechanism_class
from protocols.fixed_point import EncodingOverflowError
from simulator.actors import ServerActor, SiloActor
from simulator.cluster import ActorDemand, ray_session
from simulator.data import Dataset, load_dataset
from simulator.data.partition import partition_indices
from simulator.data.users import UserAllocation, allocate_users, users_generator
from simulator.errors import PrivsiloError, ScenarioError
from simulator.messages import RoundReport, SiloInfo
from simulator.models import build_model
from simulator.scenario import Scenario, resolve_scenario, validate_scenario

ACTOR_START_TIMEOUT_S = 300


@dataclass(frozen=True)
class RoundRecord:
    """One row of ``metrics.csv``: the server's round report, the privacy spent so far and the driver's timings.

    ``training_seconds``: the driver waiting for the round on the actors (sampling, broadcast, local training,
    aggregation, test evaluation, Ray's overhead); ``accounting_seconds``: recording the round's privacy events
    and computing epsilon.
    """

    report: RoundReport
    epsilon: float | None
    training_seconds: float
    accounting_seconds: float

    @property
    def wall_seconds(self) -> float:
        """The round as the progress bar sees it: training plus accounting."""
        return self.training_seconds + self.accounting_seconds


@dataclass(frozen=True)
class RunResult:
    """Everything a run produced; ``privsilo run`` writes it to disk."""

    scenario: Scenario
    rounds: tuple[RoundRecord, ...]
    privacy: Mapping[str, Any]
    timing: Mapping[str, float]
    placement: tuple[SiloInfo, ...]
    model_state: Mapping[str, torch.Tensor]
    users: Mapping[str, Any] | None = None  # the user allocation's summary (data.users), else None

    @property
    def final(self) -> dict[str, Any]:
        last = self.rounds[-1].report
        return {"rounds": len(self.rounds), "accuracy": last.accuracy, "loss": last.loss}


def run(
    scenario: Scenario | Mapping[str, Any] | str | Path,
    *,
    out_dir: str | Path | None = None,
    address: str | None = None,
    overrides: list[str] | None = None,
    progress: bool = False,
) -> RunResult:
    """Run a scenario on Ray and return its results; write them to ``out_dir`` if given."""
    from simulator.reports import write_run

    scenario = resolve_scenario(scenario, overrides)
    if address:
        scenario = validate_scenario({**scenario.to_dict(), "ray": {**scenario.ray.model_dump(), "address": address}})
    result = _run(scenario, progress=progress)
    if out_dir is not None:
        write_run(result, Path(out_dir))
    return result


def _seeds(seed: int, num_silos: int) -> dict[str, Any]:
    partition, server, init, *silos = np.random.SeedSequence(seed).spawn(3 + num_silos)

    def as_int(seq: np.random.SeedSequence) -> int:
        return int(seq.generate_state(1, dtype=np.uint64)[0] % (2**63))

    return {"partition": partition, "server": as_int(server), "init": as_int(init), "silos": [as_int(s) for s in silos]}


def _initial_state(scenario: Scenario, dataset: Dataset, seed: int) -> tuple[np.ndarray, ...]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(scenario.model.name, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes)
    return (model_to_vector(model),)


def _silo_indices(scenario: Scenario, dataset: Dataset, rng: np.random.Generator) -> list[np.ndarray]:
    data = scenario.data
    try:
        parts = partition_indices(
            dataset.y_train,
            scheme=data.partition,
            num_silos=data.silos,
            rng=rng,
            alpha=data.alpha,
            shards_per_silo=data.shards_per_silo,
            natural=dataset.natural_partition,
        )
    except ValueError as exc:
        raise ScenarioError("data.silos", data.silos, f"does not fit '{data.dataset}' with partition '{data.partition}' ({exc})") from None
    empty = [i for i, part in enumerate(parts) if len(part) == 0]
    if empty:
        raise ScenarioError("data.silos", data.silos, f"too many silos for {len(dataset.y_train)} records: silo(s) {empty} got none")
    if data.max_records_per_silo is not None:  # the first records in the partition's (seeded) order
        parts = [part[: data.max_records_per_silo] for part in parts]
    return parts


def _user_allocation(scenario: Scenario, dataset: Dataset, parts: list[np.ndarray]) -> UserAllocation | None:
    """Owners of the records (data.users), drawn from their own seed stream; None without users. With
    ``partition: natural`` the silos stay the dataset's; otherwise the allocation decides them."""
    users = scenario.data.users
    if users is None:
        return None
    try:
        return allocate_users(
            len(dataset.y_train),
            count=users.count,
            records=users.records,
            silos=users.silos,
            num_silos=scenario.data.silos,
            rng=users_generator(scenario.seed),
            natural=tuple(parts) if scenario.data.partition == "natural" else None,
        )
    except ValueError as exc:
        raise ScenarioError("data.users.count", users.count, f"does not fit {len(dataset.y_train)} records of '{scenario.data.dataset}' in {scenario.data.silos} silos ({exc})") from None


def resources_needed(scenario: Scenario) -> ActorDemand:
    """What a run asks Ray for at once: a server actor and one actor per silo."""
    res = scenario.resources
    return ActorDemand(server_cpus=res.server.num_cpus, server_gpus=res.server.num_gpus, silo_cpus=res.silo.num_cpus,
                       silo_gpus=res.silo.num_gpus, silos=scenario.data.silos)


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

    def __init__(self, scenario: Scenario | Mapping[str, Any] | str | Path) -> None:
        self.scenario = resolve_scenario(scenario)
        self._stack = ExitStack()
        self.timing: dict[str, float] = {}
        self.users: UserAllocation | None = None

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
        self.dataset = load_dataset(scenario.data.dataset, path=scenario.data.path, seed=scenario.seed)
        seeds = _seeds(scenario.seed, scenario.data.silos)
        parts = _silo_indices(scenario, self.dataset, np.random.default_rng(seeds["partition"]))
        self.users = _user_allocation(scenario, self.dataset, parts)
        if self.users is not None:
            parts = list(self.users.silo_indices)
            histogram = self.users.histogram()
        res = scenario.resources
        t_data = time.perf_counter()
        self._stack.enter_context(
            ray_session(address=scenario.ray.address, demand=resources_needed(scenario), connect_timeout=scenario.ray.connect_timeout)
        )
        silo_class = ray.remote(SiloActor).options(num_cpus=res.silo.num_cpus, num_gpus=res.silo.num_gpus)
        self.silos = []
        for i, idx in enumerate(parts):
            self.silos.append(
                silo_class.remote(
                    silo_id=i,
                    record_ids=idx,
                    features=self.dataset.x_train[idx],
                    labels=self.dataset.y_train[idx],
                    scenario=scenario,
                    feature_shape=self.dataset.feature_shape,
                    num_classes=self.dataset.num_classes,
                    seed=seeds["silos"][i],
                    **({} if self.users is None else {"user_ids": self.users.silo_user_ids[i], "user_histogram": histogram}),
                )
            )
            self._stack.callback(ray.kill, self.silos[-1])
        self.server = ray.remote(ServerActor).options(num_cpus=res.server.num_cpus, num_gpus=res.server.num_gpus).remote(
            scenario=scenario,
            silos=self.silos,
            test_features=self.dataset.x_test,
            test_labels=self.dataset.y_test,
            initial_state=_initial_state(scenario, self.dataset, seeds["init"]),
            feature_shape=self.dataset.feature_shape,
            num_classes=self.dataset.num_classes,
            seed=seeds["server"],
        )
        self._stack.callback(ray.kill, self.server)
        self.placement = tuple(_wait_for_actors([s.info.remote() for s in self.silos]))
        _warn_gpu_fallback(self.placement)
        ray.get(self.server.setup.remote())
        self.timing.update(data_seconds=t_data - t0, setup_seconds=time.perf_counter() - t_data)

    def run_round(self, round_index: int) -> RoundReport:
        """Run one round on the server actor and return its report.

        A secure-aggregation overflow in a silo or in the server's decoding surfaces as a one-line
        ``ScenarioError`` naming the setting to change, not as Ray's nested traceback.
        """
        try:
            return ray.get(self.server.run_round.remote(round_index))
        except ray.exceptions.RayTaskError as exc:
            cause = _root_cause(exc)
            if isinstance(cause, EncodingOverflowError):
                raise _overflow_as_scenario_error(self.scenario, cause) from None
            raise

    def server_inbox(self) -> dict[int, Any]:
        """The protocol messages the server received in the last round, by silo id."""
        return ray.get(self.server.last_round_inbox.remote())

    def model_state(self) -> dict[str, torch.Tensor]:
        """The global model as a torch state_dict."""
        return ray.get(self.server.model_state_dict.remote())


def _run(scenario: Scenario, *, progress: bool) -> RunResult:
    accountant = mechanism_class(scenario.mechanism.name)(scenario.mechanism.params).accountant()
    t0 = time.perf_counter()
    with Federation(scenario) as federation:
        accountant.enrol(info.silo_id for info in federation.placement)
        record_events(accountant, {info.silo_id: info.events for info in federation.placement})
        records = []
        bar = tqdm(range(scenario.federation.rounds), desc=scenario.name, unit="round", disable=not progress)
        for round_index in bar:
            started = time.perf_counter()
            report = federation.run_round(round_index)
            trained = time.perf_counter()
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
        model_state = federation.model_state()
        placement = federation.placement
        users = None if federation.users is None else federation.users.summary()
        startup = dict(federation.timing)
    privacy = accountant.report()
    return RunResult(
        scenario=scenario,
        rounds=tuple(records),
        privacy=privacy,
        timing=_timing(startup, records, total_seconds=time.perf_counter() - t0),
        placement=placement,
        model_state=model_state,
        users=users,
    )


def _timing(startup: Mapping[str, float], records: Sequence[RoundRecord], *, total_seconds: float) -> dict[str, float]:
    """``summary.json`` timing, in parts that add up: total = the start-up parts (data, setup) + rounds + other,
    and rounds = training + accounting (= the sum of ``metrics.csv``'s ``wall_seconds``). ``other_seconds`` is the
    rest: the start-up privacy accounting, fetching the final model, stopping the actors, the final report."""
    training = sum(r.training_seconds for r in records)
    accounting = sum(r.accounting_seconds for r in records)
    rounds = training + accounting
    return {
        **startup,
        "rounds_seconds": rounds,
        "training_seconds": training,
        "accounting_seconds": accounting,
        "seconds_per_round": rounds / len(records),
        "other_seconds": total_seconds - sum(startup.values()) - rounds,
        "total_seconds": total_seconds,
    }


def _wait_for_actors(refs: list[Any]) -> list[SiloInfo]:
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=ACTOR_START_TIMEOUT_S)
    if pending:
        raise PrivsiloError(
            f"resources: only {len(ready)} of {len(refs)} silo actors could be scheduled within "
            f"{ACTOR_START_TIMEOUT_S} s; the cluster lacks the CPUs/GPUs the scenario asks for"
        )
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, PrivacyBudgetError):
            raise PrivsiloError(str(exc.cause)) from None
        raise


def _root_cause(exc: BaseException) -> BaseException:
    """The exception a remote task raised, through any Ray task errors that wrap it (a silo's error reaches the
    driver wrapped twice: by the silo's task and by the server's)."""
    while isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None:
        exc = exc.cause
    return exc


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
