"""The Flower half of ``bench_vs_flower.py``: FedAvg with Flower's simulation engine on an exported workload.

Runs in the Flower environment made by ``benchmarks/comparisons/flower_env.sh`` (it imports flwr, torch and numpy, never
privsilo). The workload file (an ``.npz`` written by ``bench_vs_flower.py``) holds the silos' records, the test
split, the initial model as one flat vector and the training settings, so both frameworks train the same network
from the same weights on the same split. Each silo runs ``local_steps`` steps of mini-batch SGD, batches drawn
without replacement from the silo's records as privsilo's ``none`` mechanism does, from the same per-silo seeded
generator kept across rounds (so both draw the same batches); Flower's FedAvg averages the
models weighted by the silos' record counts; the server evaluates the global model on the test split after every
round. Writes the final test accuracy, the rounds' wall time and the number of rounds in which every silo's
reply arrived as JSON to ``--result``.

With ``--noise-multiplier Z --clip-norm C`` (``bench_dp_fedavg_vs_flower.py``) the FedAvg strategy, averaging the
silos with equal weights, is wrapped in Flower's ``DifferentialPrivacyServerSideFixedClipping``: the server clips
each silo's model delta to C and adds N(0, (Z C / m)^2) to the average of the m sampled silos' models, m =
int(``--client-rate`` times the silos), a sample drawn without replacement each round. ``--seed`` seeds the server's
sampling (Python's ``random``) and noise (numpy's global generator), which Flower draws unseeded.

    python -m benchmarks.comparisons.flower_fedavg --workload W.npz --result R.json [--cpus 2]
        [--noise-multiplier Z --clip-norm C [--client-rate Q] [--seed S]]
"""
from __future__ import annotations

import argparse
import functools
import json
import random
import time
from typing import Iterable

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg
from flwr.simulation import run_simulation


@functools.lru_cache(maxsize=1)
def workload(path: str) -> dict[str, np.ndarray]:
    """The exported workload, read once per process (Flower's worker actors run many silos' calls)."""
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def build_model(work: dict[str, np.ndarray]) -> torch.nn.Module:
    """One hidden ReLU layer (privsilo's ``mlp_128``), started from the exported initial weights."""
    features, hidden, classes = (int(v) for v in work["layers"])
    model = torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(features, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, classes)
    )
    torch.nn.utils.vector_to_parameters(torch.tensor(work["initial"], dtype=torch.float32), model.parameters())
    return model


def local_sgd(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, steps: int, batch: int, lr: float,
              generator: torch.Generator) -> float:
    """``steps`` plain SGD steps, each on ``batch`` records drawn without replacement; the mean loss."""
    model.train()
    optimiser = torch.optim.SGD(model.parameters(), lr=lr)
    total = 0.0
    for _ in range(steps):
        idx = torch.randperm(len(y), generator=generator)[:batch]
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        total += loss.item()
    return total / steps


client_app = ClientApp()


def silo_generator(context: Context, seed: int) -> torch.Generator:
    """The silo's batch generator: seeded with privsilo's seed for the silo, then carried from round to round in
    the node's context, as a privsilo silo keeps its generator."""
    generator = torch.Generator().manual_seed(seed)
    if "rng" in context.state:
        state = np.frombuffer(context.state["rng"]["state"], dtype=np.uint8).copy()
        generator.set_state(torch.from_numpy(state))
    return generator


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)  # one CPU per worker actor, as privsilo limits each actor to its share
    work = workload(str(msg.content["config"]["workload"]))
    silo = int(context.node_config["partition-id"])
    # The silo's records in privsilo's order (the batches index into them).
    records = work["order"][work["offsets"][silo]:work["offsets"][silo + 1]]
    x, y = torch.tensor(work["x_train"][records]), torch.tensor(work["y_train"][records])
    model = build_model(work)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    generator = silo_generator(context, int(work["seeds"][silo]))
    loss = local_sgd(model, x, y, steps=int(work["local_steps"]), batch=int(work["batch_size"]),
                     lr=float(work["lr"]), generator=generator)
    context.state["rng"] = ConfigRecord({"state": generator.get_state().numpy().tobytes()})
    content = RecordDict({
        "arrays": ArrayRecord(model.state_dict()),
        # "unit-weight": equal weights for the DP runs (a record count would be an un-noised, data-dependent weight)
        "metrics": MetricRecord({"train_loss": loss, "num-examples": int(len(y)), "unit-weight": 1}),
    })
    return Message(content=content, reply_to=msg)


class CountingFedAvg(FedAvg):
    """Flower's FedAvg, counting the rounds in which every sampled silo replied without error (Flower's FedAvg
    would average over the replies that did arrive)."""

    def __init__(self, *, silos: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.silos, self.complete_rounds = silos, 0

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        if len(replies) == self.silos and not any(reply.has_error() for reply in replies):
            self.complete_rounds += 1
        return super().aggregate_train(server_round, replies)


def strategy_for(silos: int, dp: argparse.Namespace) -> tuple[CountingFedAvg, object]:
    """FedAvg over every silo weighted by record counts or, with ``dp.noise_multiplier`` set, Flower's central DP
    wrapper around FedAvg with equal weights on a sample of max(1, int(``dp.client_rate`` * silos)); (the counter,
    the strategy)."""
    if dp.noise_multiplier is None:
        counting = CountingFedAvg(silos=silos, fraction_train=1.0, fraction_evaluate=0.0)
        return counting, counting
    sampled = max(int(silos * dp.client_rate), 1)  # FedAvg's own sample size, at least min_train_nodes = 1
    counting = CountingFedAvg(silos=sampled, fraction_train=dp.client_rate, fraction_evaluate=0.0, min_train_nodes=1,
                              min_available_nodes=silos, weighted_by_key="unit-weight")
    return counting, DifferentialPrivacyServerSideFixedClipping(counting, dp.noise_multiplier, dp.clip_norm, sampled)


def server_app_for(workload_path: str, result: dict, dp: argparse.Namespace) -> ServerApp:
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        work = workload(workload_path)
        model = build_model(work)
        x_test, y_test = torch.tensor(work["x_test"]), torch.tensor(work["y_test"])

        @torch.no_grad()
        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            model.load_state_dict(arrays.to_torch_state_dict())
            model.eval()
            accuracy = (model(x_test).argmax(dim=1) == y_test).double().mean().item()
            if server_round > 0:  # round 0: the initial model
                result.setdefault("accuracies", []).append(accuracy)
                result["accuracy"] = accuracy
            return MetricRecord({"accuracy": accuracy})

        # The silos train; the server evaluates (no evaluation rounds on the silos).
        random.seed(dp.seed)  # the sample of silos (FedAvg draws it with random.sample)
        np.random.seed(dp.seed)  # the DP wrapper's noise (np.random.normal)
        counting, strategy = strategy_for(int(work["silos"]), dp)
        started = time.perf_counter()
        strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()), num_rounds=int(work["rounds"]),
                       train_config=ConfigRecord({"workload": workload_path}), evaluate_fn=evaluate)
        result["rounds_seconds"] = time.perf_counter() - started
        result["complete_rounds"] = counting.complete_rounds

    return server_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--noise-multiplier", type=float, help="wrap FedAvg in DifferentialPrivacyServerSideFixedClipping")
    parser.add_argument("--clip-norm", type=float, default=1.0)
    parser.add_argument("--client-rate", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result: dict = {}
    silos = int(workload(args.workload)["silos"])
    run_simulation(
        server_app=server_app_for(args.workload, result, args),
        client_app=client_app,
        num_supernodes=silos,
        # Ray with the benchmark's CPUs; one worker actor per CPU (Flower's pool of warm actors).
        backend_config={"init_args": {"num_cpus": args.cpus, "include_dashboard": False},
                        "client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
    with open(args.result, "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    # Run as the importable module, not as __main__: Flower's worker actors then import the ClientApp by name,
    # as they do a Flower project's, instead of failing to unpickle this script's functions.
    import flower_fedavg

    flower_fedavg.main()
