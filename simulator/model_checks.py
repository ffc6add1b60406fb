"""What a user's own model must satisfy, checked once on the built model before any actor starts.

Every mechanism: all parameters trainable (local training and DP-SGD update every parameter) and the forward pass
deterministic in training mode (a layer drawing from torch's global generator, e.g. functional dropout, breaks
"the same seed gives the same results"). Mechanisms whose silos clip each record's gradient or each user's
update (:meth:`~mechanisms.base.MechanismParams.needs_independent_records`): a record's outputs must not depend
on the other records of its batch, which is probed by changing one record of a batch, whatever the layers that
might mix them (BatchNorm, ``F.batch_norm``, ``x - x.mean(0)``); and, for per-record clipping, no layer type
whose per-record gradients cannot be taken (:func:`mechanisms.per_sample.per_sample_obstacles`).
"""
from __future__ import annotations

import torch

PROBE_RECORDS = 3


def model_problem(model: torch.nn.Module, *, feature_shape: tuple[int, ...], independent_records: bool,
                  clips_record_gradients: bool) -> str | None:
    """Why ``model`` cannot be used (one phrase), or None."""
    from mechanisms.per_sample import per_sample_obstacles

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
    if not torch.equal(first, again):
        return ("gives different outputs for the same inputs in training mode (it draws from torch's global generator, "
                "e.g. dropout), so a seed would not repeat a run; remove the randomness")
    if independent_records and not torch.allclose(first[:-1], other[:-1], rtol=1e-5, atol=1e-6):
        return ("mixes the records of a batch (a record's outputs change when another record does, e.g. batch "
                "normalisation), so one record's or user's update depends on others and clipping it bounds nothing")
    obstacles = per_sample_obstacles(model) if clips_record_gradients else []
    if obstacles:
        return f"cannot give the per-record gradients the mechanism clips: {obstacles[0]}"
    return None
