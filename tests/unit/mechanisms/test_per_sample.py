"""Per-sample gradients against a one-record-at-a-time autograd loop; clipping; noise and sampling statistics."""
from __future__ import annotations

import pytest
import torch
from scipy import stats

from privsilo.mechanisms.fast_clipping import clipped_gradient_sum as fast_clipped_sum
from privsilo.mechanisms.fast_clipping import supports_fast_clipping
from privsilo.mechanisms.per_sample import (
    clip_and_sum,
    clipped_gradient_sum,
    gaussian_noise_like,
    per_sample_gradients,
    per_sample_norms,
    poisson_sample,
)
from privsilo.simulator.models.builtin import build_model

FALSE_FAILURE_RATE = 1e-6  # per statistical test below


def _logistic_regression() -> torch.nn.Module:
    return torch.nn.Linear(6, 2)


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, kernel_size=3),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 6, kernel_size=3, padding=1),
        torch.nn.Tanh(),
        torch.nn.Flatten(),
        torch.nn.Linear(6 * 4 * 4, 5),
    )


CASES = {
    "logistic_regression": (_logistic_regression, (6,), 2),
    "mlp": (_mlp, (6,), 3),
    "cnn": (_cnn, (1, 10, 10), 5),
}


def _reference_gradients(model: torch.nn.Module, features: torch.Tensor, labels: torch.Tensor) -> list[torch.Tensor]:
    """One autograd backward pass per record, stacked to (B, *p.shape) per parameter."""
    per_record = []
    for j in range(features.shape[0]):
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(features[j : j + 1]), labels[j : j + 1]).backward()
        per_record.append([p.grad.detach().clone() for p in model.parameters()])
    return [torch.stack(column) for column in zip(*per_record)]


@pytest.mark.parametrize("case", sorted(CASES))
def test_per_sample_gradients_match_one_record_at_a_time(case: str) -> None:
    build, shape, classes = CASES[case]
    torch.manual_seed(0)  # test-only: model initialisation
    model = build().double()
    generator = torch.Generator().manual_seed(1)
    features = torch.randn((7, *shape), generator=generator, dtype=torch.float64)
    labels = torch.randint(classes, (7,), generator=generator)

    fast = per_sample_gradients(model, features=features, labels=labels)
    slow = _reference_gradients(model, features, labels)

    assert [g.shape for g in fast] == [(7, *p.shape) for p in model.parameters()]
    for got, want in zip(fast, slow):
        torch.testing.assert_close(got, want, rtol=0.0, atol=1e-6)


def test_per_sample_gradients_of_empty_batch_are_empty() -> None:
    model = _cnn()
    grads = per_sample_gradients(model, features=torch.zeros(0, 1, 10, 10), labels=torch.zeros(0, dtype=torch.long))
    assert [g.shape for g in grads] == [(0, *p.shape) for p in model.parameters()]
    assert all(torch.count_nonzero(s) == 0 for s in clip_and_sum(grads, max_grad_norm=1.0))


def test_clipping_bounds_large_norms_and_keeps_small_ones() -> None:
    generator = torch.Generator().manual_seed(2)
    grads = [torch.randn(5, 3, 4, generator=generator, dtype=torch.float64), torch.randn(5, 4, generator=generator, dtype=torch.float64)]
    scales = torch.tensor([1e-3, 0.5, 1.0, 10.0, 0.0], dtype=torch.float64)
    grads = [g * scales.view(-1, *([1] * (g.dim() - 1))) for g in grads]
    norms = per_sample_norms(grads)
    clip = float(norms[1:4].median())  # record 1 below, record 3 above the threshold

    for j in range(5):
        single = [g[j : j + 1] for g in grads]
        clipped = clip_and_sum(single, max_grad_norm=clip)
        clipped_norm = float(torch.sqrt(sum(c.pow(2).sum() for c in clipped)))
        assert clipped_norm <= clip * (1 + 1e-12)
        if norms[j] <= clip:
            for c, g in zip(clipped, single):
                torch.testing.assert_close(c, g[0], rtol=0.0, atol=0.0)
        else:
            assert clipped_norm == pytest.approx(clip, rel=1e-12)

    summed = clip_and_sum(grads, max_grad_norm=clip)
    factors = torch.clamp(clip / norms, max=1.0)
    for s, g in zip(summed, grads):
        torch.testing.assert_close(s, (g * factors.view(-1, *([1] * (g.dim() - 1)))).sum(0))


def test_gaussian_noise_has_requested_std() -> None:
    """sum(z^2)/std^2 ~ chi2(N) under H0; two-sided test at FALSE_FAILURE_RATE."""
    std = 0.37
    shapes = [torch.empty(100, 50), torch.empty(30, 3, 5, 5), torch.empty(77)]
    noise = gaussian_noise_like(shapes, std=std, generator=torch.Generator().manual_seed(3))
    assert [z.shape for z in noise] == [t.shape for t in shapes]
    flat = torch.cat([z.reshape(-1) for z in noise]).double()
    dof = flat.numel()
    statistic = float(flat.pow(2).sum()) / std**2
    p_value = 2 * min(stats.chi2.cdf(statistic, dof), stats.chi2.sf(statistic, dof))
    assert p_value > FALSE_FAILURE_RATE
    assert stats.kstest(flat.numpy() / std, "norm").pvalue > FALSE_FAILURE_RATE


def test_gaussian_noise_is_reproducible_from_the_generator() -> None:
    shapes = [torch.empty(4, 3), torch.empty(2)]
    first = gaussian_noise_like(shapes, std=1.0, generator=torch.Generator().manual_seed(4))
    second = gaussian_noise_like(shapes, std=1.0, generator=torch.Generator().manual_seed(4))
    other = gaussian_noise_like(shapes, std=1.0, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[0], other[0])


def test_poisson_sampling_rate_matches_q() -> None:
    """Total and single-record inclusion counts are binomial; two tests at FALSE_FAILURE_RATE / 2 each."""
    generator = torch.Generator().manual_seed(6)
    rate, records, draws = 0.03, 2_000, 200
    samples = [poisson_sample(num_records=records, rates=rate, generator=generator) for _ in range(draws)]
    total = sum(s.numel() for s in samples)
    first_record = sum(int((s == 0).any()) for s in samples)
    assert stats.binomtest(total, records * draws, rate).pvalue > FALSE_FAILURE_RATE / 2
    assert stats.binomtest(first_record, draws, rate).pvalue > FALSE_FAILURE_RATE / 2
    assert all(torch.equal(s, s.unique()) for s in samples)  # sorted, no repeats


def test_poisson_sampling_accepts_per_record_rates() -> None:
    rates = torch.tensor([0.0, 1.0, 0.0, 1.0])
    picked = poisson_sample(num_records=4, rates=rates, generator=torch.Generator().manual_seed(7))
    assert picked.tolist() == [1, 3]


class _ReusedLayer(torch.nn.Module):
    """One Linear applied twice: its gradient is not a single e_j a_j^T, so the fast path must step aside."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(6, 6)
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.inner(torch.tanh(self.inner(x.flatten(1)[:, :6])))))


FAST_CASES = [
    ("logistic_regression", (1, 8, 8)), ("mlp", (1, 8, 8)), ("cnn", (1, 8, 8)), ("lenet", (1, 8, 8)), ("cnn", (3, 12, 12)),
]


@pytest.mark.parametrize(("name", "shape"), FAST_CASES)
@pytest.mark.parametrize("max_grad_norm", [1e-3, 1e3])  # every record clipped / none clipped
def test_fast_clipped_sum_equals_per_sample_path(name, shape, max_grad_norm) -> None:
    torch.manual_seed(0)
    model = build_model(name, feature_shape=shape, num_classes=4).double()
    generator = torch.Generator().manual_seed(3)
    features = torch.randn(17, *shape, generator=generator, dtype=torch.float64)
    labels = torch.randint(4, (17,), generator=generator)
    assert supports_fast_clipping(model)
    fast = fast_clipped_sum(model, features=features, labels=labels, max_grad_norm=max_grad_norm)
    exact = clip_and_sum(per_sample_gradients(model, features=features, labels=labels), max_grad_norm=max_grad_norm)
    for ours, reference in zip(fast, exact, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-9, atol=1e-12)
    assert all(p.grad is None for p in model.parameters())


def test_fast_clipping_steps_aside_for_unsupported_models() -> None:
    features = torch.randn(5, 1, 8, 8, dtype=torch.float64)
    labels = torch.randint(3, (5,))
    reused = _ReusedLayer().double()
    assert supports_fast_clipping(reused)
    assert fast_clipped_sum(reused, features=features, labels=labels, max_grad_norm=1.0) is None
    normed = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 3)).double()
    assert not supports_fast_clipping(normed)
    for model in (reused, normed):  # the dispatcher falls back to the exact per-sample path
        ours = clipped_gradient_sum(model, features=features, labels=labels, max_grad_norm=0.5)
        exact = clip_and_sum(per_sample_gradients(model, features=features, labels=labels), max_grad_norm=0.5)
        for a, b in zip(ours, exact, strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize(("stride", "dilation", "padding"), [(1, 1, 0), (2, 1, 2), (1, 2, "same"), (3, 2, 1)])
def test_fast_clipped_sum_handles_conv_strides_and_dilations(stride, dilation, padding) -> None:
    torch.manual_seed(1)
    if padding == "same" and stride != 1:
        pytest.skip("padding='same' needs stride 1")
    conv = torch.nn.Conv2d(2, 3, kernel_size=3, stride=stride, dilation=dilation, padding=padding)
    model = torch.nn.Sequential(conv, torch.nn.ReLU(), torch.nn.Flatten()).double()
    features = torch.randn(6, 2, 11, 11, dtype=torch.float64)
    width = model(features).shape[1]
    model.append(torch.nn.Linear(width, 4).double())
    labels = torch.randint(4, (6,))
    fast = fast_clipped_sum(model, features=features, labels=labels, max_grad_norm=0.3)
    exact = clip_and_sum(per_sample_gradients(model, features=features, labels=labels), max_grad_norm=0.3)
    for ours, reference in zip(fast, exact, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-9, atol=1e-12)


def test_fast_clipping_steps_aside_for_a_layer_left_unused() -> None:
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 3), "unused": torch.nn.Linear(4, 3)}).double()
    model.forward = lambda x: model["used"](x)  # type: ignore[method-assign]
    features, labels = torch.randn(5, 4, dtype=torch.float64), torch.randint(3, (5,))
    assert fast_clipped_sum(model, features=features, labels=labels, max_grad_norm=1.0) is None
