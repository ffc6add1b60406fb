"""Datasets, partitions and the one-time fetch."""
from __future__ import annotations

import gzip
import pathlib

import numpy as np
import pytest

from privsilo.simulator.data import DATASETS, PARTITIONS, default_data_dir, load_dataset, partition_indices
from privsilo.simulator.data.datasets import FASHION_MNIST_DIR, read_idx
from privsilo.simulator.data.heart_disease import CENTERS, read_center_records
from privsilo.simulator.errors import DataUnavailableError

# --- Heart Disease ------------------------------------------------------------------------------------------

def test_heart_disease_records_per_hospital_match_flamby(heart_disease_dir):
    records = read_center_records(path=heart_disease_dir)
    assert [len(records[center][1]) for center in CENTERS] == [303, 261, 46, 130]
    assert all(features.shape[1] == 10 for features, _ in records.values())


def test_heart_disease_natural_split_covers_each_hospital(heart_disease_dir):
    dataset = load_dataset("heart_disease", path=str(heart_disease_dir))
    sizes = [len(part) for part in dataset.natural_partition]
    assert sum(sizes) == len(dataset.x_train) == 486  # FLamby's pooled train size
    assert len(dataset.x_train) + len(dataset.x_test) == 303 + 261 + 46 + 130
    assert sizes == [199, 172, 30, 85]  # FLamby's published per-hospital train sizes
    assert np.array_equal(np.concatenate(dataset.natural_partition), np.arange(486))
    assert dataset.feature_shape == DATASETS["heart_disease"].feature_shape == (13,)
    assert len(dataset.natural_partition) == DATASETS["heart_disease"].natural_silos
    assert dataset.x_train.dtype == np.float32
    assert set(np.unique(dataset.y_train)) == {0, 1} and dataset.y_train.dtype == np.int64


def test_heart_disease_is_standardised_per_hospital_train_set(heart_disease_dir):
    dataset = load_dataset("heart_disease", path=str(heart_disease_dir))
    cleveland = dataset.x_train[dataset.natural_partition[0]]
    assert np.allclose(cleveland.mean(axis=0), 0.0, atol=1e-5)
    assert np.allclose(cleveland.std(axis=0, ddof=1), 1.0, atol=1e-4)


def test_missing_heart_disease_directory_names_path_and_command(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DataUnavailableError) as caught:
        load_dataset("heart_disease", path=str(missing))
    assert str(missing) in str(caught.value)
    assert f"privsilo data fetch heart_disease --dir {missing}" in str(caught.value)


def test_missing_default_cache_names_plain_fetch_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIVSILO_DATA_DIR", str(tmp_path))
    with pytest.raises(DataUnavailableError, match=r"run `privsilo data fetch heart_disease`"):
        load_dataset("heart_disease")


def test_missing_mnist_cache_names_path_and_command(tmp_path):
    with pytest.raises(DataUnavailableError) as caught:
        load_dataset("mnist", path=str(tmp_path))
    assert str(tmp_path) in str(caught.value) and "privsilo data fetch mnist" in str(caught.value)


def test_mnist_cache_is_read_and_normalised(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (12, 28, 28), dtype=np.uint8), "y_train": np.arange(12) % 10,
              "x_test": np.full((3, 28, 28), 255, dtype=np.uint8), "y_test": np.array([0, 9, 4])}
    np.savez(tmp_path / "mnist.npz", **arrays)
    dataset = load_dataset("mnist", path=str(tmp_path))
    assert dataset.x_train.shape == (12, 1, 28, 28) and dataset.x_train.dtype == np.float32
    assert np.allclose(dataset.x_test, (1.0 - 0.1307) / 0.3081)
    assert dataset.y_test.tolist() == [0, 9, 4] and dataset.y_test.dtype == np.int64


def test_read_idx_decodes_header_and_rejects_truncation():
    header = bytes([0, 0, 8, 3]) + (2).to_bytes(4, "big") + (3).to_bytes(4, "big") + (4).to_bytes(4, "big")
    decoded = read_idx(header + bytes(range(24)))
    assert decoded.shape == (2, 3, 4) and decoded[1, 2, 3] == 23
    with pytest.raises(ValueError, match="truncated"):
        read_idx(header + bytes(range(23)))


def test_default_data_dir_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PRIVSILO_DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.delenv("PRIVSILO_DATA_DIR")
    assert default_data_dir() == pathlib.Path.home() / ".cache" / "privsilo"


# --- bundled datasets ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "shape", "classes", "total"), [
    ("digits", (1, 8, 8), 10, 1797),
    ("breast_cancer", (30,), 2, 569),
    ("mnist_5k", (1, 28, 28), 10, 5000),
    ("lfw", (1, 25, 25), 2, 200),
])
def test_bundled_dataset_shapes_dtypes_and_labels(name, shape, classes, total):
    dataset = load_dataset(name, seed=0)
    assert dataset.feature_shape == shape and dataset.num_classes == classes
    assert dataset.x_train.shape[1:] == shape and dataset.x_test.shape[1:] == shape
    assert len(dataset.x_train) + len(dataset.x_test) == total
    assert len(dataset.x_test) == pytest.approx(0.2 * total, abs=1)
    assert dataset.x_train.dtype == np.float32 and dataset.y_train.dtype == np.int64
    assert set(np.unique(dataset.y_train)) == set(range(classes)) == set(np.unique(dataset.y_test))
    assert dataset.kind == DATASETS[name].kind and dataset.natural_partition is None
    assert DATASETS[name].feature_shape == shape and DATASETS[name].natural_silos is None


def test_breast_cancer_standardised_with_train_statistics():
    dataset = load_dataset("breast_cancer", seed=0)
    assert np.allclose(dataset.x_train.mean(axis=0), 0.0, atol=1e-5)
    assert np.allclose(dataset.x_train.std(axis=0), 1.0, atol=1e-4)


def test_mnist_5k_uses_mnist_normalisation():
    dataset = load_dataset("mnist_5k", seed=0)
    background = (0.0 - 0.1307) / 0.3081
    assert dataset.x_train.min() == pytest.approx(background, rel=1e-6)
    assert dataset.x_train.max() == pytest.approx((1.0 - 0.1307) / 0.3081, rel=1e-6)


def test_split_is_deterministic_in_seed():
    first, again, other = (load_dataset("digits", seed=seed) for seed in (3, 3, 4))
    assert np.array_equal(first.x_train, again.x_train) and np.array_equal(first.y_test, again.y_test)
    assert not np.array_equal(first.x_train, other.x_train)


def test_unknown_dataset_is_rejected():
    with pytest.raises(ValueError, match="digits"):
        load_dataset("cifar1000")


def test_fashion_mnist_missing_directory_says_how_to_install(tmp_path):
    with pytest.raises(DataUnavailableError, match="apt-get install dataset-fashion-mnist"):
        load_dataset("fashion_mnist", path=str(tmp_path))


@pytest.mark.skipif(not FASHION_MNIST_DIR.is_dir(),
                    reason="Fashion-MNIST not installed; `apt-get install dataset-fashion-mnist` provides it")
def test_fashion_mnist_from_debian_package():
    dataset = load_dataset("fashion_mnist")
    assert dataset.x_train.shape == (60000, 1, 28, 28) and dataset.x_test.shape == (10000, 1, 28, 28)
    assert np.bincount(dataset.y_train).tolist() == [6000] * 10
    assert abs(float(dataset.x_train.mean())) < 0.01


# --- partitions ---------------------------------------------------------------------------------------------

LABELS = np.repeat(np.arange(10), 30)  # 300 records, 30 per class, in label order


@pytest.mark.parametrize("scheme", ["iid", "shards", "dirichlet"])
def test_partition_uses_every_index_once_and_is_deterministic(scheme):
    def split(seed):
        return partition_indices(LABELS, scheme=scheme, num_silos=7, alpha=0.5, rng=np.random.default_rng(seed))

    silos = split(11)
    assert len(silos) == 7
    assert np.array_equal(np.sort(np.concatenate(silos)), np.arange(len(LABELS)))
    assert all(silo.dtype == np.int64 for silo in silos)
    assert all(np.array_equal(a, b) for a, b in zip(silos, split(11)))
    assert not all(np.array_equal(a, b) for a, b in zip(silos, split(12)))


def test_iid_silos_have_equal_sizes():
    silos = partition_indices(LABELS, scheme="iid", num_silos=4, rng=np.random.default_rng(0))
    assert [len(silo) for silo in silos] == [75] * 4


def test_shards_give_each_silo_at_most_shards_per_silo_labels():
    silos = partition_indices(LABELS, scheme="shards", num_silos=10, shards_per_silo=2, rng=np.random.default_rng(0))
    label_counts = [len(np.unique(LABELS[silo])) for silo in silos]
    assert max(label_counts) <= 2 and min(label_counts) >= 1
    assert [len(silo) for silo in silos] == [30] * 10


def test_dirichlet_small_alpha_is_skewed_and_never_empty():
    rng = np.random.default_rng(5)
    silos = partition_indices(LABELS, scheme="dirichlet", num_silos=20, alpha=0.05, rng=rng)
    assert min(len(silo) for silo in silos) >= 1
    # With alpha = 0.05 almost every class lands on one or two silos: the dominant label of a silo holds
    # most of it, far above the 10 % of a uniform mix.
    dominant_share = [np.bincount(LABELS[silo]).max() / len(silo) for silo in silos]
    assert np.median(dominant_share) > 0.6
    iid_like = partition_indices(LABELS, scheme="dirichlet", num_silos=20, alpha=1000.0, rng=rng)
    assert np.median([np.bincount(LABELS[s]).max() / len(s) for s in iid_like]) < 0.5


def test_dirichlet_needs_alpha():
    with pytest.raises(ValueError, match="alpha"):
        partition_indices(LABELS, scheme="dirichlet", num_silos=3, rng=np.random.default_rng(0))


def test_natural_partition_is_returned_and_checked():
    natural = (np.arange(0, 100), np.arange(100, 300))
    silos = partition_indices(LABELS, scheme="natural", num_silos=2, natural=natural, rng=np.random.default_rng(0))
    assert [s.tolist() for s in silos] == [n.tolist() for n in natural]
    with pytest.raises(ValueError, match="set num_silos to 2"):
        partition_indices(LABELS, scheme="natural", num_silos=3, natural=natural, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="natural silos"):
        partition_indices(LABELS, scheme="natural", num_silos=2, rng=np.random.default_rng(0))


def test_unknown_scheme_lists_the_known_ones():
    with pytest.raises(ValueError, match=", ".join(PARTITIONS)):
        partition_indices(LABELS, scheme="random", num_silos=2, rng=np.random.default_rng(0))


# --- fetch --------------------------------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_fetch_heart_disease_then_load(tmp_path):
    from privsilo.simulator.data.fetch import fetch_dataset

    try:
        directory = fetch_dataset("heart_disease", dest=tmp_path / "heart", progress=False)
    except DataUnavailableError as error:
        if "could not download" not in str(error):
            raise
        pytest.skip(f"neither UCI nor the package registry is reachable: {error}")
    assert sorted(path.name for path in directory.iterdir()) == sorted(f"processed.{c}.data" for c in CENTERS)
    records = read_center_records(path=directory)
    assert [len(records[center][1]) for center in CENTERS] == [303, 261, 46, 130]


def _idx_gz(array: np.ndarray) -> bytes:
    """``array`` (uint8) as a gzipped IDX file, the format of LeCun's MNIST distribution."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(size.to_bytes(4, "big") for size in array.shape)
    return gzip.compress(header + array.tobytes(), compresslevel=1)


def test_fetch_mnist_from_a_local_copy_of_the_idx_files(tmp_path):
    from privsilo.simulator.data.fetch import MNIST_IDX_FILES, MNIST_SHAPES, fetch_dataset

    rng = np.random.default_rng(0)
    arrays = {key: rng.integers(0, 10 if key.startswith("y") else 256, size=shape, dtype=np.uint8)
              for key, shape in MNIST_SHAPES.items()}
    source = tmp_path / "copy"
    source.mkdir()
    for key, file in MNIST_IDX_FILES.items():
        (source / file).write_bytes(_idx_gz(arrays[key]))
    directory = fetch_dataset("mnist", dest=tmp_path / "cache", source=source, progress=False)
    dataset = load_dataset("mnist", path=str(directory))
    assert np.array_equal(dataset.y_train, arrays["y_train"]) and np.array_equal(dataset.y_test, arrays["y_test"])
    pixels = np.rint((dataset.x_test[:, 0] * 0.3081 + 0.1307) * 255).astype(np.uint8)
    assert np.array_equal(pixels, arrays["x_test"])


def test_fetch_mnist_from_a_wrong_copy_writes_nothing(tmp_path):
    from privsilo.simulator.data.fetch import MNIST_IDX_FILES, fetch_dataset

    source = tmp_path / "copy"
    source.mkdir()
    for file in MNIST_IDX_FILES.values():
        (source / file).write_bytes(_idx_gz(np.zeros((10, 28, 28) if "images" in file else (10,), dtype=np.uint8)))
    with pytest.raises(DataUnavailableError, match=f"MNIST from {source} has unexpected shapes"):
        fetch_dataset("mnist", dest=tmp_path / "cache", source=source, progress=False)
    (source / MNIST_IDX_FILES["y_test"]).unlink()
    with pytest.raises(DataUnavailableError, match=MNIST_IDX_FILES["y_test"]):
        fetch_dataset("mnist", dest=tmp_path / "cache", source=source, progress=False)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("name", ["digits", "breast_cancer"])
def test_a_cached_split_equals_the_computed_one(name, tmp_path, monkeypatch):
    import dataclasses

    from privsilo.simulator.data import datasets

    monkeypatch.setenv("PRIVSILO_DATA_DIR", str(tmp_path))
    computed = load_dataset(name, seed=2)  # splits with scikit-learn and writes the cache
    assert datasets.split_cache_path(name, seed=2).is_file()
    monkeypatch.setattr(datasets, "_load_digits", None)  # a second load must not split again
    monkeypatch.setattr(datasets, "_load_breast_cancer", None)
    cached = load_dataset(name, seed=2)
    for field in dataclasses.fields(computed):
        a, b = getattr(computed, field.name), getattr(cached, field.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), field.name
        else:
            assert a == b, field.name
