"""The ``uldp`` mechanism without Ray: weighted sums against a direct loop, weights, a user's influence, noise,
GROUP-k's record limit, the server's step and bad parameters."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from scipy import stats

from privsilo.mechanisms.base import LocalTraining, SiloContext, model_to_vector
from privsilo.mechanisms.uldp.mechanism import UldpServer
from privsilo.mechanisms.uldp.params import UldpParams
from privsilo.mechanisms.uldp.silo import GroupSilo, PerUserSilo, build_silo
from privsilo.mechanisms.uldp.training import train_users, train_users_loop
from privsilo.mechanisms.uldp.weights import UserSample, round_robin_quota, user_weights
from privsilo.simulator.data.users import allocate_users
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.models.builtin import build_model
from privsilo.simulator.scenario import validate_scenario
from tests.support.scenarios import small_scenario

NUM_SILOS, NUM_USERS, NUM_RECORDS, FEATURES = 3, 12, 90, 6


def _federation(*, model_name: str = "logistic_regression", seed: int = 0):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(NUM_RECORDS, FEATURES))
    labels = rng.integers(0, 2, size=NUM_RECORDS)
    allocation = allocate_users(NUM_RECORDS, count=NUM_USERS, records="zipf", silos="zipf", num_silos=NUM_SILOS, rng=rng)
    torch.manual_seed(seed)
    model = build_model(model_name, feature_shape=(FEATURES,), num_classes=2).double()
    return features, labels, allocation, model


def _contexts(features, labels, allocation, model, *, local_steps=3, lr=0.5, batch_size=8):
    histogram = allocation.histogram()
    return [
        SiloContext(
            silo_id=s,
            record_ids=idx,
            features=torch.tensor(features[idx]),
            labels=torch.tensor(labels[idx]),
            model=copy.deepcopy(model),
            training=LocalTraining(local_steps=local_steps, batch_size=batch_size, lr=lr, rounds=1, client_rate=1.0),
            generator=torch.Generator().manual_seed(100 + s),
            device=torch.device("cpu"),
            user_ids=allocation.silo_user_ids[s],
            user_histogram=histogram,
        )
        for s, idx in enumerate(allocation.silo_indices)
    ]


def _direct_loop(features, labels, allocation, model, *, variant, steps, lr, clip):
    """sum_s sum_u w_{s,u} clip(Delta^{s,u}) with plain autograd, one user and one silo at a time."""
    histogram = allocation.histogram()
    start = model_to_vector(model)
    total = np.zeros_like(start)
    for s, idx in enumerate(allocation.silo_indices):
        for user in np.unique(allocation.silo_user_ids[s]):
            rows = idx[allocation.silo_user_ids[s] == user]
            local = copy.deepcopy(model)
            optimiser = torch.optim.SGD(local.parameters(), lr=lr if variant != "sgd" else 1.0)
            for _ in range(steps if variant != "sgd" else 1):
                optimiser.zero_grad()
                torch.nn.functional.cross_entropy(local(torch.tensor(features[rows])), torch.tensor(labels[rows])).backward()
                optimiser.step()
            delta = model_to_vector(local) - start
            if variant == "sgd":
                delta = -delta
            delta = delta * min(1.0, clip / np.linalg.norm(delta))
            weight = histogram[s, user] / histogram[:, user].sum() if variant == "avg_w" else 1.0 / NUM_SILOS
            total += weight * delta
    return total


@pytest.mark.parametrize("variant", ["avg", "avg_w", "sgd"])
@pytest.mark.parametrize("model_name", ["logistic_regression", "mlp"])
def test_weighted_sum_equals_a_direct_loop_over_users_and_silos(variant: str, model_name: str) -> None:
    features, labels, allocation, model = _federation(model_name=model_name)
    params = UldpParams(variant=variant, noise_multiplier=0.0, max_grad_norm=0.05)
    silos = [PerUserSilo(ctx, params) for ctx in _contexts(features, labels, allocation, model)]
    start = model_to_vector(model)
    ours = sum(silo.weighted_sum(start, np.ones(NUM_USERS, dtype=bool)) for silo in silos)
    want = _direct_loop(features, labels, allocation, model, variant=variant, steps=3, lr=0.5, clip=0.05)
    np.testing.assert_allclose(ours, want, rtol=0, atol=1e-9)
    assert np.abs(want).max() > 1e-3  # the comparison is not between two zero vectors


def test_vectorised_training_equals_the_user_loop_for_a_cnn() -> None:
    torch.manual_seed(0)
    model = build_model("cnn", feature_shape=(1, 8, 8), num_classes=3).double()
    features = torch.randn(20, 1, 8, 8, dtype=torch.float64)
    labels = torch.randint(0, 3, (20,))
    groups = [torch.tensor([0]), torch.tensor([1, 2, 3]), torch.arange(4, 20)]
    fast = train_users(model, features=features, labels=labels, groups=groups, steps=2, lr=0.1)
    slow = train_users_loop(model, features=features, labels=labels, groups=groups, steps=2, lr=0.1)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-9)


def test_avg_w_weights_sum_to_one_per_user_and_avg_to_at_most_one() -> None:
    _, _, allocation, _ = _federation()
    histogram = allocation.histogram()
    present = histogram.sum(axis=0) > 0
    avg_w = sum(user_weights(histogram, silo=s, proportional=True) for s in range(NUM_SILOS))
    avg = sum(user_weights(histogram, silo=s, proportional=False) for s in range(NUM_SILOS))
    np.testing.assert_allclose(avg_w[present], 1.0, rtol=0, atol=1e-12)
    assert np.all(avg[present] <= 1.0 + 1e-12) and np.all(avg[~present] == 0)


@pytest.mark.parametrize("variant", ["avg", "avg_w", "sgd"])
def test_changing_all_of_one_users_records_moves_the_sum_by_at_most_c(variant: str) -> None:
    features, labels, allocation, model = _federation()
    clip = 0.05
    params = UldpParams(variant=variant, noise_multiplier=0.0, max_grad_norm=clip)
    start = model_to_vector(model)
    # the user with records in the most silos
    user = int(np.argmax((allocation.histogram() > 0).sum(axis=0)))
    changed_features, changed_labels = features.copy(), labels.copy()
    for s, idx in enumerate(allocation.silo_indices):
        rows = idx[allocation.silo_user_ids[s] == user]
        changed_features[rows] = -50.0 * features[rows]
        changed_labels[rows] = 1 - labels[rows]

    def pre_noise_sum(f, y):
        return sum(PerUserSilo(ctx, params).weighted_sum(start, np.ones(NUM_USERS, dtype=bool)) for ctx in _contexts(f, y, allocation, model))

    moved = np.linalg.norm(pre_noise_sum(changed_features, changed_labels) - pre_noise_sum(features, labels))
    assert 0.2 * clip < moved <= clip * (1 + 1e-12)


def test_noise_has_std_sigma_c_over_sqrt_silos() -> None:
    """Chi-square test on 40 rounds x d coordinates; the two-sided bounds make a false failure 1e-6 likely."""
    features, labels, allocation, model = _federation()
    sigma, clip = 2.0, 0.3
    ctx = _contexts(features, labels, allocation, model, local_steps=1)[0]
    noisy = PerUserSilo(ctx, UldpParams(variant="avg", noise_multiplier=sigma, max_grad_norm=clip))
    start = model_to_vector(model)
    clean = noisy.weighted_sum(start, np.ones(NUM_USERS, dtype=bool))
    noise = np.concatenate([noisy.contribute((start,), round_index=r).vector - clean for r in range(40)])
    std = sigma * clip / np.sqrt(NUM_SILOS)
    statistic = float(np.sum((noise / std) ** 2))
    assert stats.chi2.ppf(5e-7, noise.size) < statistic < stats.chi2.ppf(1 - 5e-7, noise.size)


def test_unsampled_users_get_weight_zero() -> None:
    features, labels, allocation, model = _federation()
    params = UldpParams(variant="avg_w", noise_multiplier=0.0, max_grad_norm=0.05)
    ctx = _contexts(features, labels, allocation, model)[0]
    silo = PerUserSilo(ctx, params)
    start = model_to_vector(model)
    users = np.unique(allocation.silo_user_ids[0])
    only_first = np.zeros(NUM_USERS, dtype=bool)
    only_first[users[0]] = True
    rest = np.ones(NUM_USERS, dtype=bool)
    rest[users[0]] = False
    np.testing.assert_allclose(silo.weighted_sum(start, only_first) + silo.weighted_sum(start, rest),
                               silo.weighted_sum(start, np.ones(NUM_USERS, dtype=bool)), atol=1e-12)
    contribution = silo.contribute_with_plan((start,), round_index=0, plan=UserSample(sampled=only_first))
    np.testing.assert_allclose(contribution.vector, silo.weighted_sum(start, only_first), atol=1e-12)
    assert contribution.events[0].users_sampled == 1


def test_server_samples_users_from_its_generator_and_divides_by_q_u_s() -> None:
    server = UldpServer(UldpParams(variant="avg", user_rate=0.3, global_lr=2.0), num_silos=4, num_users=1000)
    plans = [server.round_plan(np.random.default_rng(7), round_index=0) for _ in range(2)]
    assert np.array_equal(plans[0].sampled, plans[1].sampled)
    assert abs(plans[0].sampled.mean() - 0.3) < 0.06
    (new,) = server.aggregate((np.zeros(3),), np.ones(3), num_participants=4)
    np.testing.assert_allclose(new, 2.0 / (0.3 * 1000 * 4))
    sgd = UldpServer(UldpParams(variant="sgd"), num_silos=4, num_users=10)
    assert sgd.round_plan(np.random.default_rng(0), round_index=0) is None
    np.testing.assert_allclose(sgd.aggregate((np.zeros(1),), np.ones(1), num_participants=4)[0], -1.0 / 40)


def test_round_robin_keeps_at_most_k_records_per_user_taking_silos_in_turn() -> None:
    histogram = np.array([[5, 0, 1], [1, 2, 1], [3, 0, 1]])
    quota = round_robin_quota(histogram, group_k=4)
    np.testing.assert_array_equal(quota, [[2, 0, 1], [1, 2, 1], [1, 0, 1]])
    assert np.all(quota <= histogram) and np.all(quota.sum(axis=0) <= 4)


def test_group_silo_trains_on_the_kept_records_only() -> None:
    features, labels, allocation, model = _federation()
    params = UldpParams(variant="group", group_k="median", noise_multiplier=1.0)
    silos = [build_silo(ctx, params) for ctx in _contexts(features, labels, allocation, model)]
    assert all(isinstance(s, GroupSilo) for s in silos)
    histogram = allocation.histogram()
    k = silos[0].group_k
    assert k == int(np.ceil(np.median(histogram.sum(axis=0)[histogram.sum(axis=0) > 0])))
    kept_per_user = np.zeros(NUM_USERS, dtype=int)
    for s, silo in enumerate(silos):
        np.add.at(kept_per_user, allocation.silo_user_ids[s][silo.kept], 1)
    assert kept_per_user.max() <= k
    contribution = silos[0].contribute((model_to_vector(model),), round_index=0)
    assert contribution.events[0].group_k == k and contribution.events[0].steps == 3


def test_group_silo_that_keeps_no_record_still_uploads_its_dp_sgd_noise() -> None:
    """With k = 1 user 0 keeps one record in silo 0 (silos are taken in turn), so silo 1 keeps none. It must still
    run its noisy DP-SGD steps: an upload without noise would tell whether its users' records were kept. Its
    upload is then -lr / batch_size times the sum of ``local_steps`` N(0, (sigma C)^2) draws: chi-square test over
    300 rounds, two-sided false failure 1e-6."""
    sigma, clip, steps, lr, batch = 2.0, 0.5, 3, 0.5, 8
    features = np.random.default_rng(0).normal(size=(6, FEATURES))
    labels = np.array([0, 1, 0, 1, 1, 0])
    user_ids = np.array([0, 0, 1, 1, 0, 0])
    silo_of = np.array([0, 0, 0, 0, 1, 1])
    histogram = np.array([[2, 2], [2, 0]])
    torch.manual_seed(0)
    model = build_model("logistic_regression", feature_shape=(FEATURES,), num_classes=2).double()
    idx = np.flatnonzero(silo_of == 1)
    context = SiloContext(
        silo_id=1, record_ids=idx, features=torch.tensor(features[idx]), labels=torch.tensor(labels[idx]),
        model=model, training=LocalTraining(local_steps=steps, batch_size=batch, lr=lr, rounds=1, client_rate=1.0),
        generator=torch.Generator().manual_seed(3), device=torch.device("cpu"), user_ids=user_ids[idx], user_histogram=histogram,
    )
    silo = build_silo(context, UldpParams(variant="group", group_k=1, noise_multiplier=sigma, max_grad_norm=clip))
    assert silo.kept.size == 0
    start = model_to_vector(model)
    rounds = [silo.contribute((start,), round_index=r) for r in range(300)]
    assert {c.events[0].steps for c in rounds} == {steps}
    assert {c.events[0].sampling_rate for c in rounds} == {0.0}  # no record to sample: no record-level loss
    uploads = np.concatenate([c.vector for c in rounds])
    std = lr / batch * sigma * clip * np.sqrt(steps)
    statistic = float(np.sum((uploads / std) ** 2))
    assert stats.chi2.ppf(5e-7, uploads.size) < statistic < stats.chi2.ppf(1 - 5e-7, uploads.size)


@pytest.mark.parametrize(
    ("mechanism", "field"),
    [
        ({"user_rate": 0.0}, "mechanism.user_rate"),
        ({"user_rate": 1.5}, "mechanism.user_rate"),
        ({"max_grad_norm": 0.0}, "mechanism.max_grad_norm"),
        ({"noise_multiplier": -1.0}, "mechanism.noise_multiplier"),
        ({"group_k": 0, "variant": "group"}, "mechanism.group_k"),
        ({"group_k": "mean"}, "mechanism.group_k"),
        ({"variant": "group", "user_rate": 0.5}, "mechanism.user_rate"),
        ({"variant": "fancy"}, "mechanism.variant"),
    ],
)
def test_bad_parameters_name_the_field(mechanism: dict, field: str) -> None:
    scenario = small_scenario(mechanism={"name": "uldp", **mechanism})
    scenario["data"] = scenario["data"] | {"users": {"count": 20}}
    with pytest.raises(ScenarioError) as err:
        validate_scenario(scenario)
    assert err.value.field == field


def test_uldp_needs_users_and_every_silo() -> None:
    with pytest.raises(ScenarioError) as err:
        validate_scenario(small_scenario(mechanism={"name": "uldp"}))
    assert err.value.field == "data.users"
    scenario = small_scenario(mechanism={"name": "uldp"})
    scenario["data"] = scenario["data"] | {"users": {"count": 20}}
    scenario["federation"] = scenario["federation"] | {"client_rate": 0.5}
    with pytest.raises(ScenarioError) as err:
        validate_scenario(scenario)
    assert err.value.field == "federation.client_rate"


def test_vectorised_training_with_size_buckets_equals_the_user_loop() -> None:
    torch.manual_seed(1)
    model = build_model("logistic_regression", feature_shape=(4,), num_classes=2).double()
    features = torch.randn(6003, 4, dtype=torch.float64)
    labels = torch.randint(0, 2, (6003,))
    groups = [torch.tensor([0]), torch.tensor([1, 2]), torch.arange(3, 6003)]  # padding all to 6000 would waste
    fast = train_users(model, features=features, labels=labels, groups=groups, steps=2, lr=0.1)
    slow = train_users_loop(model, features=features, labels=labels, groups=groups, steps=2, lr=0.1)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-9)


def _one_silo_of_two_users(*, clip: float, naive_noise: str = "safe", noise_multiplier: float = 0.0):
    """A silo where user 0 owns ten records labelled 0 and user 1 one record labelled 1, same feature."""
    torch.manual_seed(0)
    context = SiloContext(
        silo_id=0,
        record_ids=np.arange(11),
        features=torch.ones((11, 1), dtype=torch.float64),
        labels=torch.tensor([0] * 10 + [1]),
        model=torch.nn.Linear(1, 2).double(),
        training=LocalTraining(local_steps=20, batch_size=100, lr=0.5, rounds=1, client_rate=1.0),
        generator=torch.Generator().manual_seed(0),
        device=torch.device("cpu"),
        user_ids=np.array([0] * 10 + [1]),
        user_histogram=np.array([[10, 1]]),
    )
    params = UldpParams(variant="naive", max_grad_norm=clip, naive_noise=naive_noise, noise_multiplier=noise_multiplier)
    return build_silo(context, params), model_to_vector(context.model)


def test_naive_silo_sensitivity_is_two_c_so_the_safe_noise_doubles_the_papers() -> None:
    """Removing one user turns a silo's clipped delta v into another v' of the C-ball: ||v - v'|| reaches 2C (the
    paper takes C). Safe noise is 2 sigma C sqrt|S| accounted at sigma; the paper's sigma C sqrt|S| at sigma / 2."""
    clip = 0.1
    silo, start = _one_silo_of_two_users(clip=clip)
    with_user = silo.clipped_delta(start, np.array([True, True]))
    without_user = silo.clipped_delta(start, np.array([False, True]))
    assert np.linalg.norm(with_user - without_user) > 1.9 * clip
    for mode, factor, accounted in (("safe", 2.0, 3.0), ("paper", 1.0, 1.5)):
        silo, start = _one_silo_of_two_users(clip=clip, naive_noise=mode, noise_multiplier=3.0)
        clean = silo.clipped_delta(start, np.ones(2, dtype=bool))
        rounds = [silo.contribute((start,), round_index=r) for r in range(100)]
        noise = np.concatenate([c.vector - clean for c in rounds])
        std = factor * 3.0 * clip * np.sqrt(1)
        statistic = float(np.sum((noise / std) ** 2))  # chi-square, two-sided false failure 1e-6
        assert stats.chi2.ppf(5e-7, noise.size) < statistic < stats.chi2.ppf(1 - 5e-7, noise.size)
        assert {c.events[0].noise_multiplier for c in rounds} == {accounted}


def test_per_user_variants_refuse_to_run_without_secure_aggregation() -> None:
    scenario = small_scenario(
        data={"dataset": "digits", "partition": "iid", "silos": 3, "users": {"count": 20}},
        mechanism={"name": "uldp", "variant": "avg"},
    )
    with pytest.raises(ScenarioError, match="protocol.secure_aggregation"):
        validate_scenario(scenario)
    validate_scenario({**scenario, "protocol": {"secure_aggregation": True}})
    validate_scenario({**scenario, "mechanism": {"name": "uldp", "variant": "naive"}})
