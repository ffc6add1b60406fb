"""Record owners across silos (data.users): allocations, their statistics, determinism and bad input."""
from __future__ import annotations

import numpy as np
import pytest

from privsilo.simulator.cli import main
from privsilo.simulator.data import DATASETS, load_dataset
from privsilo.simulator.data.users import SILOS_EXPONENT, allocate_users, users_generator
from privsilo.simulator.engine import Federation
from privsilo.simulator.errors import DataUnavailableError, ScenarioError
from privsilo.simulator.scenario import validate_scenario
from tests.support.scenarios import small_scenario


def _allocate(seed: int = 0, **kwargs):
    settings = dict(count=100, records="uniform", silos="uniform", num_silos=5) | kwargs
    return allocate_users(20_000, rng=np.random.default_rng(seed), **settings)


def test_every_record_once_with_aligned_owner_ids() -> None:
    allocation = _allocate(records="zipf", silos="zipf")
    joined = np.sort(np.concatenate(allocation.silo_indices))
    assert np.array_equal(joined, np.arange(20_000))
    assert [len(i) for i in allocation.silo_indices] == [len(u) for u in allocation.silo_user_ids]
    assert allocation.histogram().sum() == 20_000


def test_same_generator_same_allocation_and_other_seed_another() -> None:
    a, b, c = _allocate(1, records="zipf", silos="zipf"), _allocate(1, records="zipf", silos="zipf"), _allocate(2, records="zipf", silos="zipf")
    assert all(np.array_equal(x, y) for x, y in zip(a.silo_user_ids + a.silo_indices, b.silo_user_ids + b.silo_indices))
    assert not np.array_equal(a.histogram(), c.histogram())


def test_zipf_records_follow_inverse_square_root_of_the_user_index() -> None:
    counts = _allocate(records="zipf").histogram().sum(axis=0)
    weights = np.arange(1, 101) ** -0.5
    expected = 20_000 * weights / weights.sum()
    # each count is binomial; 5 standard deviations: a false failure has probability below 1e-4 over 100 users
    assert np.all(np.abs(counts - expected) <= 5 * np.sqrt(expected))
    assert np.all(np.abs(_allocate(records="uniform").histogram().sum(axis=0) - 200) <= 5 * np.sqrt(200))


def test_zipf_silos_give_each_user_a_ranking_with_inverse_square_weights() -> None:
    hist = _allocate(count=20, silos="zipf").histogram()
    share_sorted = np.sort(hist, axis=0)[::-1].sum(axis=1) / hist.sum()
    by_rank = np.arange(1, 6) ** -SILOS_EXPONENT
    assert np.allclose(share_sorted, by_rank / by_rank.sum(), atol=0.02)
    top_silos = hist.argmax(axis=0)
    assert len(set(top_silos.tolist())) > 1  # the ranking is per user, not one global order


def test_natural_silos_keep_their_records_and_users_are_shared() -> None:
    natural = (np.arange(0, 199), np.arange(199, 371), np.arange(371, 401), np.arange(401, 486))
    allocation = allocate_users(486, count=50, records="zipf", silos="zipf", num_silos=4, rng=np.random.default_rng(0), natural=natural)
    assert all(np.array_equal(a, b) for a, b in zip(allocation.silo_indices, natural))
    hist = allocation.histogram()
    assert ((hist > 0).sum(axis=0) > 1).any()  # some user has records in several hospitals
    summary = allocation.summary()
    assert summary["users_with_records"] + summary["dropped_users"] == 50
    assert summary["users_per_silo"] == [int(n) for n in (hist > 0).sum(axis=1)]


def test_users_without_records_are_dropped_and_counted() -> None:
    allocation = allocate_users(30, count=30, records="zipf", silos="uniform", num_silos=2, rng=np.random.default_rng(0))
    summary = allocation.summary()
    assert summary["dropped_users"] == int((allocation.histogram().sum(axis=0) == 0).sum()) > 0
    assert summary["records_per_user"]["min"] >= 1


def test_users_stream_is_not_one_of_the_engines_streams() -> None:
    from privsilo.simulator.data.silos import run_seeds

    seeds = run_seeds(0, 5)
    users = users_generator(0).random(4)
    assert not np.allclose(users, np.random.default_rng(seeds["partition"]).random(4))
    assert np.array_equal(users, users_generator(0).random(4))


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"users": {"count": 0}}, "data.users.count"),
        ({"users": {"count": 5, "records": "pareto"}}, "data.users.records"),
        ({"users": {"count": 5, "silos": "pareto"}}, "data.users.silos"),
        ({"users": {"records": "zipf"}}, "data.users.count"),
        ({"users": {"count": 5, "colour": 1}}, "data.users.colour"),
        ({"users": {"count": 5}, "partition": "shards"}, "data.partition"),
    ],
)
def test_bad_users_blocks_name_the_field(data: dict, field: str) -> None:
    scenario = small_scenario()
    scenario["data"] = scenario["data"] | data
    with pytest.raises(ScenarioError) as err:
        validate_scenario(scenario)
    assert err.value.field == field


def test_more_users_than_records_exits_2_before_starting_ray(tmp_path, capsys) -> None:
    scenario = small_scenario()
    scenario["data"] = scenario["data"] | {"users": {"count": 100_000}}
    with pytest.raises(ScenarioError) as err:
        with Federation(scenario):
            pass
    assert err.value.field == "data.users.count"
    path = tmp_path / "s.yaml"
    import yaml

    path.write_text(yaml.safe_dump(scenario))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    err_text = capsys.readouterr().err.strip().splitlines()
    assert len(err_text) == 1 and "data.users.count" in err_text[0]
    assert not (tmp_path / "out").exists()


def _uldp_heart_disease(heart_disease_dir, *, users: dict | None = None, silos: int = 4, **mechanism) -> dict:
    return small_scenario(
        data={"dataset": "heart_disease", "partition": "natural", "silos": silos, "path": str(heart_disease_dir),
              "users": users or {"count": 50, "records": "zipf", "silos": "zipf"}},
        mechanism={"name": "uldp", "variant": "naive", **mechanism},
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"users": {"count": 487}}, "data.users.count"),  # heart_disease has 486 training records
        ({"silos": 5}, "data.silos"),  # its natural partition has 4 hospitals
        ({"user_rate": 0.0}, "mechanism.user_rate"),
        ({"user_rate": 1.5}, "mechanism.user_rate"),
        ({"max_grad_norm": 0.0}, "mechanism.max_grad_norm"),
        ({"noise_multiplier": -1.0}, "mechanism.noise_multiplier"),
        ({"variant": "group", "group_k": 0}, "mechanism.group_k"),
    ],
)
def test_privsilo_validate_exits_2_naming_the_field(heart_disease_dir, tmp_path, capsys, change: dict, field: str) -> None:
    scenario = _uldp_heart_disease(heart_disease_dir, **change)
    path = tmp_path / "scenario.yaml"
    import yaml

    path.write_text(yaml.safe_dump(scenario))
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], lines


def test_users_count_up_to_the_records_is_valid_and_one_more_is_not_even_in_a_grid(heart_disease_dir, tmp_path, capsys) -> None:
    import yaml

    (tmp_path / "base.yaml").write_text(yaml.safe_dump(_uldp_heart_disease(heart_disease_dir, users={"count": 486})))
    assert main(["validate", str(tmp_path / "base.yaml")]) == 0
    grid = {"name": "g", "base": "base.yaml", "seeds": [0], "axes": {"data.users.count": {"ok": 50, "too_many": 487}}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    assert main(["validate", str(tmp_path / "grid.yaml")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "data.users.count" in lines[0] and "487" in lines[0], lines


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_training_record_counts_known_without_loading_are_the_loaders(name: str, request) -> None:
    fixtures = {"heart_disease": "heart_disease_dir", "mnist": "mnist_dir"}  # fetched into the cache where absent
    path = str(request.getfixturevalue(fixtures[name])) if name in fixtures else None
    info = DATASETS[name]
    silos = 3 if info.records_per_silo is not None else None
    try:
        dataset = load_dataset(name, path=path, silos=silos)
    except DataUnavailableError:
        pytest.skip(f"{name} is not available here (fashion_mnist: the Debian package dataset-fashion-mnist)")
    expected = info.train_records if silos is None else silos * info.records_per_silo
    assert expected == len(dataset.y_train)
