"""Models the silos train: plain torch, no BatchNorm or Dropout (DP-SGD needs per-sample gradients).

* ``logistic_regression``: flatten, then one linear layer (multinomial logistic regression on the logits).
* ``linear_regression``: flatten, then one linear layer without bias (``y = x . theta``), one output per record:
  the model of Galli et al.'s synthetic task (ICISSP 2023, Sec. 4.1; theta in R^2); for regression datasets.
* ``mlp``: flatten, two hidden layers of 200 ReLU units (the "2NN" of McMahan et al. 2017, "Communication-
  Efficient Learning of Deep Networks from Decentralized Data", AISTATS, Sec. 3).
* ``mlp_128``: flatten, one hidden layer of 128 ReLU units (64-128-10 on digits: the workload of
  ``benchmarks/comparisons/bench_vs_flower.py``).
* ``cnn``: the MNIST CNN of McMahan et al. 2017: 5x5 conv (32 channels), 2x2 max pool, 5x5 conv (64 channels),
  2x2 max pool, fully connected 512 with ReLU, linear output. Convolutions are padded ("same"), so the flatten
  size is 64 * (H // 4) * (W // 4); it runs on 28x28 and on 8x8 images.
* ``small_cnn``: the 21,840-parameter MNIST CNN that ULDP-FL (Kato et al., VLDB 2024) and PLDP-FL (Shen et al.,
  Entropy 2023) train: 5x5 conv 1->10, 2x2 max pool, ReLU, 5x5 conv 10->20, 2x2 max pool, ReLU, fully connected
  320->50 with ReLU, linear 50->10 (on 28x28 inputs). Convolutions are unpadded, so images need at least 14x14.
* ``lenet``: the LeNet attacked in "Deep Leakage from Gradients" (Zhu et al. 2019, NeurIPS): three padded 5x5
  convolutions of 12 channels with strides 2, 2, 1, each followed by a Sigmoid, then one linear layer. As in
  DLG, every weight and bias starts uniform in [-0.5, 0.5], which is what makes gradient inversion work on it.

A user's own model is a callable returning an ``nn.Module`` (``model.name: "package.module:factory"``, a name an
installed package registers under ``privsilo.models``, or an object given to ``privsilo.run(model=...)``), called
with ``model.kwargs`` and, if its signature asks for them, ``feature_shape`` and ``num_classes``
(:mod:`privsilo.simulator.user_code`).

Every model's initial weights are a function of torch's global seed only (``torch.manual_seed``).
torch is imported by the builders, not at the top: ``privsilo list`` and ``validate`` need only the names and
:func:`model_supports` (a user's model is built to be checked, which loads torch).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from torch import nn

MODELS = ("logistic_regression", "linear_regression", "mlp", "cnn", "small_cnn", "lenet", "mlp_128")
MLP_HIDDEN = 200
MLP_128_HIDDEN = 128
CNN_POOLINGS = 2
SMALL_CNN_KERNEL = 5
SMALL_CNN_MIN_SIZE = 14  # two unpadded 5x5 convolutions, each followed by a 2x2 pool, leave at least 1x1
LENET_STRIDES = (2, 2, 1)
LENET_INIT_BOUND = 0.5


def model_supports(name: str, feature_shape: tuple[int, ...]) -> bool:
    """True when model ``name`` can take inputs of ``feature_shape`` (cnn and lenet need (C, H, W) images)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    if name in ("logistic_regression", "linear_regression", "mlp", "mlp_128"):
        return len(feature_shape) >= 1 and math.prod(feature_shape) > 0
    if len(feature_shape) != 3 or min(feature_shape) < 1:
        return False
    if name == "small_cnn":
        return min(feature_shape[1:]) >= SMALL_CNN_MIN_SIZE
    return name == "lenet" or min(feature_shape[1:]) >= 2 ** CNN_POOLINGS


def parameter_count(name: str, *, feature_shape: tuple[int, ...], num_classes: int) -> int:
    """The number of parameters d of ``build_model(name, ...)``, without torch (``privsilo validate`` checks
    parameters against it, e.g. pldp's ``coordinates``)."""
    if not model_supports(name, feature_shape):
        raise ValueError(f"model {name!r} does not support inputs of shape {tuple(feature_shape)}")

    def linear(n_in: int, n_out: int) -> int:
        return n_in * n_out + n_out

    def conv(c_in: int, c_out: int, kernel: int) -> int:
        return c_in * c_out * kernel * kernel + c_out

    if name == "logistic_regression":
        return linear(math.prod(feature_shape), num_classes)
    if name == "linear_regression":  # no bias
        return math.prod(feature_shape) * num_classes
    if name == "mlp":
        return linear(math.prod(feature_shape), MLP_HIDDEN) + linear(MLP_HIDDEN, MLP_HIDDEN) + linear(MLP_HIDDEN, num_classes)
    if name == "mlp_128":
        return linear(math.prod(feature_shape), MLP_128_HIDDEN) + linear(MLP_128_HIDDEN, num_classes)
    channels, height, width = feature_shape
    if name == "cnn":
        scale = 2 ** CNN_POOLINGS
        flat = 64 * (height // scale) * (width // scale)
        return conv(channels, 32, 5) + conv(32, 64, 5) + linear(flat, 512) + linear(512, num_classes)
    if name == "small_cnn":
        flat = 20 * _small_cnn_side(_small_cnn_side(height)) * _small_cnn_side(_small_cnn_side(width))
        return conv(channels, 10, SMALL_CNN_KERNEL) + conv(10, 20, SMALL_CNN_KERNEL) + linear(flat, 50) + linear(50, num_classes)
    total = 0
    for stride in LENET_STRIDES:
        total += conv(channels, 12, 5)
        channels, height, width = 12, (height - 1) // stride + 1, (width - 1) // stride + 1
    return total + linear(12 * height * width, num_classes)


def _small_cnn_side(size: int) -> int:
    """Side length after one small_cnn block: an unpadded 5x5 convolution, then a 2x2 max pool."""
    return (size - SMALL_CNN_KERNEL + 1) // 2


def build_model(
    name: str, *, feature_shape: tuple[int, ...], num_classes: int, kwargs: dict[str, Any] | None = None,
    factory: Callable[..., Any] | None = None,
) -> nn.Module:
    """A freshly initialised model mapping a batch shaped (batch, *feature_shape) to (batch, num_classes) logits.

    ``name`` is a built-in model or a user's (``factory``, when given, is the user's callable itself). Raises
    ValueError for an unknown name, a feature shape a built-in model does not support, or a user's factory that
    fails or returns something other than an ``nn.Module`` (:class:`~privsilo.simulator.user_code.UserCodeError`).
    """
    if factory is not None or name not in MODELS:
        return _user_model(name, factory=factory, kwargs=kwargs or {}, feature_shape=feature_shape, num_classes=num_classes)
    if kwargs:
        raise ValueError(f"built-in model {name!r} takes no kwargs, got {sorted(kwargs)}")
    from torch import nn

    if not model_supports(name, feature_shape):
        raise ValueError(f"model {name!r} does not support inputs of shape {tuple(feature_shape)}; "
                         "cnn, small_cnn and lenet need images shaped (channels, height, width); "
                         f"small_cnn needs at least {SMALL_CNN_MIN_SIZE}x{SMALL_CNN_MIN_SIZE}")
    if name == "logistic_regression":
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(feature_shape), num_classes))
    if name == "linear_regression":  # num_classes: the number of outputs (1 for a regression dataset)
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(feature_shape), num_classes, bias=False))
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(feature_shape), MLP_HIDDEN), nn.ReLU(),
            nn.Linear(MLP_HIDDEN, MLP_HIDDEN), nn.ReLU(),
            nn.Linear(MLP_HIDDEN, num_classes),
        )
    if name == "mlp_128":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(math.prod(feature_shape), MLP_128_HIDDEN), nn.ReLU(),
            nn.Linear(MLP_128_HIDDEN, num_classes),
        )
    if name == "cnn":
        return _mcmahan_cnn(feature_shape=feature_shape, num_classes=num_classes)
    if name == "small_cnn":
        return _small_cnn(feature_shape=feature_shape, num_classes=num_classes)
    return _dlg_lenet(feature_shape=feature_shape, num_classes=num_classes)


def build_scenario_model(model: Any, *, feature_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """:func:`build_model` for a scenario's ``model`` block (``ModelConfig``: ``name``, ``kwargs`` and the factory
    object ``privsilo.run`` attaches)."""
    return build_model(model.name, feature_shape=feature_shape, num_classes=num_classes, kwargs=model.kwargs, factory=model.factory)


def _user_model(name: str, *, factory: Callable[..., Any] | None, kwargs: dict[str, Any], feature_shape: tuple[int, ...],
                num_classes: int) -> nn.Module:
    from torch import nn

    from privsilo.simulator.user_code import UserCodeError, call_with, resolve

    function = factory if factory is not None else resolve("model", name)
    if isinstance(function, nn.Module):
        raise UserCodeError(f"model {name!r} is a {type(function).__name__} object: pass a factory, not a module, a function "
                            "that returns a new torch.nn.Module (e.g. lambda: the module's constructor), so every silo builds its own")
    try:
        model = call_with(function, kwargs, feature_shape=tuple(feature_shape), num_classes=num_classes)
    except Exception as exc:
        raise UserCodeError(f"model {name!r} failed when built with kwargs {kwargs}: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, nn.Module):
        raise UserCodeError(f"model {name!r} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _mcmahan_cnn(*, feature_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from torch import nn

    channels, height, width = feature_shape
    scale = 2 ** CNN_POOLINGS
    return nn.Sequential(
        nn.Conv2d(channels, 32, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * (height // scale) * (width // scale), 512), nn.ReLU(),
        nn.Linear(512, num_classes),
    )


def _small_cnn(*, feature_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from torch import nn

    channels, height, width = feature_shape
    flat = 20 * _small_cnn_side(_small_cnn_side(height)) * _small_cnn_side(_small_cnn_side(width))
    return nn.Sequential(
        nn.Conv2d(channels, 10, kernel_size=SMALL_CNN_KERNEL), nn.MaxPool2d(2), nn.ReLU(),
        nn.Conv2d(10, 20, kernel_size=SMALL_CNN_KERNEL), nn.MaxPool2d(2), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(flat, 50), nn.ReLU(),
        nn.Linear(50, num_classes),
    )


def _dlg_lenet(*, feature_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    import torch
    from torch import nn

    channels, height, width = feature_shape
    layers: list[nn.Module] = []
    for stride in LENET_STRIDES:
        layers += [nn.Conv2d(channels, 12, kernel_size=5, padding=2, stride=stride), nn.Sigmoid()]
        channels = 12
        # A padded 5x5 convolution with stride s maps size n to floor((n - 1) / s) + 1.
        height, width = (height - 1) // stride + 1, (width - 1) // stride + 1
    model = nn.Sequential(*layers, nn.Flatten(), nn.Linear(12 * height * width, num_classes))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.uniform_(-LENET_INIT_BOUND, LENET_INIT_BOUND)
    return model


EVALUATION_CHUNK = 2048  # test records per forward pass


def evaluate_model(model: nn.Module, vector: Any, *, features: Any, labels: Any) -> tuple[float, float]:
    """Loss and accuracy of the parameters ``vector`` (loaded into ``model``) on a test set, without autograd
    (no activation is kept for a backward pass), on the device the tensors live on, with one wait for the device
    at the end; no accuracy (NaN) for regression targets."""
    import torch

    from privsilo.mechanisms.base import load_vector_into_model, prediction_loss

    load_vector_into_model(model, vector)
    model.eval()
    with torch.inference_mode():
        logits = torch.cat([model(chunk) for chunk in torch.split(features, EVALUATION_CHUNK)])
        loss = prediction_loss(logits, labels).double()
        if labels.is_floating_point():
            return float(loss), float("nan")
        accuracy = (logits.argmax(dim=1) == labels).double().mean()
        loss, accuracy = torch.stack([loss, accuracy]).tolist()
        return loss, accuracy
