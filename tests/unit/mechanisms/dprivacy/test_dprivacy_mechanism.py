"""The pure parts of ``dprivacy`` (Galli et al., ICISSP 2023): k-means / IFCA aggregation against a brute-force
loop, SanitizeUpdate's calibrations, the leakage accountant against hand computation, the client's choice of
hypothesis, and the plain protocol handing the server every vector."""
from __future__ import annotations

import math

import numpy as np
import pytest

from privsilo.mechanisms.dprivacy import euclidean_laplace
from privsilo.mechanisms.dprivacy.accountant import LeakageAccountant
from privsilo.mechanisms.dprivacy.ifca import IfcaServer, kmeans
from privsilo.mechanisms.dprivacy.params import Calibration, DPrivacyParams
from privsilo.mechanisms.dprivacy.sanitize import hypothesis_spread, sanitize_update
from privsilo.mechanisms.events import EuclideanLaplaceEvent, PoissonGaussianEvent
from privsilo.protocols.plain import PlainSumServer, PlainSumSilo
from privsilo.simulator.run_dir.writers import privacy_line


def brute_force_kmeans(points, centres):
    """Lloyd's algorithm written out with loops: nearest centre by the full distance, means, empty keeps old."""
    points = [list(map(float, p)) for p in points]
    initial = [list(map(float, c)) for c in centres]
    current, labels = [list(c) for c in initial], None
    while True:
        new = []
        for p in points:
            distances = [sum((a - b) ** 2 for a, b in zip(p, c)) for c in current]
            new.append(min(range(len(current)), key=lambda j: (distances[j], j)))
        if new == labels:
            return labels, current
        labels = new
        for j in range(len(current)):
            members = [p for p, label in zip(points, labels) if label == j]
            current[j] = [sum(col) / len(members) for col in zip(*members)] if members else list(initial[j])


@pytest.mark.parametrize("seed", range(6))
def test_kmeans_and_the_ifca_server_match_the_brute_force_loop(seed):
    rng = np.random.default_rng(seed)
    k, dim = 1 + seed % 4, 3 + seed
    truth = rng.normal(scale=5.0, size=(k, dim))
    points = truth[rng.integers(k, size=12)] + rng.normal(size=(12, dim))
    centres = rng.normal(scale=5.0, size=(k, dim))
    labels, got = kmeans(points, initial_centres=centres)
    want_labels, want = brute_force_kmeans(points, centres)
    assert labels.tolist() == want_labels
    np.testing.assert_allclose(got, np.array(want), rtol=1e-12, atol=1e-12)
    state = IfcaServer().aggregate_individual(tuple(centres), list(points))
    np.testing.assert_allclose(np.stack(state), np.array(want), rtol=1e-12, atol=1e-12)


def test_an_empty_cluster_keeps_its_old_hypothesis_and_clusters_are_recovered():
    far = np.array([100.0, 100.0])
    points = np.array([[0.0, 0.1], [0.2, -0.1], [10.0, 10.0], [10.2, 9.8]])
    labels, centres = kmeans(points, initial_centres=np.array([[1.0, 1.0], [9.0, 9.0], far]))
    assert labels.tolist() == [0, 0, 1, 1]
    np.testing.assert_allclose(centres, [[0.1, 0.0], [10.1, 9.9], far])
    # no uploads (cannot happen in a run, which skips empty rounds): the state is unchanged
    state = (np.zeros(2), far)
    assert IfcaServer().aggregate_individual(state, []) is state
    with pytest.raises(TypeError, match="aggregate_individual"):
        IfcaServer().aggregate(state, np.zeros(2), num_participants=1)


def test_the_plain_protocol_hands_the_server_every_vector_in_participant_order():
    vectors = {3: np.array([1.0, 2.0]), 1: np.array([5.0, -1.0])}
    messages = {i: PlainSumSilo(i).protect(v, round_index=0, participants=(3, 1)) for i, v in vectors.items()}
    got = PlainSumServer().vectors(messages, round_index=0, participants=(3, 1))
    assert [v.tolist() for v in got] == [[1.0, 2.0], [5.0, -1.0]]
    assert PlainSumServer().combine(messages, round_index=0, participants=(3, 1)).tolist() == [6.0, 1.0]


def _params(**kw):
    return DPrivacyParams.model_validate(kw)


def test_clipped_calibration_clips_to_r_and_sets_eps_from_r():
    start, delta = np.arange(6.0), np.full(6, 3.0)  # ||delta|| = 7.35 > R = 2
    upload, event = sanitize_update(start, delta, params=_params(nu=4.0, radius=2.0), rng=np.random.default_rng(9), hypothesis_spread=1.5)
    clipped = delta * 2.0 / np.linalg.norm(delta)
    epsilon = 6 / (4.0 * 2.0)  # n / (nu R)
    noise = euclidean_laplace(6, epsilon=epsilon, rng=np.random.default_rng(9))
    np.testing.assert_allclose(upload, start + clipped + noise, rtol=1e-13)
    assert event == EuclideanLaplaceEvent(epsilon=epsilon, radius=2.0, calibration="clipped", hypothesis_spread=1.5)
    small = np.full(6, 0.1)  # inside the ball: not scaled
    upload, _ = sanitize_update(start, small, params=_params(nu=4.0, radius=2.0), rng=np.random.default_rng(9), hypothesis_spread=0.0)
    np.testing.assert_allclose(upload, start + small + noise, rtol=1e-13)


def test_paper_calibration_scales_the_noise_by_the_update_norm_and_nu_zero_adds_none():
    start, delta = np.zeros(4), np.array([3.0, 4.0, 0.0, 0.0])  # ||delta|| = 5
    upload, event = sanitize_update(start, delta, params=_params(nu=2.0, calibration="paper"), rng=np.random.default_rng(1), hypothesis_spread=0.0)
    assert event.epsilon == pytest.approx(4 / (2.0 * 5.0)) and event.radius == 5.0 and event.calibration == "paper"
    np.testing.assert_allclose(upload, delta + euclidean_laplace(4, epsilon=0.4, rng=np.random.default_rng(1)), rtol=1e-13)
    for params in (_params(nu=0.0, radius=1.0), _params(nu=0.0, calibration="paper")):
        upload, event = sanitize_update(start, delta, params=params, rng=np.random.default_rng(1), hypothesis_spread=0.0)
        assert math.isinf(event.epsilon)
        want = delta / 5.0 if params.calibration is Calibration.CLIPPED else delta  # clipped to R = 1, no noise
        np.testing.assert_allclose(upload, want, rtol=1e-15)


def test_hypothesis_spread_is_the_largest_pairwise_distance():
    assert hypothesis_spread((np.zeros(2),)) == 0.0
    assert hypothesis_spread((np.zeros(2), np.array([3.0, 4.0]), np.array([0.0, 1.0]))) == 5.0


def test_leakage_accountant_matches_hand_computation():
    """n = 1000 parameters, nu = 5, R = 0.5: eps = 1000 / 2.5 = 400 per unit distance, 2n/nu = 400 per upload."""
    accountant = LeakageAccountant(calibration=Calibration.CLIPPED, nu=5.0)
    accountant.enrol([0, 1, 2, 3])
    event = EuclideanLaplaceEvent(epsilon=400.0, radius=0.5, calibration="clipped", hypothesis_spread=2.0)
    for silo, times in ((0, 3), (1, 1), (2, 2)):  # silo 3 is never sampled
        for _ in range(times):
            accountant.record(silo, event)
    with pytest.raises(TypeError):  # refused before any state changes
        accountant.record(0, PoissonGaussianEvent(sampling_rate=0.1, noise_multiplier=1.0, steps=1))
    report = accountant.report()
    leakage = report["leakage"]
    assert [leakage["per_client"][s]["participations"] for s in "0123"] == [3, 1, 2, 0]
    assert [leakage["per_client"][s]["total"] for s in "0123"] == [1200.0, 400.0, 800.0, 0.0]
    assert leakage["per_client"]["0"]["per_participation"] == 400.0 and leakage["per_client"]["3"]["per_participation"] is None
    assert leakage["per_client"]["0"]["total_across_hypotheses"] == 3 * 400.0 * (1.0 + 2.0)  # eps (2R + spread)
    assert leakage["max"] == 1200.0 and leakage["median"] == 600.0 and leakage["max_per_participation"] == 400.0
    assert report["epsilon"] is None and report["guarantee"].startswith("d-privacy")
    assert report["epsilon_per_silo"] == {"0": None, "1": None, "2": None, "3": None}


def test_leakage_of_the_paper_calibration_and_of_no_noise():
    paper = LeakageAccountant(calibration=Calibration.PAPER, nu=5.0)
    for norm in (0.5, 2.0):  # eps ||delta|| = n / nu = 200 whatever the norm
        paper.record(0, EuclideanLaplaceEvent(epsilon=1000 / (5.0 * norm), radius=norm, calibration="paper", hypothesis_spread=0.0))
    report = paper.report()
    assert report["leakage"]["per_client"]["0"]["total"] == pytest.approx(400.0)
    assert report["guarantee"].startswith("none") and report["leakage"]["max_across_hypotheses"] is None
    with pytest.raises(ValueError, match="calibrated"):
        paper.record(0, EuclideanLaplaceEvent(epsilon=1.0, radius=1.0, calibration="clipped", hypothesis_spread=0.0))
    silent = LeakageAccountant(calibration=Calibration.CLIPPED, nu=0.0)
    silent.record(0, EuclideanLaplaceEvent(epsilon=math.inf, radius=1.0, calibration="clipped", hypothesis_spread=0.0))
    report = silent.report()
    assert math.isinf(report["leakage"]["max"]) and "no noise" in report["guarantee"]


def test_the_result_line_gives_the_leakage_or_why_there_is_none():
    clipped = LeakageAccountant(calibration=Calibration.CLIPPED, nu=5.0)
    for silo in (0, 0, 1):
        clipped.record(silo, EuclideanLaplaceEvent(epsilon=400.0, radius=0.5, calibration="clipped", hypothesis_spread=0.0))
    line = privacy_line(clipped.report(), mechanism="dprivacy")
    assert line == "d-privacy leakage per client over the run: max 800, median 600 (summary.json privacy.leakage)"
    paper = LeakageAccountant(calibration=Calibration.PAPER, nu=5.0)
    paper.record(0, EuclideanLaplaceEvent(epsilon=400.0, radius=0.5, calibration="paper", hypothesis_spread=0.0))
    assert privacy_line(paper.report(), mechanism="dprivacy").startswith("no guarantee (calibration 'paper'")
    silent = LeakageAccountant(calibration=Calibration.CLIPPED, nu=0.0)
    silent.record(0, EuclideanLaplaceEvent(epsilon=math.inf, radius=1.0, calibration="clipped", hypothesis_spread=0.0))
    assert privacy_line(silent.report(), mechanism="dprivacy").startswith("no d-privacy leakage bound")


def test_a_client_picks_the_hypothesis_with_the_lowest_loss_on_its_records():
    import torch

    from privsilo.mechanisms.base import LocalTraining, SiloContext
    from privsilo.mechanisms.dprivacy.silo import best_hypothesis
    from privsilo.simulator.data.synthetic import THETAS, load_synthetic_linear
    from privsilo.simulator.models.builtin import build_model

    data = load_synthetic_linear(users=4, seed=0)
    for user, records in enumerate(data.natural_partition):
        context = SiloContext(
            silo_id=user, record_ids=records, features=torch.from_numpy(data.x_train[records]),
            labels=torch.from_numpy(data.y_train[records]), model=build_model("linear_regression", feature_shape=(2,), num_classes=1),
            training=LocalTraining(local_steps=1, batch_size=10, lr=0.1, rounds=1, client_rate=1.0),
            generator=torch.Generator().manual_seed(0), device=torch.device("cpu"),
        )
        assert best_hypothesis(context, (THETAS[0].copy(), THETAS[1].copy())) == data.train_groups[records[0]] == user % 2
