"""Per-client safe-range lengths, centres and budgets of PLDP-FL (Shen et al., Entropy 2023, Sec. 6.1.3).

A setting is given in the scenario as one of

* the name of one of the paper's settings: ranges ``tau1`` / ``tau2`` / ``tau3``, budgets ``eps1`` / ``eps2`` /
  ``eps3``; client i takes level ``i mod len(levels)`` of the setting (the paper writes tau1 = {0.2, 0.4, ...,
  0.2, 0.4}, tau2 = {0.2, 0.4, ..., 1.8, 2.0, 0.2, ...}: the levels in turn);
* one number, the same for every client;
* a list with one entry per client (its length must be the number of clients, ``data.silos``).
"""
from __future__ import annotations

import math
from numbers import Real
from typing import Any, Mapping

PAPER_RANGES: Mapping[str, tuple[float, ...]] = {
    "tau1": (0.2, 0.4),
    "tau2": tuple(round(0.2 * i, 1) for i in range(1, 11)),  # 0.2, 0.4, ..., 2.0
    "tau3": (1.8, 2.0),
}
PAPER_BUDGETS: Mapping[str, tuple[float, ...]] = {
    "eps1": (0.1, 0.2),
    "eps2": tuple(round(0.1 * i, 1) for i in range(1, 11)),  # 0.1, 0.2, ..., 1.0
    "eps3": (0.9, 1.0),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def check_setting(value: Any, *, names: Mapping[str, tuple[float, ...]], what: str, positive: bool) -> Any:
    """Validate one setting (a name of ``names``, a number or a list of numbers); raise ValueError naming what
    is allowed. ``positive``: every number must be > 0 (lengths, budgets); otherwise any finite number (centres)."""
    bound = "finite and > 0" if positive else "finite"
    allowed = (f"one of {', '.join(names)} (the paper's settings), " if names else "") + (
        f"a number ({bound}) for every client, or a list of them with one {what} per client"
    )

    def ok(number: Any) -> bool:
        return _is_number(number) and math.isfinite(number) and (number > 0 or not positive)

    if isinstance(value, str):
        if value not in names:
            raise ValueError(f"must be {allowed}")
        return value
    if _is_number(value):
        if not ok(value):
            raise ValueError(f"must be {allowed}")
        return float(value)
    if isinstance(value, (list, tuple)):
        bad = [i for i, number in enumerate(value) if not ok(number)]
        if not value or bad:
            where = f" (entry {bad[0]} is {value[bad[0]]!r})" if bad else " (the list is empty)"
            raise ValueError(f"must be {allowed}{where}")
        return [float(number) for number in value]
    raise ValueError(f"must be {allowed}")


def check_client_count(value: Any, *, num_clients: int, what: str) -> None:
    """A per-client list must have exactly one entry per client; raise ValueError otherwise."""
    if isinstance(value, list) and len(value) != num_clients:
        raise ValueError(f"has {len(value)} {what}s but the federation has {num_clients} clients (data.silos): one {what} per client")


def client_value(value: Any, *, names: Mapping[str, tuple[float, ...]], client: int) -> float:
    """The setting's value for client (silo) id ``client``: named settings cycle through their levels, lists are
    indexed (their length was checked against the clients by :func:`check_client_count`)."""
    if isinstance(value, str):
        levels = names[value]
        return float(levels[client % len(levels)])
    if isinstance(value, (list, tuple)):
        return float(value[client])
    return float(value)
