"""The Ray actors: one server, one per silo. Each is a thin shell around pure mechanism and protocol code.

The server coordinates: it samples the round's participants (client-level Poisson sampling with rate
``client_rate``; a round with fewer than ``protocol.min_participants`` sampled silos is skipped), broadcasts,
collects the silos' protected contributions, lets the protocol combine them, applies the mechanism's
aggregation and evaluates. Protocol set-up stages are relayed through the server.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import ray
import torch

from mechanisms.base import LocalTraining, PrivacyBudgetError, SiloContext, load_vector_into_model
from mechanisms.registry import mechanism_class
from protocols.base import ServerProtocol, SiloProtocol
from protocols.fixed_point import FixedPointCodec
from protocols.plain import PlainSumServer, PlainSumSilo
from protocols.secure_aggregation import SecAggServer, SecAggSilo
from simulator.messages import RoundBroadcast, RoundReport, SiloInfo, SiloUpdate
from simulator.models import build_model
from simulator.scenario import ProtocolConfig, Scenario
from simulator.secure_rng import reseed_from_os_entropy


def _secure_aggregation_codec(config: ProtocolConfig, *, num_silos: int) -> FixedPointCodec:
    """The fixed-point codec of a federation's secure aggregation: headroom for a sum over every silo."""
    return FixedPointCodec(fractional_bits=config.fractional_bits, max_summands=num_silos)


def _silo_protocol(config: ProtocolConfig, silo_id: int, *, num_silos: int) -> SiloProtocol:
    if config.secure_aggregation:
        codec = _secure_aggregation_codec(config, num_silos=num_silos)
        return SecAggSilo(silo_id, codec=codec, min_participants=config.min_participants)
    return PlainSumSilo(silo_id)


def _server_protocol(config: ProtocolConfig, *, num_silos: int) -> ServerProtocol:
    if config.secure_aggregation:
        codec = _secure_aggregation_codec(config, num_silos=num_silos)
        return SecAggServer(codec=codec, min_participants=config.min_participants)
    return PlainSumServer()


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


def _get_all(refs: list[Any]) -> list[Any]:
    """``ray.get`` every ref, then raise the first failure. ``ray.get(refs)`` would stop at the first failure and
    leave the others unretrieved, which Ray later prints as "unhandled error" tracebacks on the driver."""
    results, failure = [], None
    for ref in refs:
        try:
            results.append(ray.get(ref))
        except ray.exceptions.RayTaskError as exc:
            failure = failure or exc
    if failure is not None:
        raise failure
    return results


def _limit_threads(num_cpus: float) -> None:
    torch.set_num_threads(max(1, int(num_cpus)))


class SiloActor:
    """One silo: holds its records, trains locally through its mechanism, protects the upload.

    Its generator starts from ``seed``; with ``scenario.secure_rng`` it is re-keyed from OS entropy once the
    mechanism is built, so sampling and noise cannot be replayed from the seed.
    """

    def __init__(
        self,
        *,
        silo_id: int,
        record_ids: np.ndarray,
        features: np.ndarray,
        labels: np.ndarray,
        scenario: Scenario,
        feature_shape: tuple[int, ...],
        num_classes: int,
        seed: int,
        user_ids: np.ndarray | None = None,
        user_histogram: np.ndarray | None = None,
    ) -> None:
        resources = scenario.resources.silo
        _limit_threads(resources.num_cpus)
        wants_gpu = resources.num_gpus > 0
        self.device = torch.device("cuda" if wants_gpu and torch.cuda.is_available() else "cpu")
        self.gpu_fallback = wants_gpu and self.device.type == "cpu"
        self.silo_id = silo_id
        self.num_records = int(labels.shape[0])
        self.record_ids = np.asarray(record_ids)
        model = build_model(scenario.model.name, feature_shape=feature_shape, num_classes=num_classes).to(self.device)
        self.model = model
        fed = scenario.federation
        context = SiloContext(
            silo_id=silo_id,
            record_ids=np.asarray(record_ids),
            features=torch.tensor(features, device=self.device),
            labels=torch.tensor(labels, device=self.device),
            model=model,
            training=LocalTraining(
                local_steps=fed.local_steps, batch_size=fed.batch_size, lr=fed.lr, rounds=fed.rounds, client_rate=fed.client_rate
            ),
            generator=torch.Generator().manual_seed(seed),
            device=self.device,
            user_ids=user_ids,
            user_histogram=user_histogram,
        )
        mechanism = mechanism_class(scenario.mechanism.name)(scenario.mechanism.params)
        self.refusal: PrivacyBudgetError | None = None
        try:
            self.mechanism = mechanism.silo(context)
        except PrivacyBudgetError as exc:  # raised again by info(), so the driver can say it in one line
            self.refusal = exc
        if scenario.secure_rng:
            # Draws made while the mechanism was built (rPDP's budgets) are public and stay seeded; every later
            # draw (sampling, noise) comes from OS entropy that is never recorded.
            reseed_from_os_entropy(context.generator)
        self.protocol = _silo_protocol(scenario.protocol, silo_id, num_silos=scenario.data.silos)
        self.features = context.features
        self._watched: list[np.ndarray] = []
        self._watch: Any = None

    def watch_inputs(self) -> None:
        """Measurement only (attack reports, never the server): from now on note which of this silo's records local
        training feeds to the model, one array of dataset record ids per forward pass (see ``watched_records``)."""
        self._watched = []
        self._watch = self._watch or self.model.register_forward_pre_hook(self._note_inputs)

    def _note_inputs(self, _module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        records = self.features.reshape(self.num_records, -1)
        rows = inputs[0].detach().reshape(inputs[0].shape[0], -1)
        self._watched.append(self.record_ids[[int(torch.nonzero((records == row).all(dim=1))[0, 0]) for row in rows]])

    def watched_records(self) -> list[np.ndarray]:
        """Stop watching and return the record ids noted since ``watch_inputs`` (an identical copy of a record
        counts as the first one)."""
        if self._watch is not None:
            self._watch.remove()
            self._watch = None
        return self._watched

    def info(self) -> SiloInfo:
        if self.refusal is not None:
            raise self.refusal
        context = ray.get_runtime_context()
        return SiloInfo(
            silo_id=self.silo_id,
            num_records=self.num_records,
            node_id=context.get_node_id(),
            gpu_ids=tuple(str(g) for g in ray.get_gpu_ids()),
            device=str(self.device),
            gpu_fallback=self.gpu_fallback,
            events=self.mechanism.setup_events(),
        )

    def setup_reply(self, stage: Any, inbound: Any) -> Any:
        return self.protocol.setup_reply(stage, inbound)

    def train(self, broadcast: RoundBroadcast) -> SiloUpdate:
        contribution = self.mechanism.contribute_with_plan(broadcast.state, round_index=broadcast.round_index, plan=broadcast.plan)
        payload = self.protocol.protect(
            contribution.vector, round_index=broadcast.round_index, participants=broadcast.participants
        )
        return SiloUpdate(
            sender=self.silo_id,
            round_index=broadcast.round_index,
            payload=payload,
            events=contribution.events,
            metrics=dict(contribution.metrics),
        )


class ServerActor:
    """The federation's server: sampling, broadcast, protocol relay, aggregation, evaluation."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        silos: list[Any],
        test_features: np.ndarray,
        test_labels: np.ndarray,
        initial_state: tuple[np.ndarray, ...],
        feature_shape: tuple[int, ...],
        num_classes: int,
        seed: int,
    ) -> None:
        _limit_threads(scenario.resources.server.num_cpus)
        self.silos = silos
        self.client_rate = scenario.federation.client_rate
        self.min_participants = scenario.protocol.min_participants
        self.rng = np.random.default_rng(seed)
        self.state = tuple(np.asarray(v, dtype=np.float64) for v in initial_state)
        self.model = build_model(scenario.model.name, feature_shape=feature_shape, num_classes=num_classes)
        self.test_features = torch.tensor(test_features)
        self.test_labels = torch.tensor(test_labels)
        users = scenario.data.users
        self.mechanism = mechanism_class(scenario.mechanism.name)(scenario.mechanism.params).server_for(
            num_silos=len(silos), num_users=None if users is None else users.count
        )
        self.protocol = _server_protocol(scenario.protocol, num_silos=len(silos))
        self.inbox: dict[int, Any] = {}

    def setup(self) -> None:
        """Run the protocol's set-up stages, relaying every message through this server."""
        inbound: dict[int, Any] = {}
        for stage in self.protocol.setup_stages:
            replies = ray.get([silo.setup_reply.remote(stage, inbound.get(i)) for i, silo in enumerate(self.silos)])
            inbound = dict(self.protocol.relay(stage, dict(enumerate(replies))))

    def run_round(self, round_index: int) -> RoundReport:
        """Sample, train, combine, aggregate, evaluate; a skipped round (no participants) only evaluates."""
        start = time.perf_counter()
        participants = sample_participants(
            self.rng, num_silos=len(self.silos), client_rate=self.client_rate, min_participants=self.min_participants
        )
        updates: list[SiloUpdate] = []
        self.inbox = {}
        if participants:
            plan = self.mechanism.round_plan(self.rng, round_index=round_index)
            # Stored once in the object store; every participant reads the same copy.
            broadcast = ray.put(RoundBroadcast(round_index=round_index, participants=participants, state=self.state, plan=plan))
            updates = _get_all([self.silos[i].train.remote(broadcast) for i in participants])
            self.inbox = {u.sender: u.payload for u in updates}
            total = self.protocol.combine(self.inbox, round_index=round_index, participants=participants)
            self.state = self.mechanism.aggregate(self.state, total, num_participants=len(participants))
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
        )

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """Test loss and accuracy of the global model (the first hypothesis)."""
        load_vector_into_model(self.model, self.state[0])
        self.model.eval()
        logits = torch.cat([self.model(chunk) for chunk in torch.split(self.test_features, 2048)])
        loss = torch.nn.functional.cross_entropy(logits, self.test_labels).item()
        accuracy = (logits.argmax(dim=1) == self.test_labels).double().mean().item()
        return float(loss), float(accuracy)

    def last_round_inbox(self) -> dict[int, Any]:
        """The protocol messages the server received in the last round (what an honest-but-curious server sees)."""
        return dict(self.inbox)

    def model_state_dict(self) -> dict[str, torch.Tensor]:
        load_vector_into_model(self.model, self.state[0])
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
