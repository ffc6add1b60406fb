"""UCI Heart Disease as four hospital silos, preprocessed as FLamby's Fed-Heart-Disease.

Reproduces ``flamby/datasets/fed_heart_disease/dataset.py`` of FLamby (Ogier du Terrail et al., "FLamby:
Datasets and Benchmarks for Cross-Silo Federated Learning in Realistic Healthcare Settings", NeurIPS 2022
Datasets and Benchmarks), re-implemented here with numpy:

1. read ``processed.{cleveland,hungarian,switzerland,va}.data`` (14 comma-separated columns, ``?`` = missing);
2. drop columns 10-12 (slope, ca, thal), then every record that still has a missing value, which leaves
   303 / 261 / 46 / 130 records;
3. split each hospital 66 % train / 34 % test with scikit-learn's ``train_test_split(random_state=43,
   shuffle=True)``, stratified on the binary label when both classes have more than two records;
4. one-hot encode chest-pain type (column 2) and resting ECG (column 6) over the levels seen in all four
   hospitals, dropping the first level, and append the dummies after the 8 other features (13 features);
5. label = 1 when ``num > 0`` (disease), else 0;
6. standardise each hospital's train and test records with that hospital's train mean and unbiased standard
   deviation, ``(x - mean) / (std + 1e-9)``.

The split is FLamby's fixed one, so it does not depend on the ``seed`` given to ``load_dataset``.
"""
from __future__ import annotations

import pathlib

import numpy as np

from privsilo.simulator.data.types import Dataset, missing_data_error

CENTERS = ("cleveland", "hungarian", "switzerland", "va")
DROPPED_COLUMNS = (10, 11, 12)
CATEGORICAL_COLUMNS = (2, 6)
TRAIN_FRACTION = 0.66
SPLIT_RANDOM_STATE = 43
STD_EPSILON = 1e-9


def center_file(center: str) -> str:
    """File name of one hospital's processed records."""
    return f"processed.{center}.data"


def read_center_records(*, path: pathlib.Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per hospital, the complete records as (features (n, 10) float64, raw label ``num`` 0-4).

    Columns 10-12 are dropped before incomplete records are removed, as FLamby does.
    """
    missing = [center_file(center) for center in CENTERS if not (path / center_file(center)).is_file()]
    if missing:
        raise missing_data_error(name="heart_disease", directory=path, missing=", ".join(missing))
    records = {}
    for center in CENTERS:
        rows = [line.split(",") for line in (path / center_file(center)).read_text().splitlines() if line.strip()]
        table = np.array([[np.nan if cell.strip() == "?" else float(cell) for cell in row] for row in rows])
        kept = np.delete(table, DROPPED_COLUMNS, axis=1)
        kept = kept[~np.isnan(kept).any(axis=1)]
        records[center] = (kept[:, :-1], kept[:, -1].astype(np.int64))
    return records


def _train_mask(binary_labels: np.ndarray) -> np.ndarray:
    """FLamby's per-hospital split: True for the records that go to training."""
    from sklearn.model_selection import train_test_split  # here: importing scikit-learn takes seconds

    levels, counts = np.unique(binary_labels, return_counts=True)
    stratify = binary_labels if len(levels) > 1 and (counts > 2).all() else None
    positions = np.arange(len(binary_labels))
    _, test_positions = train_test_split(positions, test_size=1.0 - TRAIN_FRACTION, train_size=TRAIN_FRACTION,
                                         random_state=SPLIT_RANDOM_STATE, shuffle=True, stratify=stratify)
    mask = np.ones(len(binary_labels), dtype=bool)
    mask[test_positions] = False
    return mask


def _one_hot_categoricals(features: np.ndarray) -> np.ndarray:
    """Non-categorical columns in order, then drop-first dummies of each categorical column (pooled levels)."""
    numeric = np.delete(features, CATEGORICAL_COLUMNS, axis=1)
    dummies = [features[:, [column]] == np.unique(features[:, column])[1:] for column in CATEGORICAL_COLUMNS]
    return np.concatenate([numeric, *dummies], axis=1).astype(np.float64)


def load_heart_disease(*, path: pathlib.Path) -> Dataset:
    """Fed-Heart-Disease: x_train holds the hospitals' train records one hospital after another and
    ``natural_partition`` the index range of each; x_test is the union of the hospitals' test records."""
    records = read_center_records(path=path)
    pooled = _one_hot_categoricals(np.concatenate([records[center][0] for center in CENTERS]))
    sizes = [len(records[center][1]) for center in CENTERS]
    parts = np.split(pooled, np.cumsum(sizes)[:-1])
    x_train, y_train, x_test, y_test, partition = [], [], [], [], []
    offset = 0
    for center, features in zip(CENTERS, parts):
        labels = (records[center][1] > 0).astype(np.int64)
        train = _train_mask(labels)
        mean = features[train].mean(axis=0)
        std = features[train].std(axis=0, ddof=1)
        normalised = ((features - mean) / (std + STD_EPSILON)).astype(np.float32)
        x_train.append(normalised[train])
        y_train.append(labels[train])
        x_test.append(normalised[~train])
        y_test.append(labels[~train])
        partition.append(np.arange(offset, offset + int(train.sum()), dtype=np.int64))
        offset += int(train.sum())
    return Dataset(name="heart_disease", x_train=np.concatenate(x_train), y_train=np.concatenate(y_train),
                   x_test=np.concatenate(x_test), y_test=np.concatenate(y_test), num_classes=2,
                   feature_shape=(pooled.shape[1],), kind="tabular", natural_partition=tuple(partition))
