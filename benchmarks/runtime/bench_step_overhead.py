"""What a DP-SGD step costs inside privsilo against the same step in a plain PyTorch loop, on each device at hand.

The workload of issue 29: one silo holding the whole MNIST training set (60,000 records), the McMahan CNN
(``model.name: cnn``), DP-SGD at an expected batch of 64 (q = 64 / 60,000, sigma = 1, C = 1), lr 0.1. On the CPU
and, where torch sees one, on CUDA, it times in one run:

* **plain PyTorch DP-SGD**: the reference step of ``../shared/gpu/reference_step.py`` written out here (64 records
  drawn on the device, per-record gradients with ``torch.func.vmap``, clipping, Gaussian noise, update);
* **privsilo's step in a plain loop**: ``privsilo.mechanisms.per_sample.noisy_sgd_steps`` called on the tensors directly
  (Poisson sampling, the fast clipped sum, noise; no silo, no actor);
* **in process**: a ``privsilo.simulator.engine.silo.Silo`` on the device training rounds of 1 and 31 local steps; the marginal
  step is the difference of the medians over the 30 extra steps;
* **one-silo run**: the same through Ray (``privsilo.simulator.engine.Federation``: a silo worker and a server with one
  CPU each, and a GPU share each on CUDA), rounds of 1 and 31 local steps, evaluation of the test set included;
* **evaluation**: the server's evaluation of the 10,000 test records (``privsilo.simulator.models.builtin.evaluate_model``) in
  process, to set against a one-step round.

It prints medians and, measured in the same run, the ratios of the marginal steps to both plain loops and a
one-step round minus the evaluation (the goals: on the CPU a marginal step at most 1.25x privsilo's step in a plain
loop and a one-step round at most the evaluation + 2.5 s; on a GPU a step at most 2x the plain PyTorch step).
Torch runs on ``--threads`` threads in process (default 1, what a silo with one CPU gets).

    python -m benchmarks.runtime.bench_step_overhead [--devices cpu cuda] [--repeats 5] [--steps 1 31] [--threads 1]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

import privsilo.simulator  # noqa: F401  (Ray environment)
from privsilo.mechanisms.per_sample import noisy_sgd_steps
from privsilo.simulator.data import load_dataset
from privsilo.simulator.data.silos import partition_silos, run_seeds
from privsilo.simulator.engine import Federation, initial_state
from privsilo.simulator.engine.messages import RoundBroadcast
from privsilo.simulator.models.builtin import build_model, evaluate_model
from privsilo.simulator.scenario import validate_scenario
from privsilo.simulator.engine.silo import Silo, SiloSpec

BATCH, SIGMA, CLIP, LR = 64, 1.0, 1.0, 0.1


def scenario(*, local_steps: int, rounds: int, gpu_share: float) -> dict:
    return {
        "name": "bench_step_overhead", "seed": 0,
        "data": {"dataset": "mnist", "partition": "iid", "silos": 1},
        "model": {"name": "cnn"},
        "federation": {"rounds": rounds, "client_rate": 1.0, "local_steps": local_steps, "batch_size": BATCH, "lr": LR},
        "mechanism": {"name": "dp_sgd", "noise_multiplier": SIGMA, "max_grad_norm": CLIP},
        "protocol": {"secure_aggregation": False},
        "resources": {"server": {"num_cpus": 1, "num_gpus": gpu_share}, "silo": {"num_cpus": 1, "num_gpus": gpu_share}},
    }


def timed(work: Callable[[], object], device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def median_time(work: Callable[[], object], device: torch.device, repeats: int) -> float:
    work()  # warm-up
    return statistics.median(timed(work, device) for _ in range(repeats))


def plain_pytorch_step(features: torch.Tensor, labels: torch.Tensor, device: torch.device) -> Callable[[], None]:
    """The reference DP-SGD step (fixed batch of 64 drawn on the device, vmap per-record gradients, clip, noise)."""
    torch.manual_seed(1)
    model = build_model("cnn", feature_shape=tuple(features.shape[1:]), num_classes=10).to(device)
    params = {name: p.detach() for name, p in model.named_parameters()}
    generator = torch.Generator(device=device).manual_seed(2)

    def record_loss(p, x, y):
        return torch.nn.functional.cross_entropy(functional_call(model, p, (x.unsqueeze(0),)), y.unsqueeze(0))

    per_record = vmap(grad(record_loss), in_dims=(None, 0, 0))

    def step() -> None:
        idx = torch.randint(0, features.shape[0], (BATCH,), generator=generator, device=device)
        grads = per_record(params, features[idx], labels[idx])
        norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
        factors = (CLIP / (norms + 1e-6)).clamp(max=1.0)
        for name, g in grads.items():
            clipped = (g * factors.view(-1, *[1] * (g.dim() - 1))).sum(0)
            noise = torch.randn(g.shape[1:], generator=generator, device=device) * SIGMA * CLIP
            params[name] = params[name] - LR * (clipped + noise) / BATCH

    return step


def measure(device: torch.device, *, repeats: int, steps: tuple[int, int], threads: int) -> None:
    few, many = steps
    extra = many - few
    share = 0.5 if device.type == "cuda" else 0.0
    raw = {s: validate_scenario(scenario(local_steps=s, rounds=repeats + 1, gpu_share=share)) for s in steps}
    dataset = load_dataset("mnist", seed=0)
    seeds = run_seeds(0, 1)
    (records,) = partition_silos(raw[few], dataset, np.random.default_rng(seeds["partition"]))
    features = torch.tensor(dataset.x_train[records], device=device)
    labels = torch.tensor(dataset.y_train[records], device=device)
    torch.set_num_threads(threads)
    print(f"[{device}] medians of {repeats} after a warm-up; {threads} torch thread(s) in process", flush=True)

    plain = plain_pytorch_step(features, labels, device)
    plain_step = median_time(lambda: [plain() for _ in range(extra)], device, repeats) / extra
    torch.manual_seed(1)
    model = build_model("cnn", feature_shape=dataset.feature_shape, num_classes=dataset.num_classes).to(device)
    generator = torch.Generator(device=device).manual_seed(3)
    own_step = median_time(lambda: noisy_sgd_steps(
        model, features=features, labels=labels, rates=BATCH / len(records), steps=extra, max_grad_norm=CLIP,
        noise_multiplier=SIGMA, lr=LR, generator=generator, divisor=float(BATCH)), device, repeats) / extra
    print(f"  plain PyTorch DP-SGD step {plain_step * 1e3:.2f} ms; privsilo's step in a plain loop {own_step * 1e3:.2f} ms",
          flush=True)

    initial = initial_state(raw[few], dataset, seeds["init"])
    in_process = {}
    for s in steps:
        silo = Silo(SiloSpec(silo_id=0, record_ids=records, seed=seeds["silos"][0]), features=dataset.x_train[records],
                    labels=dataset.y_train[records], scenario=raw[s], feature_shape=dataset.feature_shape,
                    num_classes=dataset.num_classes, device=device)
        broadcast = RoundBroadcast(round_index=0, participants=(0,), state=initial)
        in_process[s] = median_time(lambda: silo.train(broadcast), device, repeats)
    silo_step = (in_process[many] - in_process[few]) / extra
    print(f"  in process: rounds of {few} / {many} steps {in_process[few]:.3f} / {in_process[many]:.3f} s, "
          f"marginal step {silo_step * 1e3:.2f} ms = {silo_step / own_step:.2f}x privsilo's plain loop, "
          f"{silo_step / plain_step:.2f}x plain PyTorch", flush=True)

    test_features = torch.tensor(dataset.x_test, device=device)
    test_labels = torch.tensor(dataset.y_test, device=device)
    evaluation = median_time(lambda: evaluate_model(model, initial[0], features=test_features, labels=test_labels), device, repeats)
    print(f"  evaluation of {len(test_labels)} test records in process {evaluation:.3f} s", flush=True)

    rounds = {}
    for s in steps:
        with Federation(raw[s]) as federation:
            times = []
            for round_index in range(repeats + 1):
                start = time.perf_counter()
                federation.run_round(round_index)
                times.append(time.perf_counter() - start)
            placement = federation.placement[0].device
        rounds[s] = statistics.median(times[1:])
    run_step = (rounds[many] - rounds[few]) / extra
    print(f"  one-silo run (silo on {placement}): rounds of {few} / {many} steps {rounds[few]:.3f} / {rounds[many]:.3f} s, "
          f"marginal step {run_step * 1e3:.2f} ms = {run_step / own_step:.2f}x privsilo's plain loop (CPU goal <= 1.25), "
          f"{run_step / plain_step:.2f}x plain PyTorch (GPU goal <= 2)")
    print(f"  a {few}-step round - evaluation = {rounds[few] - evaluation:.3f} s (CPU goal <= 2.5 s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", nargs="+", default=["cpu", "cuda"], help="cuda is skipped where torch sees none")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, nargs=2, default=[1, 31])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    print(f"load average {'/'.join(f'{v:.1f}' for v in os.getloadavg())}; torch {torch.__version__}")
    for name in args.devices:
        if name == "cuda" and not torch.cuda.is_available():
            print("[cuda] skipped: torch sees no CUDA device")
            continue
        measure(torch.device(name), repeats=args.repeats, steps=tuple(args.steps), threads=args.threads)
    print(f"load average at the end {'/'.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
