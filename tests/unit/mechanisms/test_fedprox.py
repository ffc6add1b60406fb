"""FedProx's proximal term (Li et al. 2020) in every local training path: local SGD, DP-SGD (after the noise) and
ULDP's per-user training, each against gradient descent on ``F(w) + mu/2 ||w - w_t||^2`` written with autograd."""
from __future__ import annotations

import numpy as np
import torch

from privsilo.mechanisms.base import LocalTraining, SiloContext, model_to_vector
from privsilo.mechanisms.dp_sgd import noisy_local_training
from privsilo.mechanisms.fedavg import local_sgd
from privsilo.mechanisms.uldp.training import train_users, train_users_loop

MU = 0.7


def _data(records: int = 30) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return torch.randn(records, 5, generator=generator, dtype=torch.float64), torch.randint(3, (records,), generator=generator)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)  # test-only: model initialisation
    return torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).double()


def _context(model: torch.nn.Module, features: torch.Tensor, labels: torch.Tensor, *, steps: int, mu: float, seed: int = 1) -> SiloContext:
    training = LocalTraining(local_steps=steps, batch_size=labels.shape[0], lr=0.2, rounds=1, client_rate=1.0, proximal_mu=mu)
    return SiloContext(silo_id=0, record_ids=np.arange(labels.shape[0]), features=features, labels=labels, model=model,
                       training=training, generator=torch.Generator().manual_seed(seed), device=torch.device("cpu"))


def _proximal_descent(features: torch.Tensor, labels: torch.Tensor, *, steps: int, lr: float, mu: float) -> np.ndarray:
    """Full-batch gradient descent on the FedProx objective, the proximal term differentiated by autograd."""
    model = _model()
    anchor = [p.detach().clone() for p in model.parameters()]
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(features), labels)
        loss = loss + mu / 2 * sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))
        gradients = torch.autograd.grad(loss, list(model.parameters()))
        with torch.no_grad():
            for p, g in zip(model.parameters(), gradients):
                p.sub_(lr * g)
    return model_to_vector(model)


def test_local_sgd_descends_the_proximal_objective():
    features, labels = _data()
    model = _model()
    start = model_to_vector(model)
    delta, _ = local_sgd(_context(model, features, labels, steps=6, mu=MU), start)  # one batch = every record
    np.testing.assert_allclose(start + delta, _proximal_descent(features, labels, steps=6, lr=0.2, mu=MU), rtol=1e-10, atol=1e-12)
    plain, _ = local_sgd(_context(_model(), features, labels, steps=6, mu=0.0), start)
    assert np.linalg.norm(delta) < np.linalg.norm(plain)  # the term pulls towards the global model


def test_dp_sgd_without_noise_or_clipping_descends_the_proximal_objective():
    features, labels = _data()
    model = _model()
    context = _context(model, features, labels, steps=5, mu=MU)
    noisy_local_training(context, rates=1.0, noise_multiplier=0.0, max_grad_norm=1e12, divisor=float(labels.shape[0]))
    np.testing.assert_allclose(model_to_vector(model), _proximal_descent(features, labels, steps=5, lr=0.2, mu=MU), rtol=1e-10, atol=1e-12)


def test_dp_sgd_proximal_term_draws_nothing_and_leaves_the_first_noisy_step_alone():
    """The term is added after sampling, clipping and noise: the same draws, and at the first step (w = w_t) it is 0."""
    features, labels = _data()
    runs = {}
    for mu, steps in ((0.0, 1), (MU, 1), (MU, 4), (0.0, 4)):
        context = _context(_model(), features, labels, steps=steps, mu=mu, seed=7)
        noisy_local_training(context, rates=0.3, noise_multiplier=1.0, max_grad_norm=0.5, divisor=9.0)
        runs[mu, steps] = (model_to_vector(context.model), context.generator.get_state())
    assert np.array_equal(runs[0.0, 1][0], runs[MU, 1][0])
    assert torch.equal(runs[0.0, 4][1], runs[MU, 4][1])
    assert not np.array_equal(runs[0.0, 4][0], runs[MU, 4][0])


def test_uldp_per_user_training_descends_the_proximal_objective_vectorised_and_in_a_loop():
    features, labels = _data(records=24)
    groups = [torch.arange(0, 24)] + [torch.arange(i, i + 4) for i in (0, 8, 16)]
    fast = train_users(_model(), features=features, labels=labels, groups=groups, steps=3, lr=0.2, mu=MU)
    slow = train_users_loop(_model(), features=features, labels=labels, groups=groups, steps=3, lr=0.2, mu=MU)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-12)
    start = model_to_vector(_model())
    expected = _proximal_descent(features, labels, steps=3, lr=0.2, mu=MU) - start  # user 0 holds every record
    np.testing.assert_allclose(fast[0].numpy(), expected, rtol=1e-10, atol=1e-12)
    plain = train_users(_model(), features=features, labels=labels, groups=groups, steps=3, lr=0.2)
    assert not torch.equal(plain, fast)
