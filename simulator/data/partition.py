"""Split a training set among silos; every training index goes to exactly one silo.

Schemes:

* ``iid``: a random permutation cut into ``num_silos`` near-equal parts.
* ``shards``: the pathological non-IID split of McMahan et al. 2017 ("Communication-Efficient Learning of Deep
  Networks from Decentralized Data", AISTATS, Sec. 3): sort the records by label, cut them into
  ``num_silos * shards_per_silo`` contiguous shards and give each silo ``shards_per_silo`` shards at random.
* ``dirichlet``: for every class, draw silo proportions from Dirichlet(alpha, ..., alpha) and deal that class's
  records out accordingly (Hsu et al. 2019, "Measuring the Effects of Non-Identical Data Distribution for
  Federated Visual Classification"). Small alpha gives skewed label mixes. When a silo ends up empty, it takes
  one random record from the currently largest silo, repeated until no silo is empty, so the result never
  contains an empty silo (it needs at least ``num_silos`` records).
* ``natural``: the silos the data came from (e.g. the four hospitals of Heart Disease), given as ``natural``.
"""
from __future__ import annotations

import numpy as np

PARTITIONS = ("iid", "shards", "dirichlet", "natural")


def partition_indices(labels: np.ndarray, *, scheme: str, num_silos: int, rng: np.random.Generator,
                      alpha: float | None = None, shards_per_silo: int = 2,
                      natural: tuple[np.ndarray, ...] | None = None) -> list[np.ndarray]:
    """Indices into ``labels`` for each of ``num_silos`` silos (int64 arrays), deterministic given ``rng``.

    ``alpha`` is required for ``dirichlet``, ``natural`` for ``natural``. Raises ValueError on an unknown
    scheme, too few records for the silos or a natural partition that does not fit.
    """
    labels = np.asarray(labels)
    if scheme not in PARTITIONS:
        raise ValueError(f"unknown partition scheme {scheme!r}; choose one of {', '.join(PARTITIONS)}")
    if num_silos < 1:
        raise ValueError(f"num_silos must be at least 1, got {num_silos}")
    if scheme == "natural":
        return _natural(num_records=len(labels), num_silos=num_silos, natural=natural)
    if len(labels) < num_silos:
        raise ValueError(f"cannot split {len(labels)} records among {num_silos} silos")
    if scheme == "iid":
        return [part.astype(np.int64) for part in np.array_split(rng.permutation(len(labels)), num_silos)]
    if scheme == "shards":
        return _shards(labels, num_silos=num_silos, shards_per_silo=shards_per_silo, rng=rng)
    if alpha is None or alpha <= 0:
        raise ValueError(f"the dirichlet partition needs alpha > 0, got {alpha!r}")
    return _dirichlet(labels, num_silos=num_silos, alpha=alpha, rng=rng)


def _shards(labels: np.ndarray, *, num_silos: int, shards_per_silo: int,
            rng: np.random.Generator) -> list[np.ndarray]:
    num_shards = num_silos * shards_per_silo
    if shards_per_silo < 1 or len(labels) < num_shards:
        raise ValueError(f"cannot cut {len(labels)} records into {num_silos} x {shards_per_silo} shards")
    shuffled = rng.permutation(len(labels))
    by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
    shards = np.array_split(by_label, num_shards)
    owners = rng.permutation(num_shards).reshape(num_silos, shards_per_silo)
    return [np.concatenate([shards[shard] for shard in row]).astype(np.int64) for row in owners]


def _dirichlet(labels: np.ndarray, *, num_silos: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    silos: list[list[int]] = [[] for _ in range(num_silos)]
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        proportions = rng.dirichlet(np.full(num_silos, alpha))
        cuts = (np.cumsum(proportions)[:-1] * len(members)).astype(np.int64)
        for silo, part in zip(silos, np.split(members, cuts)):
            silo.extend(part.tolist())
    for empty in [silo for silo in silos if not silo]:
        donor = max(silos, key=len)
        empty.append(donor.pop(int(rng.integers(len(donor)))))
    return [np.array(silo, dtype=np.int64) for silo in silos]


def _natural(*, num_records: int, num_silos: int, natural: tuple[np.ndarray, ...] | None) -> list[np.ndarray]:
    if natural is None:
        raise ValueError("the natural partition needs a dataset with natural silos (e.g. heart_disease)")
    if len(natural) != num_silos:
        raise ValueError(f"the natural partition has {len(natural)} silos but num_silos is {num_silos}; "
                         f"set num_silos to {len(natural)}")
    used = np.sort(np.concatenate(natural)) if natural else np.array([], dtype=np.int64)
    if not np.array_equal(used, np.arange(num_records)):
        raise ValueError(f"the natural partition does not use each of the {num_records} records exactly once")
    return [np.asarray(part, dtype=np.int64).copy() for part in natural]
