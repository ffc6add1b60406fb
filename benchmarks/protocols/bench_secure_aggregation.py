"""Secure aggregation with dropout recovery: protocol-only cost of one round (Bonawitz et al. double masking,
per-round keys and Shamir shares; SecAgg+ graph), against plain summation measured in the same run.

For n silos (default 10, 100, 1000), the graph ``all`` (complete) and ``auto`` (SecAgg+, K and t from
``parameters.auto_parameters`` with the benchmark's dropout rate as ``dropout_rate``), and a fraction of silos
that drop (default 0, 10 %, 30 %; spread evenly over the five steps at which a silo can vanish: before each of the
three round stages, before uploading, and after uploading = never answering the unmasking request), one round of
vectors of ``--length`` float64 entries (default 7,850: logistic regression on MNIST) is driven through the
engine's loop (``privsilo.protocols.base``) in this process. Reported, as the median over ``--repeats`` rounds: CPU seconds
(``time.process_time``) summed over every silo's steps and the server's; their ratio to plain summation of the same
vectors (``PlainSumSilo``/``PlainSumServer``, also measured here); the megabytes of messages the server receives
and sends (pickled sizes); and where the time goes (X25519 key agreement with HKDF, Shamir split/recover, AES-GCM
of the shares, the PRG expansions and the rest), in per cent of the total. A round the protocol abandons
(``RoundAbandoned``) is reported as such. ``all`` is skipped for n above ``--all-up-to`` (default 100: at 1,000
silos every silo Shamir-splits two secrets among 1,000 holders with threshold 501, about 10^3 times the work of
n = 100 per silo, hours in pure Python).

CPU seconds rather than wall time: the machine is shared and silos would run in parallel; each figure is the
work done. No absolute-time claims: compare the rows and the ratios.

    nice -n 10 python -m benchmarks.protocols.bench_secure_aggregation [--sizes 10 100 1000] [--dropouts 0 0.1 0.3]
        [--length 7850] [--repeats 3] [--all-up-to 100] [--servers honest_but_curious may_lie]
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import pickle
import statistics
import time
from collections import defaultdict
from typing import Callable, Iterator

import numpy as np

from privsilo.protocols.base import RoundAbandoned
from privsilo.protocols.fixed_point import FixedPointCodec
from privsilo.protocols.plain import PlainSumServer, PlainSumSilo
from privsilo.protocols.secure_aggregation import SecAggServer, SecAggSilo, auto_parameters, round_parameters
from privsilo.protocols.secure_aggregation import server as server_module
from privsilo.protocols.secure_aggregation import silo as silo_module
from privsilo.protocols.secure_aggregation import masks, sharing

STEPS = ("ADVERTISE_KEYS", "SHARE_KEYS", "COLLECT_SHARES", "protect", "unmask")
PARTS = ("key agreement", "Shamir", "AES-GCM", "PRG", "other")


class Clock:
    """CPU seconds spent inside the wrapped functions, by part (outermost call only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._depth = 0

    def wrap(self, part: str, function: Callable) -> Callable:
        @functools.wraps(function)
        def timed(*args, **kwargs):
            if self._depth:
                return function(*args, **kwargs)
            self._depth += 1
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[part] += time.process_time() - started
                self._depth -= 1

        return timed


@contextlib.contextmanager
def instrumented(clock: Clock) -> Iterator[None]:
    """Wrap the protocol's cryptographic building blocks, where the silo and server modules look them up."""
    patches = [
        (silo_module, "derive_pairwise_key", "key agreement"), (server_module, "derive_pairwise_key", "key agreement"),
        (silo_module, "mask_private_key", "key agreement"), (server_module, "mask_private_key", "key agreement"),
        (silo_module, "public_bytes", "key agreement"),
        (silo_module, "split", "Shamir"), (server_module, "recover", "Shamir"),
        (silo_module, "channel_key", "key agreement"),
        (sharing.Channel, "__init__", "AES-GCM"),
        (sharing.Channel, "seal", "AES-GCM"), (sharing.Channel, "open", "AES-GCM"),
        (masks.MaskStreams, "write", "PRG"),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, part in patches:
            setattr(owner, name, clock.wrap(part, getattr(owner, name)))
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def size(message: object) -> int:
    return 0 if message is None else len(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def secure_round(n: int, neighbours: str, dropout: float, vectors: np.ndarray, codec: FixedPointCodec, seed: int,
                 trust: str = "honest_but_curious") -> dict:
    """One round with ``dropout * n`` silos vanishing, spread over the steps; CPU seconds by side and part. With
    ``trust="may_lie"`` the identity keys are registered first (not counted: a run's set-up) and the round takes
    the consistency round."""
    # auto sizes K and t for the dropouts; silos that assume a lying server refuse rounds that lose more than that
    fractions = {"dropout_rate": dropout} if neighbours == "auto" or trust == "may_lie" else {}
    silos = {i: SecAggSilo(i, codec=codec, neighbours=neighbours, server=trust, **fractions) for i in range(n)}
    server = SecAggServer(codec=codec, neighbours=neighbours, server=trust, **fractions)
    registry: dict = {}
    for stage in server.setup_stages:
        registry = server.relay(stage, {i: silo.setup_reply(stage, registry.get(i)) for i, silo in silos.items()})
    rng = np.random.default_rng(seed)
    dropped = rng.choice(n, size=round(dropout * n), replace=False)
    drops = {int(silo): STEPS[k % len(STEPS)] for k, silo in enumerate(dropped)}
    alive, participants = set(range(n)), tuple(range(n))
    cpu = {"silos": 0.0, "server": 0.0}
    traffic = [0]

    def on_silos(step: str, call: Callable[[int], object], among) -> dict[int, object]:
        alive.difference_update(i for i, at in drops.items() if at == step)
        replies = {}
        for i in sorted(among):
            if i in alive:
                started = time.process_time()
                replies[i] = call(i)
                cpu["silos"] += time.process_time() - started
        traffic[0] += sum(size(reply) for reply in replies.values())
        return replies

    def on_server(call: Callable[[], object]) -> object:
        started = time.process_time()
        result = call()
        cpu["server"] += time.process_time() - started
        if isinstance(result, dict):
            traffic[0] += sum(size(message) for message in result.values())
        return result

    clock = Clock()
    with instrumented(clock):
        try:
            on_server(lambda: server.begin_round(round_index=0, participants=participants))
            inbound: dict = {}
            for stage in server.round_stages:
                replies = on_silos(stage.name, lambda i: silos[i].round_reply(stage, inbound.get(i), round_index=0), alive)
                inbound = dict(on_server(lambda: server.round_relay(stage, replies, round_index=0)))
            messages = on_silos("protect", lambda i: silos[i].protect(vectors[i], round_index=0, participants=participants), alive)
            requests = on_server(lambda: dict(server.unmask_requests(messages, round_index=0)))
            replies = on_silos("unmask", lambda i: silos[i].unmask_reply(requests[i], round_index=0), requests)
            while requests := on_server(lambda: dict(server.unmask_follow_up(replies, round_index=0))):
                replies = on_silos("unmask", lambda i: silos[i].unmask_reply(requests[i], round_index=0), requests)
            on_server(lambda: server.combine(messages, round_index=0, participants=tuple(sorted(messages)), unmasking=replies))
            abandoned = False
        except RoundAbandoned:
            abandoned = True
    total = cpu["silos"] + cpu["server"]
    parts = {part: clock.seconds.get(part, 0.0) for part in PARTS[:-1]}
    parts["other"] = max(0.0, total - sum(parts.values()))
    return {"silos": cpu["silos"], "server": cpu["server"], "total": total, "bytes": traffic[0], "parts": parts,
            "abandoned": abandoned}


def plain_round(vectors: np.ndarray) -> float:
    n = len(vectors)
    silos, server = {i: PlainSumSilo(i) for i in range(n)}, PlainSumServer()
    participants = tuple(range(n))
    started = time.process_time()
    messages = {i: silos[i].protect(vectors[i], round_index=0, participants=participants) for i in range(n)}
    server.combine(messages, round_index=0, participants=participants)
    return time.process_time() - started


def graph_label(n: int, neighbours: str, dropout: float, trust: str) -> str:
    if neighbours == "auto":
        chosen = auto_parameters(n, dropout_rate=dropout, server=trust)[0]
    else:
        chosen = round_parameters(n, neighbours=neighbours, threshold=None, server=trust)
    return f"{'all' if chosen.degree is None else f'K={chosen.degree}'} t={chosen.threshold}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--dropouts", type=float, nargs="+", default=[0.0, 0.1, 0.3])
    parser.add_argument("--length", type=int, default=7850)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--all-up-to", type=int, default=100)
    parser.add_argument("--servers", nargs="+", default=["honest_but_curious"], choices=["honest_but_curious", "may_lie"],
                        help="what the silos assume of the server (may_lie: signed keys and the consistency round)")
    args = parser.parse_args()
    print(f"vector length {args.length}; medians of {args.repeats} rounds; CPU seconds summed over all silos + server")
    header = ("n", "graph", "setting", "drop", "silos s", "server s", "total s", "x plain", "server MB",
              *(f"{part} %" for part in PARTS), "abandoned")
    print(" | ".join(header))
    for n in args.sizes:
        codec = FixedPointCodec(max_summands=n)
        vectors = np.random.default_rng(n).normal(size=(n, args.length))
        for neighbours, trust in [(g, t) for g in ("all", "auto") for t in args.servers]:
            if neighbours == "all" and n > args.all_up_to:
                print(f"{n} | all | (skipped: n > --all-up-to {args.all_up_to})")
                continue
            for dropout in args.dropouts:
                runs, plains = [], []
                for repeat in range(args.repeats):
                    plains.append(plain_round(vectors))
                    runs.append(secure_round(n, neighbours, dropout, vectors, codec, seed=repeat, trust=trust))
                median = {key: statistics.median(run[key] for run in runs) for key in ("silos", "server", "total", "bytes")}
                parts = {part: statistics.median(run["parts"][part] / run["total"] for run in runs) for part in PARTS}
                ratio = median["total"] / max(statistics.median(plains), 1e-9)
                print(" | ".join([
                    str(n), neighbours if trust == "honest_but_curious" else f"{neighbours}, may_lie",
                    graph_label(n, neighbours, dropout, trust), f"{dropout:.0%}",
                    f"{median['silos']:.3g}", f"{median['server']:.3g}", f"{median['total']:.3g}", f"{ratio:.3g}",
                    f"{median['bytes'] / 1e6:.3g}", *(f"{100 * parts[part]:.0f}" for part in PARTS),
                    f"{sum(run['abandoned'] for run in runs)}/{len(runs)}",
                ]), flush=True)


if __name__ == "__main__":
    main()
