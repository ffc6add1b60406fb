"""secure_rng: the replay attack on a seeded run, and what secure mode changes (issue 14, item 1)."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from privsilo.mechanisms.per_sample import clipped_gradient_sum, gaussian_noise_like, poisson_sample
from privsilo.simulator.data.silos import partition_silos, run_seeds
from privsilo.simulator.engine import Federation, run
from privsilo.simulator.models.builtin import build_model
from privsilo.simulator.engine.secure_rng import MT_WORDS, reseed_from_os_entropy
from tests.support.scenarios import small_scenario

SIGMA, CLIP, BATCH, LR = 1.0, 1.0, 32, 0.5


def _dp_scenario(*, secure_rng: bool, rounds: int = 1, mechanism: dict | None = None) -> dict:
    return {
        **small_scenario(
            data={"dataset": "digits", "partition": "iid", "silos": 2},
            federation={"rounds": rounds, "client_rate": 1.0, "local_steps": 1, "batch_size": BATCH, "lr": LR},
            mechanism=mechanism or {"name": "dp_sgd", "noise_multiplier": SIGMA, "max_grad_norm": CLIP},
        ),
        "secure_rng": secure_rng,
    }


def _mt_words(generator: torch.Generator) -> np.ndarray:
    return generator.get_state().numpy()[24 : 24 + 8 * MT_WORDS].view("<u8")


def test_a_torch_seed_keeps_only_32_bits_so_a_seeded_generator_can_be_enumerated():
    """Why secure mode replaces the whole state: seeds 5 and 5 + 2**32 give the same generator."""
    same = [torch.rand(4, generator=torch.Generator().manual_seed(seed)) for seed in (5, 5 + 2**32)]
    assert torch.equal(*same)


def test_reseeding_fills_the_whole_state_from_os_entropy():
    first, second = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    reseed_from_os_entropy(first)
    reseed_from_os_entropy(second)
    assert first.initial_seed() == 0  # the seed that was there is gone
    assert not torch.equal(torch.rand(8, generator=first), torch.rand(8, generator=second))
    words = _mt_words(first)
    # A 32-bit seed determines all 624 words; this state is not the one its first word would seed.
    assert not np.array_equal(words[1:], _mt_words(torch.Generator().manual_seed(int(words[0])))[1:])
    assert len(np.unique(words)) > MT_WORDS - 2


def _true_and_recovered_clipped_sum(*, secure_rng: bool) -> tuple[np.ndarray, np.ndarray]:
    """The review's attack: silo 0's first DP-SGD step, replayed from the scenario seed alone.

    The upload of one local step is ``-lr (S + Z) / batch_size`` with S the clipped sum and Z the noise; the
    attacker regenerates the batch and Z from the seed and returns ``S`` as the upload minus Z. The true S is
    computed from silo 0's records for the same batch.
    """
    scenario = _dp_scenario(secure_rng=secure_rng)
    with Federation(scenario) as federation:
        start = federation.model_state()
        federation.run_round(0)
        upload = federation.server_inbox()[0].values[:-1]  # silo weight 1 is the last entry
        dataset, validated = federation.dataset, federation.scenario
    seeds = run_seeds(validated.seed, validated.data.silos)  # what the attacker must never read
    records = partition_silos(validated, dataset, np.random.default_rng(seeds["partition"]))[0]
    generator = torch.Generator().manual_seed(seeds["silos"][0])
    batch = poisson_sample(num_records=len(records), rates=min(1.0, BATCH / len(records)), generator=generator)
    model = build_model("logistic_regression", feature_shape=dataset.feature_shape, num_classes=dataset.num_classes)
    model.load_state_dict(start)
    features = torch.tensor(dataset.x_train[records])[batch]
    labels = torch.tensor(dataset.y_train[records])[batch]
    clipped = clipped_gradient_sum(model, features=features, labels=labels, max_grad_norm=CLIP)
    noise = gaussian_noise_like(clipped, std=SIGMA * CLIP, generator=generator)
    recovered = -upload * BATCH / LR - _flat(noise)
    return _flat(clipped), recovered


def _flat(tensors: list[torch.Tensor]) -> np.ndarray:
    return torch.cat([t.reshape(-1) for t in tensors]).double().numpy()


def test_seeded_run_the_noise_of_a_step_is_replayed_from_the_seed(ray_local):
    """The threat of the default mode, kept as a test: the seed alone reveals silo 0's clipped gradient sum."""
    true, recovered = _true_and_recovered_clipped_sum(secure_rng=False)
    assert np.linalg.norm(true) > 0.1
    assert np.linalg.norm(recovered - true) < 1e-3


def test_secure_rng_defeats_the_replay(ray_local):
    true, recovered = _true_and_recovered_clipped_sum(secure_rng=True)
    noise_norm = SIGMA * CLIP * np.sqrt(true.size)  # about 25 here; a failed replay errs by about sqrt(2) of it
    assert np.linalg.norm(recovered - true) > 0.5 * noise_norm


@pytest.fixture(scope="module")
def two_secure_runs(ray_local, tmp_path_factory):
    scenario = _dp_scenario(
        secure_rng=True,
        rounds=2,
        mechanism={"name": "dp_sgd", "noise_multiplier": SIGMA, "max_grad_norm": CLIP, "sampling_rate": 0.05},
    )
    out = tmp_path_factory.mktemp("secure")
    return [(run(scenario, out_dir=out / name), out / name) for name in ("a", "b")]


def test_two_secure_runs_with_the_same_seed_give_different_models(two_secure_runs):
    (first, _), (second, _) = two_secure_runs
    assert first.scenario == second.scenario
    difference = [float((first.model_state[k] - second.model_state[k]).abs().max()) for k in first.model_state]
    assert max(difference) > 1e-3


def _metrics(path):
    with open(path) as handle:
        return list(csv.DictReader(handle))


def test_nothing_derived_from_the_secure_state_is_written(two_secure_runs):
    """Everything in summary.json and metrics.csv but the trained model's scores and the timings is the same in
    two runs whose silos drew different secure states: none of it depends on that state."""
    (_, dir_a), (_, dir_b) = two_secure_runs
    summary_a, summary_b = (json.loads((d / "summary.json").read_text()) for d in (dir_a, dir_b))
    assert summary_a["randomness"]["secure_rng"] is True and summary_a["randomness"]["bit_reproducible"] is False
    assert summary_a["config"]["secure_rng"] is True
    assert summary_a["final"] != summary_b["final"]
    for key in set(summary_a) - {"final", "timing"}:
        assert summary_a[key] == summary_b[key], key
    rows_a, rows_b = _metrics(dir_a / "metrics.csv"), _metrics(dir_b / "metrics.csv")
    scores = {"loss", "accuracy", "wall_seconds"}
    assert [{k: v for k, v in r.items() if k not in scores} for r in rows_a] == [
        {k: v for k, v in r.items() if k not in scores} for r in rows_b
    ]


def _uldp_server(*, secure_rng: bool):
    """A ServerActor object (its class, run in this process, no Ray) of a ULDP scenario with user sampling."""
    from privsilo.simulator.engine.actors import ServerActor
    from privsilo.simulator.scenario import validate_scenario

    scenario = validate_scenario({
        **small_scenario(
            data={"dataset": "digits", "partition": "iid", "silos": 2, "users": {"count": 400}},
            mechanism={"name": "uldp", "variant": "naive", "user_rate": 0.5},
        ),
        "secure_rng": secure_rng,
    })
    threads = torch.get_num_threads()
    try:
        server = ServerActor(num_cpus=0.25)
        server.open(scenario=scenario, workers=[(None, (0, 1))], test_features=np.zeros((1, 1, 8, 8), np.float32),
                    test_labels=np.zeros(1, np.int64), initial_state=(np.zeros(650),), feature_shape=(1, 8, 8),
                    num_classes=10, seed=run_seeds(0, 2)["server"])
        return server
    finally:
        torch.set_num_threads(threads)  # the actor limits its process's threads; this process is the test's


def test_secure_rng_draws_the_servers_user_sample_from_os_entropy():
    """ULDP's user sample (the round plan) amplifies only against whoever does not know it: in secure mode it must
    not follow from the seed. Two seeded servers draw the same sample; two secure ones (same seed) draw
    different samples, none equal to the seeded one (400 users at q = 0.5: a chance match has probability 2^-400)."""
    seeded = [_uldp_server(secure_rng=False).round_plan(0).sampled for _ in range(2)]
    secure = [_uldp_server(secure_rng=True).round_plan(0).sampled for _ in range(2)]
    assert np.array_equal(*seeded)
    assert not np.array_equal(*secure)
    assert not any(np.array_equal(s, seeded[0]) for s in secure)
