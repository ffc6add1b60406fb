"""Dirac canaries (``audit.canary_direction``): each canary's direction is a coordinate ``e_j`` of the model, one
coordinate per canary.

A Gaussian direction ``u`` picks up the real units' updates along it: under ULDP the clipped deltas of a thousand
users are large and aligned, and a random unit direction receives ``|sum| / sqrt(d)`` of them, more than the noise;
thousands of canaries also pick up each other. A Dirac canary receives only coordinate ``j`` of the real units'
sum and, on coordinates of their own, nothing from the other canaries (Nasr et al., USENIX Security 2023, "Dirac
canary" gradients). ``dirac`` draws the coordinates at random from the audit's seed; ``quiet`` takes those the data
moves least: the smallest mean absolute per-record gradient at the initial model over ``QUIET_SAMPLE`` records of
the training split (weights fed by pixels that are always blank, units the ReLU switches off on most records),
in a random order.

Why the bounds stay valid: the coordinates are fixed before training, from the audit's seed and (``quiet``) the
initial model and records that are not canaries, independently of the inclusion coins and of the mechanism's noise.
Each canary is still one unit whose clipped contribution has the mechanism's sensitivity, added or removed at
random, which is all Steinke et al.'s and Mahloujifar et al.'s tests assume. Reading the non-canary records is
within DP's threat model: the guarantee holds for every data set, against an adversary who knows all of it but the
unit in question. ``quiet`` reads no canary and nothing the run produces.
"""
from __future__ import annotations

import numpy as np

from privsilo.simulator.data import Dataset
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.scenario import Scenario

QUIET_SAMPLE = 512  # training records whose per-record gradients estimate how much the data moves each coordinate
DIRAC_STREAM = 4  # the coordinates come from (audit seed, 4); inclusion (seed, 1), user sampling (seed, 2, ...), Gaussian directions (seed, 3, id)


def dirac_coordinates(scenario: Scenario, dataset: Dataset, *, seed: int) -> np.ndarray | None:
    """Each canary's coordinate under ``audit.canary_direction`` (``dirac``, ``quiet``), all distinct; None for
    Gaussian directions. More canaries than the model has parameters is refused (``audit.canaries``, exit 2)."""
    choice, count = scenario.audit.canary_direction, scenario.audit.canaries
    if choice == "gaussian":
        return None
    model = _initial_model(scenario, dataset)
    dimension = sum(parameter.numel() for parameter in model.parameters())
    if count > dimension:
        raise ScenarioError("audit.canaries", count, f"at most {dimension} with audit.canary_direction {choice}: one of the "
                            f"model's {dimension} parameters per canary")
    rng = np.random.default_rng([seed, DIRAC_STREAM])
    if choice == "dirac":
        return rng.choice(dimension, size=count, replace=False)
    return quietest_coordinates(gradient_activity(model, dataset, rng), count, rng)


def quietest_coordinates(activity: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """The ``count`` coordinates of least ``activity`` (ties broken at random), in a random order."""
    quietest = np.lexsort((rng.random(activity.size), activity))[:count]
    return rng.permutation(quietest)


def gradient_activity(model, dataset: Dataset, rng: np.random.Generator) -> np.ndarray:
    """Mean absolute per-record gradient of the model's loss (``prediction_loss``) for each parameter, flattened as
    ``model_to_vector``, over up to ``QUIET_SAMPLE`` training records drawn from ``rng``; float64."""
    import torch

    from privsilo.mechanisms.base import prediction_loss

    records = rng.choice(len(dataset.y_train), size=min(QUIET_SAMPLE, len(dataset.y_train)), replace=False)
    parameters = list(model.parameters())
    total = torch.zeros(sum(parameter.numel() for parameter in parameters), dtype=torch.float64)
    model.eval()  # no dropout draw from torch's global generator
    for record in records:
        model.zero_grad(set_to_none=True)
        prediction_loss(model(torch.as_tensor(dataset.x_train[record:record + 1])), torch.as_tensor(dataset.y_train[record:record + 1])).backward()
        # a parameter the loss does not reach has no gradient: it is as quiet as can be
        total += torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in parameters]).abs().double()
    return (total / len(records)).numpy()


def _initial_model(scenario: Scenario, dataset: Dataset):
    """The run's initial global model (the first hypothesis's where there are several)."""
    from privsilo.mechanisms.base import load_vector_into_model
    from privsilo.simulator.data.silos import run_seeds
    from privsilo.simulator.engine import initial_state
    from privsilo.simulator.models.builtin import build_scenario_model

    model = build_scenario_model(scenario.model, feature_shape=dataset.feature_shape, num_classes=dataset.num_classes)
    load_vector_into_model(model, initial_state(scenario, dataset, run_seeds(scenario.seed, scenario.data.silos)["init"])[0])
    return model
