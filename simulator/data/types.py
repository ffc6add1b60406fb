"""The loaded dataset type and the data cache's location, shared by the dataset registry and its loaders."""
from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass

import numpy as np

from privsilo.simulator.errors import DataUnavailableError


@dataclass(frozen=True)
class Dataset:
    """A labelled train/test split.

    ``natural_partition`` holds, for datasets collected by several institutions, the indices into ``x_train``
    of each institution's records (one array per natural silo); it is ``None`` otherwise. Datasets drawn from
    several distributions (rotated images, Galli et al.'s two linear models) give the true group of every
    training and test record in ``train_groups`` / ``test_groups`` (indices into ``group_names``).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    feature_shape: tuple[int, ...]
    kind: str
    natural_partition: tuple[np.ndarray, ...] | None = None
    train_groups: np.ndarray | None = None
    test_groups: np.ndarray | None = None
    group_names: tuple[str, ...] = ()


def default_data_dir() -> pathlib.Path:
    """Where fetched datasets are cached: ``$PRIVSILO_DATA_DIR`` or ``~/.cache/privsilo``."""
    configured = os.environ.get("PRIVSILO_DATA_DIR")
    return pathlib.Path(configured) if configured else pathlib.Path.home() / ".cache" / "privsilo"


def missing_data_error(*, name: str, directory: pathlib.Path, missing: str) -> DataUnavailableError:
    """The error for a fetchable dataset whose files are absent: the directory, the fetch command and data.path."""
    default = default_data_dir() / name
    command = f"privsilo data fetch {name}" + ("" if directory == default else f" --dir {directory}")
    return DataUnavailableError(
        f"dataset {name!r}: {missing} not found in {directory}; run `{command}` (with `--from DIR` to copy the "
        "files from a local directory) or set data.path to a directory that holds them"
    )
