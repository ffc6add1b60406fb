"""Where secure aggregation's server time goes at scale: one round of SecAgg+ (``neighbours: auto``, no dropout)
among ``--silos`` silos (default 1,000) on vectors of the digits MLP's length, driven in this process through the
engine's loop (``privsilo.protocols.base``), with the server's ``unmask_requests`` and ``combine`` under cProfile (top
functions by cumulative and by own time) and the silos' ``protect`` timed. CPU seconds; no Ray.

    nice -n 10 python -m benchmarks.protocols.profile_secagg_server [--silos 1000] [--top 15]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

from privsilo.mechanisms.base import model_to_vector
from privsilo.protocols.fixed_point import FixedPointCodec
from privsilo.protocols.secure_aggregation import SecAggServer, SecAggSilo, auto_parameters
from privsilo.simulator.models.builtin import build_scenario_model
from privsilo.simulator.scenario import validate_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--silos", type=int, default=1000)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    n = args.silos
    model = validate_scenario({"data": {"dataset": "digits", "silos": 2}, "model": {"name": "mlp"}}).model
    length = model_to_vector(build_scenario_model(model, feature_shape=(64,), num_classes=10)).size
    codec = FixedPointCodec(fractional_bits=24, max_summands=n)
    silos = {i: SecAggSilo(i, codec=codec, neighbours="auto") for i in range(n)}
    server = SecAggServer(codec=codec, neighbours="auto")
    print(f"{n} silos, vectors of {length} entries, {auto_parameters(n)[0]}")
    vectors = np.random.default_rng(0).normal(scale=0.01, size=(n, length))
    participants = tuple(range(n))
    started = time.process_time()
    server.begin_round(round_index=0, participants=participants)
    inbound: dict = {}
    for stage in server.round_stages:
        replies = {i: silos[i].round_reply(stage, inbound.get(i), round_index=0) for i in participants}
        inbound = dict(server.round_relay(stage, replies, round_index=0))
    keys = time.process_time() - started
    started = time.process_time()
    messages = {i: silos[i].protect(vectors[i], round_index=0, participants=participants) for i in participants}
    protect = time.process_time() - started
    profile = cProfile.Profile()
    started = time.process_time()
    profile.enable()
    requests = dict(server.unmask_requests(messages, round_index=0))
    profile.disable()
    answers = {i: silos[i].unmask_reply(requests[i], round_index=0) for i in requests}
    profile.enable()
    total = server.combine(messages, round_index=0, participants=participants, unmasking=answers)
    profile.disable()
    server_seconds = time.process_time() - started
    error = float(np.max(np.abs(total - vectors.sum(axis=0))))
    print(f"CPU s: key stages (all silos and the server) {keys:.2f}, protect (all silos) {protect:.2f} "
          f"({protect / n * 1e3:.1f} ms per silo), server unmask_requests + combine {server_seconds:.2f} "
          f"(incl. the silos' unmasking answers); max |sum error| {error:.2e}")
    for order in ("cumulative", "tottime"):
        print(f"\nserver, by {order}:")
        pstats.Stats(profile).sort_stats(order).print_stats(args.top)


if __name__ == "__main__":
    main()
