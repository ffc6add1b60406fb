"""DLG and iDLG on real uploads of a silo trained in this process (the silo actor's class, its real mechanism and
protocol code, no Ray), the reading of d-privacy's uploaded parameters, an attack on d-privacy through Ray, the
metrics against hand-computed values, the attack's inputs (no ground truth) and the attack block's validation."""
from __future__ import annotations

import dataclasses
import inspect
import math
import pickle

import numpy as np
import pytest
import torch

from privsilo.mechanisms.base import load_vector_into_model, model_to_vector
from privsilo.simulator.engine.silo import Silo, SiloSpec
from privsilo.simulator.attacks.capture import check_sampled, check_target, ground_truth, make_observation
from privsilo.simulator.attacks.inversion import InversionSettings, _split_like, accumulated_gradient, invert, label_from_gradient, snapshot_steps
from privsilo.simulator.attacks.metrics import pair, psnr, score_images, ssim, summarise_scores, to_pixels
from privsilo.simulator.attacks.observation import Observation
from privsilo.simulator.attacks.runner import invert_task
from privsilo.simulator.data import load_dataset
from privsilo.simulator.data.datasets import MNIST_MEAN, MNIST_STD
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.engine.messages import RoundBroadcast
from privsilo.simulator.models.builtin import build_model
from privsilo.simulator.scenario import validate_scenario
from tests.support.scenarios import dprivacy_scenario, lenet_scenario, small_scenario

DIGITS = load_dataset("digits", seed=0)


@pytest.fixture(autouse=True)
def one_thread():
    """As in an attack task: one torch thread (two threads on two busy cores make L-BFGS several times slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def initial_state(scenario, seed=0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return model_to_vector(build_model(scenario.model.name, feature_shape=DIGITS.feature_shape, num_classes=DIGITS.num_classes))


def silo_upload(scenario, records, hypotheses=None):
    """One round of one silo holding ``records`` of digits' training set, through the silo's own code: the
    observation the server gets and the ground truth the silo notes. ``hypotheses``: the broadcast global state
    (default: one model drawn with seed 0)."""
    ids = np.asarray(records)
    silo = Silo(SiloSpec(silo_id=0, record_ids=ids, seed=7), features=DIGITS.x_train[ids], labels=DIGITS.y_train[ids],
                scenario=scenario, feature_shape=DIGITS.feature_shape, num_classes=DIGITS.num_classes, device=torch.device("cpu"))
    hypotheses = hypotheses or (initial_state(scenario),)
    silo.watch_inputs()
    update = silo.train(RoundBroadcast(round_index=0, participants=(0,), state=hypotheses))
    observation = make_observation(scenario, payload=update.payload, hypotheses=hypotheses, silo_records=len(ids), dataset=DIGITS)
    truth = ground_truth(silo.watched_records(), dataset=DIGITS, steps_share_batch=observation.steps_share_batch)
    return observation, truth


def settings(method="dlg", iterations=30):
    return InversionSettings(method=method, iterations=iterations, line_search="strong_wolfe", snapshot_steps=snapshot_steps(iterations))


def test_dlg_reconstructs_a_digit_in_20_steps_far_above_the_random_start():
    observation, truth = silo_upload(lenet_scenario(), records=[5, 17, 40])  # one record per local step
    assert len(truth.record_ids) == 1 and truth.record_ids[0] in (5, 17, 40)
    rec = invert(observation, settings=settings(iterations=20), generator=torch.Generator().manual_seed(0))
    pixels = lambda x: to_pixels(x, pixel_scale=(0.0, 1.0))  # noqa: E731
    start = psnr(float(np.mean((pixels(rec.snapshots[0][1]) - pixels(truth.features)) ** 2)))
    scores = score_images(pixels(rec.inputs), rec.labels, originals=pixels(truth.features), original_labels=truth.labels)
    assert start < 10 and scores[0].psnr > 40, (start, scores[0].psnr)  # random dummies vs a reconstruction
    assert scores[0].label_correct and rec.restarts == 0 and len(rec.losses) == 20


def test_idlg_reads_the_label_of_one_record_from_the_last_layer():
    scenario = lenet_scenario(attack={"method": "idlg", "iterations": 5})
    records = [int(np.flatnonzero(DIGITS.y_train == label)[0]) for label in range(10)]
    for record in records:
        observation, truth = silo_upload(scenario, records=[record])
        model = build_model("lenet", feature_shape=DIGITS.feature_shape, num_classes=10)
        layers = _split_like(observation.observed_gradient(), list(model.parameters()))
        assert label_from_gradient(layers, num_classes=10) == truth.labels[0]
    rec = invert(observation, settings=settings("idlg", 5), generator=torch.Generator().manual_seed(0))
    assert rec.labels.tolist() == [9]


def test_metrics_equal_hand_computed_values():
    assert psnr(0.01) == pytest.approx(20.0) and psnr(1.0) == 0.0 and psnr(0.0) == pytest.approx(100.0)  # MSE floor
    assert to_pixels(np.array([-MNIST_MEAN / MNIST_STD, 1.0, 100.0]), pixel_scale=(MNIST_MEAN, MNIST_STD)) == pytest.approx([0.0, MNIST_MEAN + MNIST_STD, 1.0])
    # SSIM of two 7x7 images: one 7x7 window, so the formula on the whole images (sample variances, N - 1)
    rng = np.random.default_rng(0)
    x, y = rng.random((1, 7, 7)), rng.random((1, 7, 7))
    mx, my, n = x.mean(), y.mean(), x.size
    vx, vy, cxy = x.var() * n / (n - 1), y.var() * n / (n - 1), ((x - mx) * (y - my)).sum() / (n - 1)
    c1, c2 = 0.01 ** 2, 0.03 ** 2
    expected = (2 * mx * my + c1) * (2 * cxy + c2) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2))
    assert ssim(x, y) == pytest.approx(expected, rel=1e-9) and ssim(x, x) == pytest.approx(1.0)
    # pairing undoes a permutation; scores: MSE 0 -> 100 dB, one wrong label of 3
    originals = rng.random((3, 1, 7, 7))
    order = [2, 0, 1]
    assert pair(originals[order], originals) == [(0, 2), (1, 0), (2, 1)]
    scores = score_images(originals[order] + 0.1, np.array([5, 3, 9]), originals=originals, original_labels=np.array([3, 9, 4]))
    assert [s.mse for s in scores] == pytest.approx([0.01] * 3) and [s.label_correct for s in scores] == [False, True, True]
    figures = summarise_scores(scores, success_psnr=30.0)
    assert figures["psnr"] == pytest.approx(20.0) and figures["label_accuracy"] == pytest.approx(2 / 3) and figures["success"] is False
    assert summarise_scores([], success_psnr=30.0) == {"psnr": None, "ssim": None, "mse": None, "label_accuracy": None, "success": False}


PUBLIC_KNOWLEDGE = {"payload", "hypotheses", "mechanism", "upload_form", "model", "feature_shape", "num_classes", "lr", "local_steps", "batch_size",
                    "silo_records", "max_grad_norm", "max_update_norm", "fractional_bits"}


def test_the_attack_gets_the_server_inbox_and_public_knowledge_never_the_ground_truth():
    observation, truth = silo_upload(lenet_scenario(), records=[11])
    assert {f.name for f in dataclasses.fields(Observation)} == PUBLIC_KNOWLEDGE
    assert list(inspect.signature(invert_task).parameters) == ["observation", "settings", "seed", "num_cpus"]
    record = truth.features[0]
    sent_to_the_attack = pickle.dumps((observation, settings()))
    assert record.tobytes() in pickle.dumps(truth)  # the search finds the record where it is
    for encoding in (np.float32, np.float64):
        assert record.astype(encoding).tobytes() not in sent_to_the_attack


def test_a_nan_loss_restarts_from_the_best_point_and_is_counted():
    observation, _ = silo_upload(lenet_scenario(), records=[11])
    values = np.array(observation.payload.values)
    values[3] = np.nan
    poisoned = dataclasses.replace(observation, payload=dataclasses.replace(observation.payload, values=values))
    rec = invert(poisoned, settings=settings(iterations=4), generator=torch.Generator().manual_seed(0))
    start = torch.randn((1, *DIGITS.feature_shape), generator=torch.Generator().manual_seed(0)).numpy()
    assert rec.restarts == 4 and np.array_equal(rec.inputs, start) and np.isinf(rec.losses).all()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"attack": {"target_silo": 3}}, "attack.target_silo"),
        ({"attack": {"target_silo": [0, 0]}}, "attack.target_silo"),
        ({"attack": {"round": 2}}, "attack.round"),
        ({"attack": {"method": "idlg", "batch_size": 2}}, "attack.batch_size"),
        ({"attack": {"batch_size": 4}, "data": {"dataset": "digits", "silos": 3, "max_records_per_silo": 2}}, "attack.batch_size"),
        ({"data": {"dataset": "breast_cancer", "silos": 3}, "model": {"name": "mlp"}}, "data.dataset"),
        ({"mechanism": {"name": "uldp", "variant": "naive"}, "data": {"dataset": "digits", "silos": 3, "users": {"count": 10}}}, "mechanism.name"),
        ({"attack": {"seeds": 0}}, "attack.seeds"),
        ({"mechanism": {"name": "dprivacy", "nu": 0.0, "radius": 1.0, "local_epochs": 1}}, "mechanism.local_epochs"),
        ({"mechanism": {"name": "dprivacy", "nu": 0.0, "radius": 1.0, "local_epochs": 1},
          "data": {"dataset": "digits", "silos": 3, "max_records_per_silo": 2}}, "mechanism.local_epochs"),
    ],
)
def test_a_bad_attack_block_names_the_field(changes, field):
    with pytest.raises(ScenarioError) as error:
        lenet_scenario(**changes)
    assert error.value.field == field


def test_attack_batch_size_is_the_runs_batch_and_runtime_checks_name_the_field():
    scenario = lenet_scenario(attack={"batch_size": 4, "target_silo": [0, 2]})
    assert scenario.federation.batch_size == 4 and validate_scenario(scenario.to_dict()) == scenario
    assert "attack" not in validate_scenario(small_scenario()).to_dict()  # scenarios without the block are unchanged
    with pytest.raises(ScenarioError, match="larger than silo 2's 3 records") as error:
        check_target(scenario, silo=2, records=3)
    assert error.value.field == "attack.batch_size"
    with pytest.raises(ScenarioError, match="participants: 0, 1") as error:
        check_sampled(scenario, participants=(0, 1))
    assert error.value.field == "attack.target_silo"
    idlg = lenet_scenario(attack={"method": "idlg"}, federation={"rounds": 1, "local_steps": 2, "batch_size": 1, "lr": 0.1})
    with pytest.raises(ScenarioError) as error:
        check_target(idlg, silo=0, records=5)
    assert error.value.field == "attack.method"
    check_target(idlg, silo=0, records=1)  # one record, however many steps: iDLG applies


def test_max_records_per_silo_keeps_the_first_records_of_each_silo():
    from privsilo.simulator.data.silos import partition_silos

    capped = validate_scenario(small_scenario(data={"dataset": "digits", "silos": 3, "max_records_per_silo": 2}))
    full = [part[:2] for part in partition_silos(validate_scenario(small_scenario()), DIGITS, np.random.default_rng(0))]
    assert [p.tolist() for p in partition_silos(capped, DIGITS, np.random.default_rng(0))] == [p.tolist() for p in full]


def test_multi_step_updates_are_modelled_step_by_step():
    """Two local steps, each on its own record: DLG on the two-step delta recovers both records."""
    scenario = lenet_scenario(federation={"rounds": 1, "local_steps": 2, "batch_size": 1, "lr": 0.1})
    observation, truth = silo_upload(scenario, records=[3, 8, 21])
    assert not observation.steps_share_batch and observation.records_in_round == len(truth.record_ids) == 2
    rec = invert(observation, settings=settings(iterations=15), generator=torch.Generator().manual_seed(1))
    scores = score_images(to_pixels(rec.inputs, pixel_scale=(0, 1)), rec.labels, originals=truth.features, original_labels=truth.labels)
    assert min(s.psnr for s in scores) > 30 and all(s.label_correct for s in scores)
    assert math.isfinite(rec.losses[-1])


def batch_gradient(observation, truth):
    """The true mean cross-entropy gradient of the silo's records at the hypothesis the attacker read (flat)."""
    model = build_model("lenet", feature_shape=DIGITS.feature_shape, num_classes=10)
    load_vector_into_model(model, observation.start())
    loss = torch.nn.functional.cross_entropy(model(torch.tensor(truth.features)), torch.tensor(truth.labels))
    return np.concatenate([g.reshape(-1).numpy() for g in torch.autograd.grad(loss, list(model.parameters()))])


def replayed_gradient(observation, truth):
    """The attacker's model of the round run on the silo's true records (flat)."""
    model = build_model("lenet", feature_shape=DIGITS.feature_shape, num_classes=10)
    load_vector_into_model(model, observation.start())
    start = {name: p.detach().requires_grad_(True) for name, p in model.named_parameters()}
    targets = torch.nn.functional.one_hot(torch.tensor(truth.labels), 10).float()
    grads = accumulated_gradient(model, start, torch.tensor(truth.features), targets, observation=observation)
    return np.concatenate([g.detach().reshape(-1).numpy() for g in grads])


def test_a_dprivacy_upload_without_noise_reveals_the_batch_gradient_after_subtracting_the_hypothesis():
    unclipped, truth = silo_upload(dprivacy_scenario(radius=100.0), records=[5, 17, 40])
    assert len(truth.record_ids) == 1  # the one step's record, not the records the silo evaluated the hypothesis on
    gradient = batch_gradient(unclipped, truth)
    assert unclipped.model_change().hypothesis == 0
    assert np.allclose(unclipped.observed_gradient(), gradient, rtol=1e-4, atol=1e-5)
    # a radius of half the update's norm: the silo clips, and so must the attacker's model of the round
    radius = 0.5 * unclipped.lr * float(np.linalg.norm(gradient))
    clipped, truth = silo_upload(dprivacy_scenario(radius=radius), records=[5, 17, 40])  # the same record (same seed)
    assert np.linalg.norm(clipped.model_change().delta) == pytest.approx(radius, rel=1e-5)
    assert np.allclose(clipped.observed_gradient(), 0.5 * gradient, rtol=1e-4, atol=1e-5)
    assert np.allclose(replayed_gradient(clipped, truth), clipped.observed_gradient(), rtol=1e-4, atol=1e-5)


def test_a_dprivacy_upload_is_read_against_the_nearest_of_several_hypotheses_and_its_epochs_replayed():
    scenario = dprivacy_scenario(radius=100.0, hypotheses=2, local_epochs=3)
    hypotheses = (initial_state(scenario, seed=1), initial_state(scenario, seed=0))  # record 11 has the lower loss under the second
    observation, truth = silo_upload(scenario, records=[11], hypotheses=hypotheses)
    assert observation.local_steps == 3 and observation.steps_share_batch and truth.record_ids.tolist() == [11]
    assert observation.model_change().hypothesis == 1
    assert np.allclose(replayed_gradient(observation, truth), observation.observed_gradient(), rtol=1e-4, atol=1e-5)
