"""Per-record machinery shared by the DP-SGD family: Poisson sampling, per-sample gradients, clipping, noise.

The pieces are deliberately independent of one another so that variants can recombine them:

* :func:`poisson_sample` includes record ``j`` with probability ``rates`` (one float for uniform DP-SGD, a
  tensor ``q_j`` for rPDP-FL's per-record rates); :func:`poisson_batches` draws the samples of many steps;
* :func:`per_sample_gradients` computes ``grad_theta loss(theta; x_j, y_j)`` for every record of a batch with
  ``torch.func`` (``functional_call`` + ``vmap(grad(.))``), one pass instead of one backward per record;
* :func:`clip_and_sum` is the clipped sum of Abadi et al. 2016, Algorithm 1 (``g_j / max(1, ||g_j|| / C)``,
  summed), whose L2 sensitivity under adding/removing one record is ``C`` whatever the sampling;
* :func:`clipped_gradient_sum` gives the same clipped sum without materialising per-record gradients where the
  model allows (:mod:`privsilo.mechanisms.fast_clipping`), which is what the training step uses;
* :func:`gaussian_noise_like` draws ``N(0, std^2 I)`` from a caller-supplied generator.

Normalising the noisy sum (by the expected batch size ``q n`` in DP-SGD, by ``sum_j q_j`` in rPDP) is left to
the caller. Models must be stateless per record: BatchNorm (mixes records) and Dropout (global RNG) are not
supported inside ``vmap``.
"""
from __future__ import annotations

import math
from typing import Iterator

import torch
from torch.func import functional_call, grad, vmap

from privsilo.mechanisms.canaries import CanaryGradients
from privsilo.mechanisms.fast_clipping import clipped_gradient_sum as fast_clipped_sum
from privsilo.mechanisms.fast_clipping import supports_fast_clipping
from privsilo.mechanisms.proximal import ProximalTerm

SAMPLING_CHUNK = 1 << 22  # uniform draws (float64: 32 MiB) per chunk of steps on a device, see poisson_batches


def poisson_sample(*, num_records: int, rates: float | torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Indices of the records kept by independent Bernoulli(rates) draws (Poisson sampling).

    ``rates`` is a scalar or a tensor of shape ``(num_records,)``. One uniform draw per record is taken from
    ``generator`` whatever the rates, so the generator advances identically for every rate.
    """
    return next(poisson_batches(num_records=num_records, rates=rates, generator=generator, steps=1))


def poisson_batches(
    *, num_records: int, rates: float | torch.Tensor, generator: torch.Generator, steps: int, chunk_steps: int | None = None
) -> Iterator[torch.Tensor]:
    """The indices of ``steps`` independent Poisson samples (as :func:`poisson_sample`), one tensor per step, on
    the generator's device.

    Each step is ``num_records`` uniform draws compared with ``rates``: record ``j`` is in the step's batch with
    probability ``q_j``, independently of the other records and steps, however the draws are grouped. The
    uniforms of ``chunk_steps`` steps are drawn at once, when the caller reaches the first of them, and their
    indices found together. By default that is one step on a CPU generator (each step's draws come between the
    caller's own, e.g. noise, as they always did) and, on a device generator, as many steps as
    ``SAMPLING_CHUNK`` uniforms hold: the host, which needs the batch sizes to shape the steps, then waits for
    the device once per chunk instead of once per step.
    """
    rates = torch.as_tensor(rates, dtype=torch.float64, device=generator.device)
    if chunk_steps is None:
        chunk_steps = 1 if generator.device.type == "cpu" else SAMPLING_CHUNK // max(num_records, 1)
    per_draw = max(1, min(steps, chunk_steps))
    for first in range(0, steps, per_draw):
        count = min(per_draw, steps - first)
        uniforms = torch.rand((count, num_records), generator=generator, device=generator.device, dtype=torch.float64)
        kept = uniforms < rates
        sizes = kept.sum(dim=1).tolist()
        yield from torch.split(torch.nonzero(kept)[:, 1], sizes)


def per_sample_gradients(model: torch.nn.Module, *, features: torch.Tensor, labels: torch.Tensor) -> list[torch.Tensor]:
    """Per-record gradients of the cross-entropy loss, one tensor ``(B, *p.shape)`` per ``model.parameters()``.

    Record ``j``'s gradient is that of ``cross_entropy(model(x_j[None]), y_j[None])``, i.e. exactly what an
    autograd backward pass on that record alone would give. ``B = 0`` yields empty tensors (``vmap`` cannot
    trace a model over an empty batch).
    """
    if features.shape[0] == 0:
        return [p.new_zeros((0, *p.shape)) for p in model.parameters()]
    names = [name for name, _ in model.named_parameters()]
    params = {name: p.detach() for name, p in model.named_parameters()}
    buffers = {name: b.detach() for name, b in model.named_buffers()}

    def record_loss(record_params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, (record_params, buffers), (x.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(logits, y.unsqueeze(0))

    grads = vmap(grad(record_loss), in_dims=(None, 0, 0))(params, features, labels)
    return [grads[name] for name in names]


def per_sample_norms(per_sample_grads: list[torch.Tensor]) -> torch.Tensor:
    """L2 norm of each record's gradient over all parameters jointly, shape ``(B,)``."""
    squared = [g.pow(2).reshape(g.shape[0], math.prod(g.shape[1:])).sum(dim=1) for g in per_sample_grads]
    return torch.stack(squared, dim=0).sum(dim=0).sqrt()


def clip_and_sum(per_sample_grads: list[torch.Tensor], *, max_grad_norm: float) -> list[torch.Tensor]:
    """Sum over records of ``g_j * min(1, C / ||g_j||)`` (Abadi et al. 2016, Alg. 1, "clip gradient").

    Each record's contribution has L2 norm at most ``C = max_grad_norm``; gradients already within ``C`` are
    left unchanged (a zero gradient gets factor 1).
    """
    factors = (max_grad_norm / per_sample_norms(per_sample_grads)).clamp(max=1.0)
    return [torch.einsum("b,b...->...", factors.to(g.dtype), g) for g in per_sample_grads]


def clipped_gradient_sum(
    model: torch.nn.Module, *, features: torch.Tensor, labels: torch.Tensor, max_grad_norm: float
) -> list[torch.Tensor]:
    """The clipped sum of per-record gradients: :mod:`privsilo.mechanisms.fast_clipping` where the model allows it
    (Linear and Conv2d layers), else :func:`clip_and_sum` of :func:`per_sample_gradients`. Same result."""
    if features.shape[0] > 0 and supports_fast_clipping(model):
        sums = fast_clipped_sum(model, features=features, labels=labels, max_grad_norm=max_grad_norm)
        if sums is not None:
            return sums
    return clip_and_sum(per_sample_gradients(model, features=features, labels=labels), max_grad_norm=max_grad_norm)


def gaussian_noise_like(tensors: list[torch.Tensor], *, std: float, generator: torch.Generator) -> list[torch.Tensor]:
    """Independent ``N(0, std^2)`` noise with the shape and dtype of each tensor, drawn from ``generator`` on its
    device and moved to the tensor's (a no-op where they agree: a CUDA silo draws on its CUDA generator, see
    ``SiloContext.training_generator``; secure mode draws on the CPU)."""
    return [
        torch.randn(t.shape, generator=generator, dtype=t.dtype, device=generator.device).mul_(std).to(t.device)
        for t in tensors
    ]


def noisy_sgd_steps(
    model: torch.nn.Module,
    *,
    features: torch.Tensor,
    labels: torch.Tensor,
    rates: float | torch.Tensor,
    steps: int,
    max_grad_norm: float,
    noise_multiplier: float,
    lr: float,
    generator: torch.Generator,
    divisor: float | None = None,
    proximal: ProximalTerm | None = None,
    canaries: CanaryGradients | None = None,
) -> None:
    """``steps`` DP-SGD steps in place, each: Poisson-sample, clip, add ``N(0, (sigma C)^2)``, normalise, descend.

    Record ``j`` is included with probability ``rates`` (a scalar, or one rate per record as in rPDP-FL
    Algorithm 1) in each step, independently (:func:`poisson_batches`). The noisy clipped sum is divided by
    ``divisor`` or, by default, by the *expected* batch size ``sum_j q_j`` (``q n`` for a scalar rate), which
    does not depend on which records were drawn. An empty draw still adds noise. ``proximal`` (FedProx) adds its
    data-independent gradient after the noise, so the step stays a post-processing of the noisy sum.
    ``canaries`` (an audit's canary records, see :mod:`privsilo.mechanisms.canaries`) are sampled after the records and
    add ``C u_i`` each to the clipped sum. Every draw comes from ``generator``; inside a step nothing waits for
    the device.
    """
    num_records = labels.shape[0]
    if divisor is None:
        expected_batch = float(rates) * num_records if isinstance(rates, float) else float(rates.sum())
        if expected_batch <= 0.0:
            return
        divisor = expected_batch
    for idx in poisson_batches(num_records=num_records, rates=rates, generator=generator, steps=steps):
        idx = idx.to(features.device)
        noisy_step(model, features=features[idx], labels=labels[idx], max_grad_norm=max_grad_norm, noise_multiplier=noise_multiplier,
                   lr=lr, divisor=divisor, generator=generator, proximal=proximal, canaries=canaries)


def noisy_step(
    model: torch.nn.Module,
    *,
    features: torch.Tensor,
    labels: torch.Tensor,
    max_grad_norm: float,
    noise_multiplier: float,
    lr: float,
    divisor: float,
    generator: torch.Generator,
    proximal: ProximalTerm | None = None,
    canaries: CanaryGradients | None = None,
) -> None:
    """One step of :func:`noisy_sgd_steps` on the batch it drew: ``w -= lr (clipped sum + canaries + noise) /
    divisor``, then FedProx's pull ``w -= lr mu (w - w_t)``. Nothing here makes the host wait for the device."""
    clipped = clipped_gradient_sum(model, features=features, labels=labels, max_grad_norm=max_grad_norm)
    if canaries is not None:
        flat = canaries.sampled_sum(scale=max_grad_norm, generator=generator)
        clipped = [g + part.view_as(g).to(g) for g, part in zip(clipped, torch.split(flat, [g.numel() for g in clipped]))]
    noise = gaussian_noise_like(clipped, std=noise_multiplier * max_grad_norm, generator=generator)
    pulls = [None] * len(clipped) if proximal is None else proximal.gradients(list(model.parameters()))
    with torch.no_grad():
        for p, g, z, pull in zip(model.parameters(), clipped, noise, pulls):
            p.add_(g + z, alpha=-lr / divisor)
            if pull is not None:
                p.add_(pull, alpha=-lr)
