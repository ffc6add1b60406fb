"""DP-SGD mechanism: parameters, reduction to gradient descent, noise scale end to end, determinism, events."""
from __future__ import annotations

import numpy as np
import pydantic
import pytest
import torch
from scipy import stats

from privsilo.mechanisms.base import LocalTraining, SiloContext, model_to_vector
from privsilo.mechanisms.dp_sgd import RECORD_COUNTS_PUBLIC, DpSgd, DpSgdParams
from privsilo.mechanisms.events import PoissonGaussianEvent
from privsilo.mechanisms.fedavg import FedAvgServer

FALSE_FAILURE_RATE = 1e-6


def _context(
    *, model: torch.nn.Module, features: torch.Tensor, labels: torch.Tensor, training: LocalTraining, seed: int
) -> SiloContext:
    return SiloContext(
        silo_id=0,
        record_ids=np.arange(labels.shape[0]),
        features=features,
        labels=labels,
        model=model,
        training=training,
        generator=torch.Generator().manual_seed(seed),
        device=torch.device("cpu"),
    )


def _data(*, records: int, dim: int, classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    features = torch.randn(records, dim, generator=generator, dtype=torch.float64)
    return features, torch.randint(classes, (records,), generator=generator)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)  # test-only: model initialisation
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).double()


def test_defaults_and_validation_errors_name_the_field() -> None:
    params = DpSgd.Params()
    assert (params.noise_multiplier, params.max_grad_norm, params.delta) == (1.0, 1.0, 1e-5)
    assert DpSgd.Params(noise_multiplier=0.0).noise_multiplier == 0.0
    for field, value in [
        ("noise_multiplier", -0.1),
        ("noise_multiplier", float("nan")),
        ("max_grad_norm", 0.0),
        ("max_grad_norm", float("inf")),
        ("delta", 0.0),
        ("delta", 1.0),
    ]:
        with pytest.raises(pydantic.ValidationError) as error:
            DpSgd.Params(**{field: value})
        assert error.value.errors()[0]["loc"] == (field,)
    with pytest.raises(pydantic.ValidationError):
        DpSgd.Params(learning_rate=0.1)  # unknown keys are rejected


def test_without_noise_clipping_or_sampling_it_is_full_batch_gradient_descent() -> None:
    features, labels = _data(records=40, dim=5, classes=3, seed=1)
    training = LocalTraining(local_steps=4, batch_size=40, lr=0.3, rounds=1, client_rate=1.0)  # batch_size = n so q = 1
    model = _mlp()
    start = model_to_vector(model)
    mechanism = DpSgd(DpSgd.Params(noise_multiplier=0.0, max_grad_norm=1e12))
    context = _context(model=model, features=features, labels=labels, training=training, seed=2)
    contribution = mechanism.silo(context).contribute((start.copy(),), round_index=0)

    reference = _mlp()
    for _ in range(training.local_steps):
        reference.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(reference(features), labels).backward()
        with torch.no_grad():
            for p in reference.parameters():
                p.add_(p.grad, alpha=-training.lr)
    expected_delta = model_to_vector(reference) - start

    assert np.abs(expected_delta).max() > 1e-3
    np.testing.assert_allclose(contribution.vector[:-1], expected_delta, rtol=0, atol=1e-12)
    assert contribution.vector[-1] == 1.0  # equal, data-independent silo weights
    assert contribution.events == (PoissonGaussianEvent(sampling_rate=1.0, noise_multiplier=0.0, steps=4),)


def _zero_gradient_update(params: DpSgdParams, *, records: int, training: LocalTraining) -> np.ndarray:
    """The update of a silo whose every gradient is zero (zero features, no bias): pure noise."""
    model = torch.nn.Linear(40, 30, bias=False).double()
    context = _context(
        model=model,
        features=torch.zeros(records, 40, dtype=torch.float64),
        labels=torch.zeros(records, dtype=torch.long),
        training=training,
        seed=3,
    )
    contribution = DpSgd(params).silo(context).contribute((model_to_vector(model),), round_index=0)
    return contribution.vector[:-1]  # silo weight 1


def _assert_centred_gaussian(sample: np.ndarray, *, std: float) -> None:
    """Two-sided chi-square test of ``sample ~ N(0, std^2 I)`` at FALSE_FAILURE_RATE."""
    statistic = float(np.sum((sample / std) ** 2))
    p_value = 2 * min(stats.chi2.cdf(statistic, sample.size), stats.chi2.sf(statistic, sample.size))
    assert p_value > FALSE_FAILURE_RATE


def test_update_of_zero_gradients_is_noise_scaled_by_expected_batch_size() -> None:
    """After T steps each coordinate is N(0, T (lr sigma C / (q n))^2), empty batches included."""
    records, sigma, clip = 200, 1.3, 0.7
    training = LocalTraining(local_steps=5, batch_size=1, lr=0.5, rounds=1, client_rate=1.0)  # q = 1/200: most steps sample nobody
    delta = _zero_gradient_update(DpSgdParams(noise_multiplier=sigma, max_grad_norm=clip), records=records, training=training)
    expected_batch = training.batch_size / records * records
    _assert_centred_gaussian(delta, std=np.sqrt(training.local_steps) * training.lr * sigma * clip / expected_batch)


def test_with_a_sampling_rate_the_noise_is_divided_by_the_public_batch_size() -> None:
    """``sampling_rate`` fixes q; the divisor stays the public ``batch_size`` (here 7), not the record-dependent q n (60)."""
    records, sigma, clip = 200, 1.3, 0.7
    training = LocalTraining(local_steps=5, batch_size=7, lr=0.5, rounds=1, client_rate=1.0)
    params = DpSgdParams(noise_multiplier=sigma, max_grad_norm=clip, sampling_rate=0.3)
    delta = _zero_gradient_update(params, records=records, training=training)
    _assert_centred_gaussian(delta, std=np.sqrt(training.local_steps) * training.lr * sigma * clip / training.batch_size)


def test_same_seed_gives_identical_update_and_other_seed_differs() -> None:
    features, labels = _data(records=60, dim=5, classes=3, seed=4)
    training = LocalTraining(local_steps=3, batch_size=16, lr=0.1, rounds=1, client_rate=1.0)
    mechanism = DpSgd(DpSgd.Params(noise_multiplier=0.8, max_grad_norm=0.5))
    start = model_to_vector(_mlp())
    untouched = start.copy()

    def run(seed: int) -> np.ndarray:
        context = _context(model=_mlp(), features=features, labels=labels, training=training, seed=seed)
        return mechanism.silo(context).contribute((start,), round_index=0).vector

    first = run(5)
    np.testing.assert_array_equal(first, run(5))
    assert not np.array_equal(first, run(6))
    assert np.abs(first[:-1]).max() > 0
    np.testing.assert_array_equal(start, untouched)  # the broadcast global state is not written through


def test_reports_one_poisson_gaussian_event_and_uses_fedavg_server() -> None:
    features, labels = _data(records=50, dim=5, classes=3, seed=7)
    training = LocalTraining(local_steps=2, batch_size=10, lr=0.1, rounds=1, client_rate=1.0)
    mechanism = DpSgd(DpSgd.Params(noise_multiplier=1.1))
    context = _context(model=_mlp(), features=features, labels=labels, training=training, seed=8)
    contribution = mechanism.silo(context).contribute((model_to_vector(_mlp()),), round_index=0)
    assert contribution.events == (PoissonGaussianEvent(sampling_rate=0.2, noise_multiplier=1.1, steps=2),)
    assert isinstance(mechanism.server(), FedAvgServer)
    accountant = mechanism.accountant()
    assert accountant.delta == mechanism.params.delta
    accountant.record(0, contribution.events[0])
    assert 0.0 < accountant.report()["epsilon"] < float("inf")
    assert DpSgd.name == "dp_sgd"


@pytest.mark.parametrize("records", [30, 250])
def test_sampling_rate_is_the_events_rate_whatever_the_record_count(records: int) -> None:
    from opacus.accountants import RDPAccountant

    features, labels = _data(records=records, dim=5, classes=3, seed=9)
    training = LocalTraining(local_steps=4, batch_size=10, lr=0.1, rounds=1, client_rate=1.0)
    mechanism = DpSgd(DpSgd.Params(noise_multiplier=0.9, sampling_rate=0.07, delta=1e-4))
    context = _context(model=_mlp(), features=features, labels=labels, training=training, seed=10)
    contribution = mechanism.silo(context).contribute((model_to_vector(_mlp()),), round_index=0)
    assert contribution.events == (PoissonGaussianEvent(sampling_rate=0.07, noise_multiplier=0.9, steps=4),)
    accountant = mechanism.accountant()
    for _ in range(25):
        accountant.record(0, contribution.events[0])
    opacus = RDPAccountant()
    opacus.history = [(0.9, 0.07, 25 * 4)]
    assert accountant.report()["epsilon"] == pytest.approx(opacus.get_epsilon(delta=1e-4), rel=1e-9)


def test_sampling_rate_validation_and_what_each_mode_treats_as_public() -> None:
    assert DpSgd.Params().sampling_rate is None
    assert DpSgd.Params(sampling_rate=1.0).sampling_rate == 1.0
    for value in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(pydantic.ValidationError) as error:
            DpSgd.Params(sampling_rate=value)
        assert error.value.errors()[0]["loc"] == ("sampling_rate",)
    assert DpSgd(DpSgd.Params()).assumed_public() == (RECORD_COUNTS_PUBLIC,)
    assert DpSgd(DpSgd.Params(sampling_rate=0.1)).assumed_public() == ()
