"""Where a scenario's data comes from: a built-in dataset (:func:`~privsilo.simulator.data.datasets.load_dataset`) or a
user's own.

Users' own datasets: a loader (``data.dataset: "package.module:loader"``, a name registered under
``privsilo.datasets``, or an object given to ``privsilo.run(dataset=...)``) turned into a checked :class:`Dataset`.

A loader is called with ``data.kwargs`` and, if its signature asks for it, ``seed`` (the scenario's seed, so a loader
that splits or shuffles can do it reproducibly). It returns ``((x_train, y_train), (x_test, y_test))``: numpy arrays
or torch tensors, features of any shape ``(records, *feature_shape)``, labels integer classes ``0..K-1`` (K = the
largest label + 1). Features of three dimensions per record ``(channels, height, width)`` are images, others
tabular. The same arrays may be given to ``privsilo.run(dataset=...)`` instead of a loader.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from privsilo.simulator.data.datasets import DATASETS, DatasetInfo, load_dataset
from privsilo.simulator.data.types import Dataset
from privsilo.simulator.user_code import UserCodeError, call_with, resolve


def scenario_dataset(data: Any, *, seed: int) -> Dataset:
    """The dataset of a scenario's ``data`` block (``DataConfig``: ``builtin``, ``dataset``, ``path``, ``silos``,
    ``kwargs`` and the ``source`` object ``privsilo.run(dataset=...)`` attaches)."""
    if data.builtin:
        return load_dataset(data.dataset, path=data.path, seed=seed, silos=data.silos)
    return user_dataset(data.dataset, data.source, kwargs=data.kwargs, seed=seed)


def scenario_dataset_info(data: Any, *, seed: int) -> DatasetInfo:
    """What validation knows of a scenario's dataset: a built-in's registry entry, or a user dataset loaded."""
    if data.builtin:
        return DATASETS[data.dataset]
    return user_dataset_info(scenario_dataset(data, seed=seed))


def user_dataset(name: str, source: Any, *, kwargs: dict[str, Any], seed: int) -> Dataset:
    """The checked :class:`Dataset` of a user's ``source``: a loader, its return value, or a :class:`Dataset`;
    ``source`` None resolves ``name`` (registered name or import string). Loaded datasets are cached per
    (name, kwargs, seed) in the process, so validating and running load once."""
    if source is None:
        return _loaded(name, json.dumps(kwargs, sort_keys=True, default=str), seed)
    return _checked(name, _call(name, source, kwargs, seed) if callable(source) else source)


@lru_cache(maxsize=8)
def _loaded(name: str, kwargs_json: str, seed: int) -> Dataset:
    return _checked(name, _call(name, resolve("dataset", name), json.loads(kwargs_json), seed))


def _call(name: str, loader: Callable[..., Any], kwargs: dict[str, Any], seed: int) -> Any:
    try:
        return call_with(loader, kwargs, seed=seed)
    except Exception as exc:
        raise UserCodeError(f"dataset {name!r} failed when loaded with kwargs {kwargs}: {type(exc).__name__}: {exc}") from None


def _array(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _checked(name: str, loaded: Any) -> Dataset:
    """Validate shapes, record counts and labels; one :class:`UserCodeError` line naming what is wrong."""
    if isinstance(loaded, Dataset):
        return loaded
    try:
        (x_train, y_train), (x_test, y_test) = loaded
    except (TypeError, ValueError):
        raise UserCodeError(f"dataset {name!r} must give ((x_train, y_train), (x_test, y_test)), got a {type(loaded).__name__}") from None
    x_train, y_train, x_test, y_test = (_array(a) for a in (x_train, y_train, x_test, y_test))
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if x.ndim < 2 or len(x) < 1:
            raise UserCodeError(f"dataset {name!r}: x_{split} must have shape (records, *features) with records >= 1, got {x.shape}")
        if y.shape != (len(x),):
            raise UserCodeError(f"dataset {name!r}: y_{split} must have shape ({len(x)},) like x_{split}'s records, got {y.shape}")
        if not np.issubdtype(x.dtype, np.number) or not np.isfinite(x).all():
            raise UserCodeError(f"dataset {name!r}: x_{split} must hold finite numbers")
        if y.size and (not np.issubdtype(y.dtype, np.number) or np.any(y != np.round(y)) or y.min() < 0):
            raise UserCodeError(f"dataset {name!r}: y_{split} must hold integer class labels 0..K-1")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise UserCodeError(f"dataset {name!r}: train records have shape {x_train.shape[1:]}, test records {x_test.shape[1:]}")
    unseen = np.setdiff1d(y_test, y_train)
    if unseen.size:
        raise UserCodeError(f"dataset {name!r}: y_test holds labels that no training record has ({_labels(unseen)}); "
                            f"y_train's labels are {_labels(np.unique(y_train))}, and a model cannot learn a class it never "
                            "sees: relabel or drop those test records")
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    if num_classes < 2:
        raise UserCodeError(f"dataset {name!r}: labels must span at least 2 classes, got only class 0")
    feature_shape = tuple(int(d) for d in x_train.shape[1:])
    return Dataset(
        name=name, x_train=x_train.astype(np.float32), y_train=y_train.astype(np.int64), x_test=x_test.astype(np.float32),
        y_test=y_test.astype(np.int64), num_classes=num_classes, feature_shape=feature_shape,
        kind="image" if len(feature_shape) == 3 else "tabular",
    )


def _labels(values: np.ndarray, shown: int = 6) -> str:
    """``0, 1, 2`` (the first ``shown`` of sorted ``values``, then how many more)."""
    words = ", ".join(str(int(v)) for v in values[:shown])
    return words + (f" and {len(values) - shown} more" if len(values) > shown else "")


def user_dataset_info(dataset: Dataset) -> DatasetInfo:
    """What validation needs to know of a loaded user dataset (the built-ins know it without loading)."""
    return DatasetInfo(
        name=dataset.name, kind=dataset.kind, description="user dataset", needs_path=False,
        feature_shape=dataset.feature_shape, train_records=len(dataset.y_train), num_classes=dataset.num_classes,
    )
