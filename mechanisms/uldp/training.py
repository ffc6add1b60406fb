"""Per-user local training of ULDP-AVG / AVG-w / SGD (Kato et al., Algorithm 3, lines 9-15 and 21-23).

Each user of a silo trains its own copy of the model from ``x_t`` on that user's records only: ``steps`` epochs
of full-batch gradient descent on the user's records (mean cross-entropy, learning rate ``lr``; with ``mu`` > 0
plus FedProx's proximal term ``mu/2 ||w - x_t||^2``, Li et al. 2020, whose gradient ``mu (w - x_t)`` involves no
record, and the user's delta is clipped after training as before). All users of a
silo train at once: their parameters are stacked along a leading user axis and ``torch.func.vmap`` maps
``grad(functional_call(model, ...))`` over users, each with its own padded batch and a 0/1 mask. Users are
bucketed by the next power of two of their record count, so padding at most doubles the work (small silos:
one bucket). Models that
cannot be vectorised (buffers, BatchNorm, Dropout) train user by user (:func:`train_users_loop`, also the
benchmark's baseline and the tests' reference).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch.func import functional_call, grad, vmap

from privsilo.mechanisms.proximal import ProximalTerm

_ONE_BUCKET_SLACK = 4096  # padded records
_UNVECTORISABLE = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.Dropout)


def can_vectorise(model: torch.nn.Module) -> bool:
    """True when every user's training is a pure function of its parameters and batch."""
    return not any(True for _ in model.buffers()) and not any(isinstance(m, _UNVECTORISABLE) for m in model.modules())


def _masked_mean_loss(model: torch.nn.Module):
    def loss(params: dict[str, torch.Tensor], features: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, params, (features,))
        per_record = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
        return (per_record * mask).sum() / mask.sum()

    return loss


def _flat(params: dict[str, torch.Tensor], names: Sequence[str], users: int) -> torch.Tensor:
    return torch.cat([params[name].reshape(users, -1) for name in names], dim=1)


def _buckets(groups: Sequence[torch.Tensor]) -> list[list[int]]:
    """Users grouped by the next power of two of their record count; all in one group when padding them all to
    the largest costs at most ``_ONE_BUCKET_SLACK`` records more than the records themselves (each vmap call has a
    fixed cost that dominates small silos)."""
    sizes = [len(records) for records in groups]
    if len(sizes) * max(sizes, default=0) <= sum(sizes) + _ONE_BUCKET_SLACK:
        return [list(range(len(groups)))]
    by_size: dict[int, list[int]] = {}
    for user, records in enumerate(groups):
        by_size.setdefault(max(1, int(len(records)) - 1).bit_length(), []).append(user)
    return [by_size[key] for key in sorted(by_size)]


def train_users(
    model: torch.nn.Module, *, features: torch.Tensor, labels: torch.Tensor, groups: Sequence[torch.Tensor], steps: int, lr: float,
    mu: float = 0.0,
) -> torch.Tensor:
    """``(len(groups), d)`` model deltas ``x^{s,u} - x_t``, one per user; ``groups[u]`` indexes user ``u``'s
    records (at least one). ``model`` holds ``x_t`` and is left unchanged. Vectorised when the model allows."""
    if not can_vectorise(model):
        return train_users_loop(model, features=features, labels=labels, groups=groups, steps=steps, lr=lr, mu=mu)
    names = [name for name, _ in model.named_parameters()]
    start = {name: p.detach() for name, p in model.named_parameters()}
    step_grad = vmap(grad(_masked_mean_loss(model)))
    out = torch.empty(len(groups), sum(p.numel() for p in start.values()), dtype=next(iter(start.values())).dtype, device=features.device)
    for bucket in _buckets(groups):
        width = max(len(groups[u]) for u in bucket)
        index = torch.zeros(len(bucket), width, dtype=torch.long, device=features.device)
        mask = torch.zeros(len(bucket), width, dtype=features.dtype, device=features.device)
        for row, user in enumerate(bucket):
            index[row, : len(groups[user])] = groups[user]
            mask[row, : len(groups[user])] = 1
        x, y = features[index], labels[index]
        params = {name: p.expand(len(bucket), *p.shape).clone() for name, p in start.items()}
        stacked_start = {name: p.expand(len(bucket), *p.shape) for name, p in start.items()}
        for _ in range(steps):
            grads = step_grad(params, x, y, mask.to(next(iter(params.values())).dtype))
            if mu:
                grads = {name: grads[name] + mu * (params[name] - stacked_start[name]) for name in names}
            params = {name: params[name] - lr * grads[name] for name in names}
        out[bucket] = _flat(params, names, len(bucket)) - _flat(stacked_start, names, len(bucket))
    return out


def train_users_loop(
    model: torch.nn.Module, *, features: torch.Tensor, labels: torch.Tensor, groups: Sequence[torch.Tensor], steps: int, lr: float,
    mu: float = 0.0,
) -> torch.Tensor:
    """The user-by-user form of :func:`train_users` (plain autograd, one model copy per user)."""
    start = [p.detach().clone() for p in model.parameters()]
    proximal = ProximalTerm.at(model, mu)
    deltas = []
    for records in groups:
        for p, s in zip(model.parameters(), start):
            p.data.copy_(s)
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(model(features[records]), labels[records])
            gradients = torch.autograd.grad(loss, list(model.parameters()))
            if proximal is not None:
                gradients = [g + pull for g, pull in zip(gradients, proximal.gradients(list(model.parameters())))]
            with torch.no_grad():
                for p, g in zip(model.parameters(), gradients):
                    p.sub_(lr * g)
        deltas.append(torch.cat([(p.detach() - s).reshape(-1) for p, s in zip(model.parameters(), start)]))
    with torch.no_grad():
        for p, s in zip(model.parameters(), start):
            p.copy_(s)
    return torch.stack(deltas) if deltas else torch.empty(0, sum(s.numel() for s in start), dtype=start[0].dtype)


def clip_rows(rows: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Each row scaled to L2 norm at most ``max_norm`` (``Delta * min(1, C / ||Delta||)``, Algorithm 3 line 16)."""
    norms = rows.norm(dim=1, keepdim=True)
    return rows * torch.clamp(max_norm / norms.clamp_min(torch.finfo(rows.dtype).tiny), max=1.0)
