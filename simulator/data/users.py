"""Users who own records across silos (the data model of ULDP-FL, Kato et al., VLDB 2024, Sec. 5.1).

Every training record gets an owner, a user id in ``0..count-1`` shared by all silos (the same person). Two
draws, as in the paper's experiments:

* records -> users (``records``): ``uniform`` (every user equally likely) or ``zipf`` (user ``i = 1..count``
  with probability proportional to ``i^-0.5``);
* a user's records -> silos (``silos``): ``uniform`` (every silo equally likely) or ``zipf`` (per user, a
  random ranking of the silos; the silo at rank ``r = 1..|S|`` with probability proportional to ``r^-2``).

Without a natural partition the silos come from the second draw (``data.partition`` must stay ``iid``, its
default, and is not used). With ``partition: natural`` (heart_disease's four hospitals) every record keeps its
hospital and only its owner is drawn, from the same model conditioned on the hospital: a record of hospital
``h`` belongs to user ``u`` with probability proportional to ``p_records(u) * p_silos(h | u)``, so the
hospitals' sizes stay FLamby's and a user's records still concentrate on the user's top-ranked hospitals.

A user who got no record is dropped (counted in ``summary()``); ids stay as drawn, so ids can have gaps.
All draws come from the generator passed in (the engine gives this draw its own seed stream).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

RECORDS_EXPONENT = 0.5  # records -> users: p(i) ~ i^-0.5
SILOS_EXPONENT = 2.0  # a user's records -> silos: p(rank) ~ rank^-2
USERS_SPAWN_KEY = 2**32 - 1  # the users' seed stream: a SeedSequence child no other stream uses


class Allocation(str, enum.Enum):
    UNIFORM = "uniform"
    ZIPF = "zipf"


@dataclass(frozen=True, eq=False)
class UserAllocation:
    """Per silo, the training indices of its records and the user id of each (aligned arrays)."""

    silo_indices: tuple[np.ndarray, ...]
    silo_user_ids: tuple[np.ndarray, ...]
    count: int

    def histogram(self) -> np.ndarray:
        """``(silos, count)`` matrix of records per silo and user (``n_{s,u}`` of Eq. 3)."""
        return np.stack([np.bincount(ids, minlength=self.count) for ids in self.silo_user_ids])

    def summary(self) -> dict[str, object]:
        """The JSON-ready description written to summary.json."""
        hist = self.histogram()
        per_user = hist.sum(axis=0)
        present = per_user[per_user > 0]
        return {
            "count": self.count,
            "users_with_records": int(present.size),
            "dropped_users": int(self.count - present.size),
            "users_per_silo": [int(n) for n in (hist > 0).sum(axis=1)],
            "records_per_user": {"min": int(present.min()), "median": float(np.median(present)), "max": int(present.max())},
            "silos_per_user": {"min": int((hist > 0).sum(axis=0)[per_user > 0].min()), "max": int((hist > 0).sum(axis=0).max())},
        }


def users_generator(seed: int) -> np.random.Generator:
    """The generator of the user allocation: its own child of the run's root seed, independent of the streams of
    partition, initialisation, server and silos (which therefore draw exactly what they drew without users)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(USERS_SPAWN_KEY,)))


def _power_weights(n: int, exponent: float) -> np.ndarray:
    weights = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return weights / weights.sum()


def _user_weights(count: int, records: Allocation) -> np.ndarray:
    return _power_weights(count, RECORDS_EXPONENT) if records is Allocation.ZIPF else np.full(count, 1.0 / count)


def _silo_preferences(count: int, num_silos: int, silos: Allocation, rng: np.random.Generator) -> np.ndarray:
    """``(count, num_silos)``: row u = p_silos(. | u)."""
    if silos is Allocation.UNIFORM:
        return np.full((count, num_silos), 1.0 / num_silos)
    by_rank = _power_weights(num_silos, SILOS_EXPONENT)
    ranking = np.argsort(rng.random((count, num_silos)), axis=1)  # ranking[u, r] = silo at rank r + 1
    prefs = np.empty((count, num_silos))
    np.put_along_axis(prefs, ranking, np.broadcast_to(by_rank, (count, num_silos)), axis=1)
    return prefs


def _draw_rows(probabilities: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One categorical draw per row of ``probabilities`` (inverse CDF, one uniform per row)."""
    cdf = np.cumsum(probabilities, axis=1)
    cdf /= cdf[:, -1:]
    return np.minimum((cdf < rng.random((len(cdf), 1))).sum(axis=1), probabilities.shape[1] - 1)


def allocate_users(
    num_records: int,
    *,
    count: int,
    records: Allocation | str,
    silos: Allocation | str,
    num_silos: int,
    rng: np.random.Generator,
    natural: tuple[np.ndarray, ...] | None = None,
) -> UserAllocation:
    """Give every training record an owner and (unless ``natural`` silos are given) a silo. ValueError when the
    allocation cannot work (more users than records, a silo left empty)."""
    records, silos = Allocation(records), Allocation(silos)
    if count < 1 or count > num_records:
        raise ValueError(f"needs 1 <= users <= {num_records} records")
    user_weights = _user_weights(count, records)
    prefs = _silo_preferences(count, num_silos, silos, rng)
    if natural is None:
        owner = rng.choice(count, size=num_records, p=user_weights)
        silo_of = _draw_rows(prefs[owner], rng)
        parts = [np.flatnonzero(silo_of == s).astype(np.int64) for s in range(num_silos)]
    else:
        if len(natural) != num_silos:
            raise ValueError(f"the natural partition has {len(natural)} silos, not {num_silos}")
        parts = [np.asarray(part, dtype=np.int64) for part in natural]
        owner = np.empty(num_records, dtype=np.int64)
        for s, part in enumerate(parts):
            joint = user_weights * prefs[:, s]
            owner[part] = rng.choice(count, size=len(part), p=joint / joint.sum())
    empty = [s for s, part in enumerate(parts) if len(part) == 0]
    if empty:
        raise ValueError(f"silo(s) {empty} got no records; use fewer silos or another allocation")
    return UserAllocation(silo_indices=tuple(parts), silo_user_ids=tuple(owner[part] for part in parts), count=count)
