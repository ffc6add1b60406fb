"""DLG and iDLG: reconstruct a silo's records from the gradient its upload reveals.

**DLG** (Zhu, Liu and Han, "Deep Leakage from Gradients", NeurIPS 2019; mit-han-lab/dlg): dummy inputs x' and
dummy label logits y', both drawn from N(0, 1), are optimised with L-BFGS so that the attacker's model of the
silo's local training, run on (x', softmax(y')), produces the observed gradient; the loss is the sum over the
model's layers of the squared L2 distance between the two gradients, divided by the squared norm of the observed
gradient (a constant, so the same minimiser: L-BFGS's absolute stopping tolerances then act on a relative
error; with the plain sum a record whose gradient is small, e.g. of a confident model, stopped at 20 dB where
the relative loss reaches 47-48 dB). The predicted label of a record is argmax y'. **iDLG** (Zhao, Mopuri and Bilen, "iDLG: Improved Deep Leakage from Gradients", 2020): for a single
record the cross-entropy gradient of the last layer's bias is ``softmax(logits) - onehot(label)``, negative at
the label only, so the label is the argmin of that entry (without a bias, of the row sums of the last weight's
gradient, which has the same signs when the features are non-negative); then the input alone is optimised.

**The attacker's model of the round.** The observed gradient is ``-delta / lr`` of the upload, read from the
broadcast hypothesis nearest to it when the mechanism uploads parameters (see
:meth:`~privsilo.simulator.attacks.observation.Observation.observed_gradient`). The attacker replays the silo's
``local_steps`` SGD steps at ``lr`` from that hypothesis on the dummy records and sums their gradients (the
"local updates" user of the breaching library): every step on the same batch when the silo holds one batch, else
step k on its own ``batch_size`` dummies. For ``dp_sgd`` and ``rpdp`` each dummy record's gradient is clipped to
the public ``max_grad_norm`` and the clipped sum divided by the batch size, as the silo does; for ``dprivacy``
(Galli et al., ICISSP 2023, Algorithm 2, ``calibration: clipped``) the replayed delta ``-lr x sum`` is clipped to
the public radius R, as the silo clips its update. The noise is unknown to the attacker and left out. With one
plain step this is exactly DLG's gradient matching.

**Optimiser.** ``torch.optim.LBFGS`` with its defaults (learning rate 1, up to 20 inner iterations per outer
step), ``iterations`` outer steps. ``line_search: strong_wolfe`` (default) adds a strong-Wolfe line search;
``none`` is the original DLG code, whose unguarded steps can leave the loss higher than where they started,
stall there, or run into NaN. Whenever an outer step ends with a NaN or infinite loss or dummy value, the
dummies go back to the best point seen so far (lowest loss), the optimiser starts afresh, and the restart is
counted. The result is the best point seen.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch.func import functional_call
from torch.nn import functional as F

from privsilo.mechanisms.base import load_vector_into_model
from privsilo.simulator.attacks.observation import Observation
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.models.builtin import build_model


METHODS = ("dlg", "idlg")
LINE_SEARCHES = ("strong_wolfe", "none")


@dataclass(frozen=True)
class InversionSettings:
    """How to run one inversion: ``method`` dlg or idlg, L-BFGS ``iterations`` (outer steps), ``line_search``
    (``strong_wolfe`` or ``none``) and the outer steps after which to keep a snapshot (0 = the initial dummies)."""

    method: str
    iterations: int
    line_search: str
    snapshot_steps: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.method not in METHODS or self.line_search not in LINE_SEARCHES or self.iterations < 1:
            raise ValueError(f"method must be one of {METHODS}, line_search one of {LINE_SEARCHES}, iterations >= 1; got {self}")


@dataclass(frozen=True)
class Reconstruction:
    """One inversion's result: the dummy inputs at the best point (model input space, one row per record in the
    round), their labels, the best loss after each outer step, snapshots ``(step, inputs)``, restarts, seconds."""

    inputs: np.ndarray
    labels: np.ndarray
    losses: np.ndarray
    snapshots: tuple[tuple[int, np.ndarray], ...]
    restarts: int
    seconds: float


def snapshot_steps(iterations: int, *, count: int = 5) -> tuple[int, ...]:
    """Step 0 and about ``count`` geometrically spaced steps up to ``iterations`` (e.g. 0, 1, 4, 17, 72, 300)."""
    spaced = np.unique(np.round(np.geomspace(1, iterations, count)).astype(int))
    return (0, *(int(step) for step in spaced))


def invert(observation: Observation, *, settings: InversionSettings, generator: torch.Generator) -> Reconstruction:
    """Run DLG or iDLG on one observation; every random draw (the dummies) comes from ``generator``."""
    started = time.perf_counter()
    model = _broadcast_model(observation)
    start = {name: p.detach().requires_grad_(True) for name, p in model.named_parameters()}
    observed = _split_like(observation.observed_gradient(), list(start.values()))
    count, classes = observation.records_in_round, observation.num_classes
    inputs = torch.randn((count, *observation.feature_shape), generator=generator).requires_grad_(True)
    if settings.method == "dlg":
        label_logits = torch.randn((count, classes), generator=generator).requires_grad_(True)
        variables = [inputs, label_logits]

        def targets() -> torch.Tensor:
            return F.softmax(label_logits, dim=-1)
    else:
        label = label_from_gradient(observed, num_classes=classes)
        fixed = F.one_hot(torch.full((count,), label), classes).float()
        variables = [inputs]

        def targets() -> torch.Tensor:
            return fixed

    scale = _squared_norm(observed)

    def objective() -> torch.Tensor:
        simulated = accumulated_gradient(model, start, inputs, targets(), observation=observation)
        return sum(((s - o) ** 2).sum() for s, o in zip(simulated, observed)) / scale

    best, losses, snapshots, restarts = _optimise(objective, variables, settings=settings)
    labels = best[1].argmax(dim=-1).numpy() if settings.method == "dlg" else np.full(count, label)
    return Reconstruction(
        inputs=best[0].numpy(), labels=labels, losses=np.array(losses), restarts=restarts,
        snapshots=tuple((step, snap.numpy()) for step, snap in snapshots), seconds=time.perf_counter() - started,
    )


def label_from_gradient(observed: list[torch.Tensor], *, num_classes: int) -> int:
    """iDLG's label of a single record from the last layer's gradient (see the module docstring)."""
    last = observed[-1]
    if tuple(last.shape) == (num_classes,):
        return int(torch.argmin(last))
    return int(torch.argmin(last.reshape(num_classes, -1).sum(dim=1)))


def accumulated_gradient(
    model: torch.nn.Module,
    start: dict[str, torch.Tensor],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    observation: Observation,
) -> list[torch.Tensor]:
    """The sum of the gradients of the silo's local steps, replayed on dummy records (differentiable in them)."""
    params, total, batch = start, None, observation.batch_size
    for step in range(observation.local_steps):
        rows = slice(None) if observation.steps_share_batch else slice(step * batch, (step + 1) * batch)
        grads = _step_gradient(model, params, inputs[rows], targets[rows], max_grad_norm=observation.max_grad_norm)
        total = grads if total is None else [t + g for t, g in zip(total, grads)]
        if step + 1 < observation.local_steps:
            params = {name: p - observation.lr * g for (name, p), g in zip(params.items(), grads)}
    return _clip_update(total, lr=observation.lr, max_update_norm=observation.max_update_norm)


def _clip_update(gradient: list[torch.Tensor], *, lr: float, max_update_norm: float | None) -> list[torch.Tensor]:
    """The summed gradient scaled as the silo clips its delta ``-lr x gradient`` to norm ``max_update_norm`` (None: as is)."""
    if max_update_norm is None:
        return gradient
    norm = lr * torch.sqrt(sum((g ** 2).sum() for g in gradient))
    factor = torch.clamp(max_update_norm / (norm + 1e-12), max=1.0)
    return [factor * g for g in gradient]


def _step_gradient(
    model: torch.nn.Module, params: dict[str, torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor, *, max_grad_norm: float | None
) -> list[torch.Tensor]:
    """One step's gradient: of the mean soft cross-entropy, or (DP) the mean of per-record gradients clipped to C."""
    values = list(params.values())

    def gradient(rows: slice) -> tuple[torch.Tensor, ...]:
        logits = functional_call(model, params, (inputs[rows],))
        loss = torch.mean(torch.sum(-targets[rows] * F.log_softmax(logits, dim=-1), dim=-1))
        return torch.autograd.grad(loss, values, create_graph=True)

    if max_grad_norm is None:
        return list(gradient(slice(None)))
    total = [torch.zeros_like(v) for v in values]
    for j in range(inputs.shape[0]):
        grads = gradient(slice(j, j + 1))
        norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
        factor = torch.clamp(max_grad_norm / (norm + 1e-12), max=1.0)
        total = [t + factor * g for t, g in zip(total, grads)]
    return [t / inputs.shape[0] for t in total]


def _broadcast_model(observation: Observation) -> torch.nn.Module:
    """The model as broadcast (the hypothesis the silo trained); refuses a model without gradients."""
    model = build_model(observation.model, feature_shape=observation.feature_shape, num_classes=observation.num_classes)
    check_has_gradients(model, name=observation.model)
    load_vector_into_model(model, observation.start())
    return model


def check_has_gradients(model: torch.nn.Module, *, name: str) -> None:
    """Refuse (exit 2) a model with no trainable parameter: there is no gradient to invert."""
    if not any(p.requires_grad for p in model.parameters()):
        raise ScenarioError("model.name", name, "has no trainable parameters, so its uploads carry no gradient to invert")


def _squared_norm(tensors: list[torch.Tensor]) -> float:
    """The squared L2 norm over all layers; 1 where it is 0 or not finite (nothing to normalise by)."""
    value = float(sum((t.double() ** 2).sum() for t in tensors))
    return value if math.isfinite(value) and value > 0 else 1.0


def _split_like(vector: np.ndarray, like: list[torch.Tensor]) -> list[torch.Tensor]:
    tensors, offset = [], 0
    for p in like:
        tensors.append(torch.tensor(vector[offset: offset + p.numel()], dtype=p.dtype).reshape(p.shape))
        offset += p.numel()
    return tensors


def _optimise(
    objective: Callable[[], torch.Tensor], variables: list[torch.Tensor], *, settings: InversionSettings
) -> tuple[list[torch.Tensor], list[float], list[tuple[int, torch.Tensor]], int]:
    """L-BFGS on ``variables``; returns the best point, the best loss after each step, snapshots, restarts."""
    best_loss, best = math.inf, [v.detach().clone() for v in variables]

    def closure() -> torch.Tensor:
        nonlocal best_loss, best
        loss = objective()
        for variable, grad in zip(variables, torch.autograd.grad(loss, variables)):
            variable.grad = grad
        value = float(loss.detach())
        if math.isfinite(value) and value < best_loss:
            best_loss, best = value, [v.detach().clone() for v in variables]
        return loss.detach()

    def fresh() -> torch.optim.LBFGS:
        return torch.optim.LBFGS(variables, line_search_fn=None if settings.line_search == "none" else settings.line_search)

    optimizer, losses, restarts = fresh(), [], 0
    snapshots = [(0, best[0].clone())] if 0 in settings.snapshot_steps else []
    for step in range(1, settings.iterations + 1):
        loss = float(optimizer.step(closure))
        if not (math.isfinite(loss) and all(bool(torch.isfinite(v).all()) for v in variables)):
            with torch.no_grad():
                for variable, value in zip(variables, best):
                    variable.copy_(value)
            optimizer, restarts = fresh(), restarts + 1
        losses.append(best_loss)
        if step in settings.snapshot_steps:
            snapshots.append((step, best[0].clone()))
    return best, losses, snapshots, restarts


__all__ = ["InversionSettings", "Reconstruction", "accumulated_gradient", "check_has_gradients", "invert", "label_from_gradient", "snapshot_steps"]
