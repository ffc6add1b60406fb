"""The silo's table look-ups of the private weighting protocol (protocols/private_weighting/tables.py): every table
plan packs exactly sum_k 2^(L k) sum_u w_u e_{u,cK+k} (decrypted with the key), and the planner's choices."""
from __future__ import annotations

import numpy as np
import pytest
from gmpy2 import mpz

from privsilo.protocols.crypto_random import seeded_for_tests
from privsilo.protocols.paillier import PaillierKeyPair
from privsilo.protocols.private_weighting.layout import SlotLayout
from privsilo.protocols.private_weighting.tables import TablePlan, WeightPowers, horner_squarings, plan_tables
from tests.support.paillier_keys import TEST_P, TEST_Q

LAYOUT = SlotLayout(slot_bits=48, slots=7)  # 336 bits of a 1,024-bit test key
LENGTH = 17  # three ciphertexts, the last holding 3 values


def _key() -> PaillierKeyPair:
    return PaillierKeyPair(TEST_P, TEST_Q, insecure_test_key=True, random=seeded_for_tests(3))


@pytest.mark.parametrize("plan", [
    TablePlan(shifts=1, windows=1, window_bits=12),  # Horner's rule over every slot
    TablePlan(shifts=7, windows=3, window_bits=4),  # a table per slot: no squarings
    TablePlan(shifts=3, windows=2, window_bits=6),  # groups of 3 slots (uneven: 7 = 3 + 3 + 1)
])
def test_every_plan_packs_the_exact_signed_weighted_sum(plan: TablePlan) -> None:
    key = _key()
    n, modulus = int(key.public.n), key.public.n_square
    rng = np.random.default_rng(5)
    weights = {2: 3_000_017, 5: 1, 9: 2**31 + 11}
    ciphertexts = {user: key.encrypt(w) for user, w in weights.items()}
    powers = WeightPowers(ciphertexts, plan=plan, layout=LAYOUT, modulus=modulus)
    limit = 1 << (plan.windows * plan.window_bits)
    users = [9, 2, 5]
    exponents = rng.integers(-limit + 1, limit, size=(len(users), LENGTH))
    exponents[:, 4] = 0  # a parameter nobody moved
    exponents[1, 5:9] = [limit - 1, -(limit - 1), 1, -1]  # the extremes
    packed = powers.packed(users, exponents, LENGTH)
    assert len(packed) == LAYOUT.ciphertexts(LENGTH) == 3
    sums = [sum(weights[u] * int(e) for u, e in zip(users, exponents[:, j])) for j in range(LENGTH)]
    for c, ciphertext in enumerate(packed):
        chunk = sums[c * LAYOUT.slots:(c + 1) * LAYOUT.slots]
        expected = sum(value << (k * LAYOUT.slot_bits) for k, value in enumerate(chunk)) % n
        assert key.decrypt(ciphertext) == expected
    assert powers.packed([], np.zeros((0, LENGTH), dtype=np.int64), LENGTH) == [mpz(1)] * 3
    assert key.decrypt(powers.encrypted_weight(9)) == weights[9]
    with pytest.raises(ValueError, match="beyond the tables"):
        powers.packed(users, np.where(exponents == limit - 1, limit, exponents), LENGTH)


def test_the_planner_drops_horners_rule_when_tables_pay_for_themselves() -> None:
    layout = SlotLayout(slot_bits=96, slots=31)  # 3,072-bit keys
    budget = 1 << 19
    small = plan_tables(users=10, exponent_bits=25, length=107, layout=layout, rounds=50, budget=budget)
    assert small.shifts == 31 and small.entries(10) <= budget  # the paper's small model: no squarings per round
    assert horner_squarings(layout, 107, small.shifts) == 0
    assert horner_squarings(layout, 21_840, 1) == (704 * 30 + 15) * 96  # 704 full ciphertexts and one of 16 slots
    one_round = plan_tables(users=10, exponent_bits=25, length=107, layout=layout, rounds=1, budget=budget)
    assert one_round.entries(10) < small.entries(10)  # building big tables for one round does not pay
    cnn = plan_tables(users=100, exponent_bits=21, length=21_840, layout=layout, rounds=50, budget=budget)
    assert (cnn.shifts, cnn.windows, cnn.window_bits) == (1, 2, 11) and cnn.entries(100) <= budget  # no room to shift
    for users, bits, rounds in [(1, 1, 1), (3, 0, 5), (40, 33, 7), (10, 25, 50)]:  # exponents of b bits always fit
        plan = plan_tables(users=users, exponent_bits=bits, length=23, layout=layout, rounds=rounds, budget=budget)
        assert plan.windows * plan.window_bits >= bits and plan.entries(users) <= budget
    assert plan_tables(users=10_000, exponent_bits=25, length=107, layout=layout, rounds=1, budget=1_000) == TablePlan(
        shifts=1, windows=25, window_bits=1)  # beyond the budget: the smallest tables rather than no run


def test_a_snapshot_carries_the_weights_not_the_tables() -> None:
    """A silo's snapshot pickles its encrypted weights and plan; the tables (up to hundreds of MB) are built again
    from them and pack exactly what the original tables packed."""
    import pickle

    key = _key()
    plan = TablePlan(shifts=3, windows=2, window_bits=6)
    powers = WeightPowers({u: key.encrypt(w) for u, w in {1: 7, 4: 123_456}.items()}, plan=plan, layout=LAYOUT,
                          modulus=key.public.n_square)
    blob = pickle.dumps(powers)
    copy = pickle.loads(blob)
    exponents = np.random.default_rng(2).integers(-4000, 4000, size=(2, LENGTH))
    assert copy.packed([4, 1], exponents, LENGTH) == powers.packed([4, 1], exponents, LENGTH)
    table_entries = sum(len(row) for tables in powers._tables.values() for table in tables for row in table.rows)
    assert len(blob) < table_entries * key.public.n_square.bit_length() // 8 // 4
