"""Where a checkpoint's time goes, in one process without Ray: one silo of ``scenarios/mnist_dpsgd.yaml`` is built
and trains one round, then its snapshot (``Silo.snapshot``: what every worker pickles and sends to the vault actor
before each upload) is timed and its size broken down by the silo's attributes (the mechanism's by its own
attributes), and the server's snapshot and a whole checkpoint of ten such silos are pickled and hashed as
``write_checkpoint`` does (without the disk write). Medians of ``--repeats`` timings; sizes are exact.

    python -m benchmarks.runtime.profile_checkpoint_parts [--repeats 5] [--set federation.local_steps=10]
"""
from __future__ import annotations

import argparse
import hashlib
import pickle
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from privsilo.simulator.engine.actors import ServerActor
from privsilo.simulator.data.sources import scenario_dataset
from privsilo.simulator.data.silos import run_seeds, silo_records
from privsilo.simulator.engine import initial_state
from privsilo.simulator.engine.messages import RoundBroadcast
from privsilo.simulator.scenario import resolve_scenario
from privsilo.simulator.engine.silo import Silo, SiloSpec
from privsilo.simulator.engine.snapshots import dump_by_reference

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "mnist_dpsgd.yaml"


def timed(function, repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--set", nargs="*", default=["federation.local_steps=10"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    scenario = resolve_scenario(SCENARIO, args.set)
    dataset = scenario_dataset(scenario.data, seed=scenario.seed)
    seeds = run_seeds(scenario.seed, scenario.data.silos)
    parts, _ = silo_records(scenario, dataset)
    silo = Silo(SiloSpec(silo_id=0, record_ids=parts[0], seed=seeds["silos"][0]), features=dataset.x_train[parts[0]],
                labels=dataset.y_train[parts[0]], scenario=scenario, feature_shape=dataset.feature_shape,
                num_classes=dataset.num_classes, device=torch.device("cpu"))
    state = initial_state(scenario, dataset, seeds["init"])
    started = time.perf_counter()
    update = silo.train(RoundBroadcast(round_index=0, participants=tuple(range(scenario.data.silos)), state=state))
    train_seconds = time.perf_counter() - started
    blob = silo.snapshot()
    print(f"one silo's local training ({scenario.federation.local_steps} steps): {train_seconds:.2f} s; its update "
          f"{len(pickle.dumps(update)) / 2**20:.2f} MiB")
    print(f"Silo.snapshot: {len(blob) / 2**20:.2f} MiB, {timed(silo.snapshot, args.repeats) * 1e3:.1f} ms "
          f"({timed(silo.snapshot, args.repeats) / train_seconds:.1%} of the silo's training); "
          f"unpickle {timed(lambda: silo.restored(blob), args.repeats) * 1e3:.1f} ms")
    print("\nsnapshot size by attribute (records excluded, as in the snapshot):")
    for owner_name, owner in (("silo", silo), ("silo.mechanism", getattr(silo, "mechanism", None))):
        if owner is None:
            continue
        for name, value in sorted(vars(owner).items(), key=lambda kv: -len(dump_by_reference(kv[1], silo._records))):
            size = len(dump_by_reference(value, silo._records))
            if size > 1024:
                print(f"  {owner_name}.{name}: {size / 2**20:.2f} MiB ({type(value).__name__})")
    server = ServerActor(num_cpus=1)
    server.open(scenario=scenario, workers=(), test_features=dataset.x_test, test_labels=dataset.y_test,
                initial_state=state, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes, seed=seeds["server"])
    server_blob = server.snapshot()
    print(f"\nServerActor.snapshot: {len(server_blob) / 2**20:.2f} MiB, {timed(server.snapshot, args.repeats) * 1e3:.1f} ms")
    checkpoint = {"server": server_blob, "silos": {i: bytes(bytearray(blob)) for i in range(scenario.data.silos)}}  # distinct objects: pickle would memoise one
    payload = pickle.dumps(checkpoint, protocol=pickle.HIGHEST_PROTOCOL)
    print(f"checkpoint of {scenario.data.silos} such silos: {len(payload) / 2**20:.2f} MiB; pickle.dumps "
          f"{timed(lambda: pickle.dumps(checkpoint, protocol=pickle.HIGHEST_PROTOCOL), args.repeats) * 1e3:.1f} ms, "
          f"sha256 {timed(lambda: hashlib.sha256(payload).hexdigest(), args.repeats) * 1e3:.1f} ms")
    print(f"model parameters {sum(p.numel() for p in silo._model.parameters())}, float64 state "
          f"{np.asarray(state[0]).nbytes / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
