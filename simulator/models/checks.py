"""What a user's own model must satisfy, checked once on the built model before any actor starts.

Every mechanism: all parameters trainable (local training and DP-SGD update every parameter) and the forward pass
deterministic in training mode (a layer drawing from torch's global generator, e.g. functional dropout, breaks
"the same seed gives the same results"). Mechanisms whose silos clip each record's gradient or each user's
update (:meth:`~privsilo.mechanisms.base.MechanismParams.needs_independent_records`): a record's outputs must not depend
on the other records of its batch, which is probed by changing one record of a batch, whatever the layers that
might mix them (BatchNorm, ``F.batch_norm``, ``x - x.mean(0)``); and, for per-record clipping, no layer type
whose per-record gradients cannot be taken: one with buffers, which carry state from batch to batch (privsilo
computes per-record gradients for ``nn.Linear`` and ``nn.Conv2d`` directly and for every other layer through
``torch.func``, e.g. ``LayerNorm``, ``GroupNorm``, ``Embedding``, ``Conv1d``).
"""
from __future__ import annotations

import torch

PROBE_RECORDS = 3


def model_problem(model: torch.nn.Module, *, feature_shape: tuple[int, ...], independent_records: bool,
                  clips_record_gradients: bool) -> str | None:
    """Why ``model`` cannot be used (one phrase), or None."""
    if not any(True for _ in model.parameters()):
        return "has no trainable parameters"
    frozen = [name for name, parameter in model.named_parameters() if not parameter.requires_grad]
    if frozen:
        return f"has frozen parameters ({', '.join(frozen[:3])}); every parameter is trained, so give the model only trainable ones"
    generator = torch.Generator().manual_seed(0)  # probe inputs only; no draw of the run depends on them
    batch = torch.randn((PROBE_RECORDS, *feature_shape), generator=generator)
    changed = batch.clone()
    changed[-1] = torch.randn(feature_shape, generator=generator)
    was_training = model.training
    model.train()
    try:
        with torch.no_grad():
            first, again, other = model(batch), model(batch), model(changed)
    finally:
        model.train(was_training)
    if not (torch.isfinite(first).all() and torch.isfinite(other).all()):
        return ("gives NaN or infinite outputs for random inputs in training mode (e.g. a log or division of values that "
                "can be zero or negative); make its forward pass finite")
    if not torch.equal(first, again):
        return ("gives different outputs for the same inputs in training mode (it draws from torch's global generator, "
                "e.g. dropout), so a seed would not repeat a run; remove the randomness")
    if independent_records and not torch.allclose(first[:-1], other[:-1], rtol=1e-5, atol=1e-6):
        return ("mixes the records of a batch (a record's outputs change when another record does, e.g. batch "
                "normalisation), so one record's or user's update depends on others and clipping it bounds nothing")
    with_buffers = [name or type(module).__name__ for name, module in model.named_modules() if any(True for _ in module.buffers(recurse=False))]
    if clips_record_gradients and with_buffers:
        return (f"cannot give the per-record gradients the mechanism clips: layer '{with_buffers[0]}' keeps buffers, "
                "state carried from batch to batch")
    return None
