"""Model zoo: output shapes, supported inputs, determinism and the absence of per-batch layers."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from privsilo.simulator.data import DATASETS
from privsilo.simulator.models.builtin import MODELS, build_model, model_supports, parameter_count

TABULAR = [(13,), (30,)]
IMAGES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]
SHAPES = TABULAR + IMAGES
SUPPORTED = [(name, shape) for name in ("logistic_regression", "mlp", "mlp_128") for shape in SHAPES] + [
    (name, shape) for name in ("cnn", "lenet") for shape in IMAGES] + [("small_cnn", (1, 28, 28)), ("small_cnn", (3, 32, 32))]


@pytest.mark.parametrize(("name", "shape"), SUPPORTED)
def test_supported_models_give_batch_by_classes_logits(name, shape):
    assert model_supports(name, shape)
    torch.manual_seed(0)
    model = build_model(name, feature_shape=shape, num_classes=7)
    logits = model(torch.randn(5, *shape))
    assert logits.shape == (5, 7)
    assert torch.isfinite(logits).all()
    assert parameter_count(name, feature_shape=shape, num_classes=7) == sum(p.numel() for p in model.parameters())


def test_parameter_count_of_every_shipped_dataset_and_model():
    """``privsilo validate`` checks parameters against d without building the model: the count must be exact."""
    for info in DATASETS.values():
        for name in MODELS:
            if model_supports(name, info.feature_shape):
                model = build_model(name, feature_shape=info.feature_shape, num_classes=info.num_classes)
                want = sum(p.numel() for p in model.parameters())
                assert parameter_count(name, feature_shape=info.feature_shape, num_classes=info.num_classes) == want


def test_support_matrix():
    for name in ("logistic_regression", "mlp", "mlp_128"):
        assert all(model_supports(name, shape) for shape in SHAPES)
    for name in ("cnn", "lenet"):
        assert not any(model_supports(name, shape) for shape in TABULAR)
    assert not model_supports("cnn", (1, 3, 3))  # too small for two 2x2 poolings
    assert not any(model_supports("small_cnn", shape) for shape in TABULAR + [(1, 8, 8), (1, 13, 13)])
    assert model_supports("small_cnn", (1, 14, 14))


def test_small_cnn_has_the_papers_21840_parameters():
    model = build_model("small_cnn", feature_shape=(1, 28, 28), num_classes=10)
    assert sum(p.numel() for p in model.parameters()) == 21_840
    assert [m.in_features for m in model.modules() if isinstance(m, nn.Linear)] == [320, 50]


def test_mlp_128_is_64_128_10_on_digits():
    model = build_model("mlp_128", feature_shape=(1, 8, 8), num_classes=10)
    assert [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)] == [(64, 128), (128, 10)]
    assert sum(p.numel() for p in model.parameters()) == 64 * 128 + 128 + 128 * 10 + 10


def test_building_cnn_on_tabular_data_is_refused():
    with pytest.raises(ValueError, match="cnn"):
        build_model("cnn", feature_shape=(13,), num_classes=2)


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="lenet"):
        model_supports("resnet", (1, 28, 28))


@pytest.mark.parametrize("name", MODELS)
def test_same_seed_same_weights(name):
    def weights(seed):
        torch.manual_seed(seed)
        return [p.detach().clone() for p in build_model(name, feature_shape=(1, 28, 28), num_classes=10).parameters()]

    first, again, other = weights(1), weights(1), weights(2)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize("name", MODELS)
def test_no_batch_dependent_layers(name):
    model = build_model(name, feature_shape=(1, 28, 28), num_classes=10)
    forbidden = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd, nn.GroupNorm, nn.LayerNorm)
    assert not any(isinstance(module, forbidden) for module in model.modules())


def test_architectures_match_their_papers():
    cnn = build_model("cnn", feature_shape=(1, 28, 28), num_classes=10)
    # McMahan et al. 2017: 1,663,370 parameters for the MNIST CNN with "same" padding.
    assert sum(p.numel() for p in cnn.parameters()) == 1_663_370
    mlp = build_model("mlp", feature_shape=(1, 28, 28), num_classes=10)
    assert [m.out_features for m in mlp.modules() if isinstance(m, nn.Linear)] == [200, 200, 10]
    lenet = build_model("lenet", feature_shape=(3, 32, 32), num_classes=100)
    convs = [m for m in lenet.modules() if isinstance(m, nn.Conv2d)]
    assert [c.stride[0] for c in convs] == [2, 2, 1] and {c.out_channels for c in convs} == {12}
    assert sum(isinstance(m, nn.Sigmoid) for m in lenet.modules()) == 3
    assert [m.in_features for m in lenet.modules() if isinstance(m, nn.Linear)] == [768]  # as in DLG on CIFAR
    assert all(p.abs().max() <= 0.5 for p in lenet.parameters())
