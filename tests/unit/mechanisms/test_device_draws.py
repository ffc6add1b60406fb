"""Local training's draws where the records are (issue 29): Poisson sampling in chunks of steps, a generator on the
silo's device keyed from the silo's stream, the CPU's draws unchanged, evaluation without autograd. The same paths
run on a GPU in ``tests/integration/test_cuda.py``; here a CPU generator stands in for the device's."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from privsilo.mechanisms.base import LocalTraining, SiloContext
from privsilo.mechanisms.canaries import CanaryGradients, SiloCanaries
from privsilo.mechanisms.dp_sgd import noisy_local_training
from privsilo.mechanisms.per_sample import poisson_batches, poisson_sample
from privsilo.simulator.models.builtin import build_model, evaluate_model
from privsilo.simulator.engine.silo import draws_on_device
from tests.support.device_silos import FAMILIES, contribute, family_silo, released

FALSE_FAILURE_RATE = 1e-6


def test_chunks_of_steps_draw_the_same_batches_as_step_by_step():
    """Grouping the steps' uniforms into one draw changes nothing about which records each step keeps."""
    rates = torch.linspace(0.0, 0.5, 300, dtype=torch.float64)
    one = list(poisson_batches(num_records=300, rates=rates, generator=torch.Generator().manual_seed(3), steps=23, chunk_steps=1))
    chunked = list(poisson_batches(num_records=300, rates=rates, generator=torch.Generator().manual_seed(3), steps=23, chunk_steps=7))
    assert len(one) == len(chunked) == 23
    assert all(torch.equal(a, b) for a, b in zip(one, chunked))
    assert sum(len(b) for b in one) > 0


def test_chunked_poisson_sampling_keeps_each_record_with_its_rate_independently_across_steps():
    """Per-record rates (rPDP) in chunks of 64 steps: record j's inclusion count over S steps is Binomial(S, q_j)
    (a chi-square over records), and it sits in two consecutive steps with probability q_j^2 (a z-test), each at
    FALSE_FAILURE_RATE / 2."""
    records, steps = 400, 640
    rates = torch.linspace(0.02, 0.4, records, dtype=torch.float64)
    kept = torch.zeros(steps, records, dtype=torch.bool)
    batches = poisson_batches(num_records=records, rates=rates, generator=torch.Generator().manual_seed(11), steps=steps, chunk_steps=64)
    for step, batch in enumerate(batches):
        assert torch.equal(batch, torch.unique(batch))  # sorted, no record twice
        kept[step, batch] = True
    q = rates.numpy()
    counts = kept.sum(dim=0).numpy()
    statistic = float((((counts - steps * q) ** 2) / (steps * q * (1 - q))).sum())
    assert stats.chi2.sf(statistic, records) > FALSE_FAILURE_RATE / 2
    both = float((kept[1:] & kept[:-1]).sum())
    mean, variance = (steps - 1) * (q**2).sum(), (steps - 1) * (q**2 * (1 - q**2)).sum()
    assert 2 * stats.norm.sf(abs(both - mean) / np.sqrt(variance)) > FALSE_FAILURE_RATE / 2


def _zero_gradient_context(*, draws_on_device: bool, seed: int, steps: int = 4) -> SiloContext:
    """A bias-free linear model on zero features: every clipped gradient is 0, so an update is noise only."""
    model = torch.nn.Linear(50, 20, bias=False).double()
    torch.nn.init.zeros_(model.weight)
    return SiloContext(
        silo_id=0, record_ids=np.arange(100), features=torch.zeros(100, 50, dtype=torch.float64),
        labels=torch.zeros(100, dtype=torch.long), model=model,
        training=LocalTraining(local_steps=steps, batch_size=10, lr=0.5, rounds=1, client_rate=1.0),
        generator=torch.Generator().manual_seed(seed), device=torch.device("cpu"), draws_on_device=draws_on_device,
    )


def test_a_keyed_device_generator_adds_gaussian_noise_of_std_sigma_c():
    """With draws on the device, the update after S steps is N(0, (S (lr sigma C / B)^2) I): a KS test of the
    1,000 coordinates at FALSE_FAILURE_RATE."""
    sigma, clip, steps = 1.3, 0.7, 4
    context = _zero_gradient_context(draws_on_device=True, seed=5, steps=steps)
    noisy_local_training(context, rates=0.1, noise_multiplier=sigma, max_grad_norm=clip, divisor=10.0)
    std = np.sqrt(steps) * 0.5 * sigma * clip / 10.0
    update = context.model.weight.detach().numpy().ravel()
    assert stats.kstest(update / std, "norm").pvalue > FALSE_FAILURE_RATE


def test_a_keyed_device_generator_follows_the_silo_stream_one_draw_per_round():
    """Same seed, same round; another seed, another round; and the silo's generator moves by one 63-bit key per
    round, which a snapshot of it keeps (so a resumed run draws the same)."""
    def trained(seed: int) -> tuple[torch.Tensor, torch.Generator]:
        context = _zero_gradient_context(draws_on_device=True, seed=seed)
        noisy_local_training(context, rates=0.1, noise_multiplier=1.0, max_grad_norm=1.0, divisor=10.0)
        return context.model.weight.detach().clone(), context.generator

    first, generator = trained(5)
    again, _ = trained(5)
    other, _ = trained(6)
    assert torch.equal(first, again) and not torch.equal(first, other)
    reference = torch.Generator().manual_seed(5)
    torch.randint(0, 2**63 - 1, (1,), generator=reference)
    assert torch.equal(generator.get_state(), reference.get_state())


def test_cpu_draws_keep_their_order_sample_then_noise_per_step():
    """Without device draws the silo's own generator serves: each step draws its n uniforms, then the noise (the
    order every seeded CPU result so far was made with)."""
    context = _zero_gradient_context(draws_on_device=False, seed=8, steps=3)
    assert context.training_generator() is context.generator
    noisy_local_training(context, rates=0.1, noise_multiplier=1.0, max_grad_norm=2.0, divisor=10.0)
    replay, expected = torch.Generator().manual_seed(8), torch.zeros(20, 50, dtype=torch.float64)
    for _ in range(3):
        torch.rand(100, generator=replay, dtype=torch.float64)
        expected -= 0.5 / 10.0 * 2.0 * torch.randn(20, 50, generator=replay, dtype=torch.float64)
    torch.testing.assert_close(context.model.weight.detach(), expected, rtol=1e-12, atol=1e-15)


def test_poisson_sample_is_the_first_step_of_poisson_batches():
    first = poisson_sample(num_records=50, rates=0.3, generator=torch.Generator().manual_seed(2))
    uniforms = torch.rand(50, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert torch.equal(first, torch.nonzero(uniforms < 0.3).reshape(-1))


def test_sampled_canaries_add_the_directions_of_those_drawn():
    hosted = SiloCanaries(ids=np.arange(6), seed=4)
    canaries = CanaryGradients.of(hosted, dimension=30, rates=0.5)
    summed = canaries.sampled_sum(scale=2.0, generator=torch.Generator().manual_seed(1))
    drawn = torch.rand(6, generator=torch.Generator().manual_seed(1), dtype=torch.float64) < 0.5
    assert 0 < int(drawn.sum()) < 6
    torch.testing.assert_close(summed, 2.0 * canaries.directions[drawn].sum(dim=0))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_trains_with_device_draws_and_repeats_with_its_seed(family):
    """Every mechanism's training path with the keyed generator (the path a CUDA silo takes): it runs, the same
    seed gives the same release, and a run on the silo's own generator (the CPU's path) releases a different one."""
    def release(*, draws_on_device: bool) -> np.ndarray:
        silo, state = family_silo(family, device="cpu", draws_on_device=draws_on_device, model="logistic_regression")
        return released(contribute(silo, state))

    first, again, own = release(draws_on_device=True), release(draws_on_device=True), release(draws_on_device=False)
    assert np.all(np.isfinite(first))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, own)


def test_evaluation_keeps_no_autograd_graph_and_matches_a_plain_pass():
    torch.manual_seed(0)
    model = build_model("cnn", feature_shape=(1, 8, 8), num_classes=10)
    vector = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()]).numpy() * 0.5
    features, labels = torch.randn(300, 1, 8, 8), torch.randint(0, 10, (300,))
    outputs = []
    handle = model.register_forward_hook(lambda module, inputs, output: outputs.append(output))
    loss, accuracy = evaluate_model(model, vector, features=features, labels=labels)
    handle.remove()
    assert outputs and all(o.grad_fn is None and not o.requires_grad for o in outputs)
    assert all(p.grad is None for p in model.parameters())
    with torch.no_grad():
        logits = model(features)
    assert loss == pytest.approx(float(torch.nn.functional.cross_entropy(logits, labels)), rel=1e-6)
    assert accuracy == pytest.approx(float((logits.argmax(dim=1) == labels).double().mean()))


def test_only_a_gpu_silo_outside_secure_mode_draws_on_its_device():
    """Secure mode re-keys the CPU generator's whole state from OS entropy; a GPU silo in secure mode keeps it rather
    than a device generator keyed by 64 bits, and a CPU silo never draws on a second generator."""
    assert draws_on_device(torch.device("cuda"), secure_rng=False)
    assert not draws_on_device(torch.device("cuda"), secure_rng=True)
    assert not draws_on_device(torch.device("cpu"), secure_rng=False)
