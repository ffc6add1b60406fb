"""A silo's per-round work in the private weighting protocol: its users' encrypted weights raised to the round's
exponents and packed, ``K`` values of ``L`` bits to a ciphertext (Kato et al., VLDB 2024, Protocol 1, weighting
step (2)(b), rebuilt for speed; see :mod:`privsilo.protocols.private_weighting`).

For every ciphertext c the silo needs ``prod_k prod_u Enc(w_u)^(e_{u,cK+k} 2^(L k)) = Enc(sum_k 2^(L k) sum_u w_u
e_{u,cK+k})``. Two costs compete, both in multiplications modulo ``n^2``:

* **look-ups**: fixed-base window tables (:class:`~privsilo.protocols.paillier.WindowTable`) give ``g^|e|`` in one
  multiplication per nonzero window digit and no squarings; the tables' bases serve every parameter;
* **packing**: Horner's rule over the slots costs ``L`` squarings per value, whatever the number of users. Tables
  of the shifted bases ``Enc(w_u)^(2^(L k))`` for ``k < shifts`` pack ``shifts`` consecutive slots by look-ups
  alone, so Horner's rule (``acc^(2^(L shifts))``) runs over groups of ``shifts`` slots: with ``shifts = K`` no
  squaring is left, at ``K`` times the memory.

Signs: positive and negative exponents go into two products per group and the negative products are inverted
together (Montgomery's batch inversion), so a small delta's high digits are zero and skipped (an offset making
every exponent positive would fill them). :func:`plan_tables` picks ``shifts`` and the windows that minimise the
set-up plus ``rounds`` rounds of work within a memory budget.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

import gmpy2
import numpy as np
from gmpy2 import mpz

from privsilo.protocols.paillier import WindowTable, batch_invert
from privsilo.protocols.private_weighting.layout import SlotLayout

INVERSION_COST = 4
"""Multiplications per group for the signs: Montgomery's batch inversion (3) and the product with the inverse (1)."""


@dataclass(frozen=True)
class TablePlan:
    """``shifts`` tables per user (bases ``Enc(w_u)^(2^(L k))``, ``k < shifts``), each of ``windows`` windows of
    ``window_bits`` bits; its exponents reach ``2^(windows window_bits) - 1`` in magnitude."""

    shifts: int
    windows: int
    window_bits: int

    def entries(self, users: int) -> int:
        """Ciphertexts held in the tables of ``users`` users."""
        return users * self.shifts * (self.windows << self.window_bits)


def _groups(layout: SlotLayout, length: int, shifts: int) -> list[int]:
    """Groups of ``shifts`` slots in each ciphertext of ``length`` values."""
    return [-(-layout.slots_in(c, length) // shifts) for c in range(layout.ciphertexts(length))]


def horner_squarings(layout: SlotLayout, length: int, shifts: int) -> int:
    """Squarings per round of Horner's rule over the groups of ``shifts`` slots (0 when every ciphertext is one
    group)."""
    return sum(count - 1 for count in _groups(layout, length, shifts)) * shifts * layout.slot_bits


def plan_tables(*, users: int, exponent_bits: int, length: int, layout: SlotLayout, rounds: int, budget: int) -> TablePlan:
    """The plan minimising the multiplications of building the tables plus ``rounds`` rounds (counting every
    window digit as nonzero), with at most ``budget`` table entries in all; if none fits, the smallest plan (one
    table per user of one-bit windows: a power of two per bit)."""
    exponent_bits = max(1, exponent_bits)
    best: tuple[int, TablePlan] | None = None
    for shifts in range(1, min(layout.slots, length) + 1):
        squarings = horner_squarings(layout, length, shifts)
        signs = INVERSION_COST * sum(_groups(layout, length, shifts))
        for windows in range(1, exponent_bits + 1):
            plan = TablePlan(shifts=shifts, windows=windows, window_bits=-(-exponent_bits // windows))
            if plan.entries(users) > budget:
                continue
            build = plan.entries(users) + users * (shifts - 1) * layout.slot_bits
            cost = build + rounds * (users * length * windows + squarings + signs)
            if best is None or cost < best[0]:
                best = (cost, plan)
    return best[1] if best else TablePlan(shifts=1, windows=exponent_bits, window_bits=1)


def _rebuilt_powers(weights: Mapping[int, mpz], plan: TablePlan, layout: SlotLayout, modulus: mpz) -> "WeightPowers":
    return WeightPowers(weights, plan=plan, layout=layout, modulus=modulus)


class WeightPowers:
    """A silo's tables for its users' encrypted weights ``Enc(w_u)`` (modulo ``n^2``), built once at set-up."""

    def __init__(self, weights: Mapping[int, mpz], *, plan: TablePlan, layout: SlotLayout, modulus: mpz) -> None:
        self.plan, self.layout, self.modulus = plan, layout, modulus
        tables = {}
        for user, weight in weights.items():
            shifted, base = [], mpz(weight) % modulus
            for k in range(plan.shifts):
                if k:
                    base = gmpy2.powmod(base, mpz(1) << layout.slot_bits, modulus)
                shifted.append(WindowTable.build(base, window_bits=plan.window_bits, windows=plan.windows, modulus=modulus))
            tables[user] = tuple(shifted)
        self._tables: Mapping[int, tuple[WindowTable, ...]] = MappingProxyType(tables)
        self.users = frozenset(tables)

    def encrypted_weight(self, user: int) -> mpz:
        """``Enc(w_u)``, the base of the user's first table."""
        return self._tables[user][0].rows[0][1]

    def __reduce__(self) -> tuple:
        # Pickled (a silo's snapshot) as the encrypted weights and the plan: the tables, up to hundreds of MB, are
        # a function of them and are built again when the snapshot is loaded.
        weights = {user: self.encrypted_weight(user) for user in self.users}
        return _rebuilt_powers, (weights, self.plan, self.layout, self.modulus)

    def packed(self, users: list[int], exponents: np.ndarray, length: int) -> list[mpz]:
        """``Enc(sum_k 2^(L k) sum_u w_u e_{u,cK+k})`` for every ciphertext c, for signed integer ``exponents`` (one
        row per user of ``users``) below ``2^(windows window_bits)`` in magnitude (``ValueError`` otherwise)."""
        plan, layout, modulus = self.plan, self.layout, self.modulus
        magnitudes, signs = np.abs(exponents), np.sign(exponents)
        if magnitudes.size and int(magnitudes.max()) >> (plan.windows * plan.window_bits):
            raise ValueError(f"an exponent of magnitude {int(magnitudes.max())} is beyond the tables' "
                             f"{plan.windows * plan.window_bits} bits")
        mask = (1 << plan.window_bits) - 1
        by_shift: list[list[tuple[tuple[mpz, ...], list[int]]]] = [[] for _ in range(plan.shifts)]
        for user, magnitude, sign in zip(users, magnitudes, signs):
            for window in range(plan.windows):
                digits = (((magnitude >> (window * plan.window_bits)) & mask) * sign).tolist()
                for k, table in enumerate(self._tables[user]):
                    by_shift[k].append((table.rows[window], digits))
        positive, negative, groups = [], [], _groups(layout, length, plan.shifts)
        for c, count in enumerate(groups):
            for group in range(count):
                start = c * layout.slots + group * plan.shifts
                stop = min(start + plan.shifts, c * layout.slots + layout.slots_in(c, length))
                up, down = mpz(1), mpz(1)
                for j in range(start, stop):
                    for powers, digits in by_shift[j - start]:
                        digit = digits[j]
                        if digit > 0:
                            up = up * powers[digit] % modulus
                        elif digit < 0:
                            down = down * powers[-digit] % modulus
                positive.append(up)
                negative.append(down)
        values = [up * inverse % modulus for up, inverse in zip(positive, batch_invert(negative, modulus))]
        shift, ciphertexts, index = mpz(1) << (layout.slot_bits * plan.shifts), [], 0
        for count in groups:  # Horner's rule over each ciphertext's groups, highest first
            accumulator = values[index + count - 1]
            for group in reversed(range(count - 1)):
                accumulator = gmpy2.powmod(accumulator, shift, modulus) * values[index + group] % modulus
            ciphertexts.append(accumulator)
            index += count
        return ciphertexts
