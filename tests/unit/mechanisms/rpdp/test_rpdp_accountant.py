"""rPDP-FL accountant (Lemma 4, Lemma 6, Theorem 1) against Opacus and an independent 50-digit evaluation."""
from __future__ import annotations

import math

import numpy as np
import pytest
from opacus.accountants import RDPAccountant
from opacus.accountants.analysis.rdp import _compute_rdp

from privsilo.mechanisms.accounting import DEFAULT_ORDERS
from privsilo.mechanisms.rpdp import Adversary, Conversion, epsilon, rdp_curve, step_rdp
from tests.support.rpdp_reference import lemma6_epsilon

INTEGER_ORDERS = tuple(order for order in DEFAULT_ORDERS if float(order).is_integer())
RATES = np.array([0.01, 0.03, 0.1, 0.25, 0.5, 0.77, 0.9, 0.99, 1.0])


@pytest.mark.parametrize("sigma", [0.7, 1.0, 2.0, 5.0])
def test_step_rdp_matches_opacus_at_every_default_order(sigma: float) -> None:
    """1e-9 relative; plus 5e-13 absolute because Opacus sums terms near 1 in log space, so its own rounding is
    ~1e-14 / (a - 1) absolute (visible at a = 1.1 when rho is small)."""
    mine = step_rdp(RATES, noise_multiplier=sigma)
    for row, order in enumerate(DEFAULT_ORDERS):
        want = np.array([_compute_rdp(float(q), sigma, order) for q in RATES])
        np.testing.assert_allclose(mine[row], want, rtol=1e-9, atol=5e-13, err_msg=f"order {order}")


@pytest.mark.parametrize(
    ("sigma", "q", "rounds", "local_steps", "delta"),
    [(1.0, 0.01, 20, 5, 1e-3), (1.1, 0.3, 50, 2, 1e-5), (0.8, 0.05, 10, 10, 1e-6), (3.0, 0.9, 5, 3, 1e-4)],
)
def test_full_participation_equals_opacus_rdp_accountant(sigma, q, rounds, local_steps, delta) -> None:
    accountant = RDPAccountant()
    accountant.history = [(sigma, q, rounds * local_steps)]
    want = accountant.get_epsilon(delta)
    got = epsilon(q, noise_multiplier=sigma, rounds=rounds, local_steps=local_steps, client_rate=1.0, delta=delta)
    assert float(got) == pytest.approx(want, rel=1e-9, abs=0)


@pytest.mark.parametrize("conversion", ["opacus", "seed"])
@pytest.mark.parametrize(
    ("sigma", "rounds", "local_steps", "client_rate", "delta"),
    [(1.0, 20, 5, 0.5, 1e-3), (0.8, 30, 3, 0.2, 1e-5), (2.0, 10, 10, 0.9, 1e-4)],
)
def test_third_party_matches_brute_force_lemma6(sigma, rounds, local_steps, client_rate, delta, conversion) -> None:
    rates = np.array([1e-4, 0.004, 0.05, 0.3, 0.8, 1.0])
    got = epsilon(
        rates,
        noise_multiplier=sigma,
        rounds=rounds,
        local_steps=local_steps,
        client_rate=client_rate,
        delta=delta,
        conversion=conversion,
        orders=INTEGER_ORDERS,
    )
    want = [
        lemma6_epsilon(
            q, sigma=sigma, rounds=rounds, local_steps=local_steps, client_rate=client_rate, delta=delta,
            conversion=conversion, orders=INTEGER_ORDERS,
        )
        for q in rates
    ]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)


SETTING = dict(noise_multiplier=1.0, rounds=20, local_steps=5, client_rate=0.5, delta=1e-3)


def test_seed_conversion_is_never_tighter_than_opacus() -> None:
    rates = np.linspace(0.0, 1.0, 41)
    seed = epsilon(rates, **SETTING, conversion=Conversion.SEED)
    tight = epsilon(rates, **SETTING, conversion="opacus")
    assert np.all(seed >= tight)
    assert np.all(seed[1:] > tight[1:])


def test_server_expected_versus_realised_cost() -> None:
    """lambda * T = 10 expected participations: realised k = 10 gives the same epsilon, k = 20 more, k = 0 none.
    The expectation is not a bound: a silo sampled in more than lambda * T rounds spends more than it."""
    rates = np.array([0.01, 0.2, 0.7])
    expected = epsilon(rates, **SETTING, adversary="server")
    realised = epsilon(rates[:, None], **SETTING, adversary=Adversary.SERVER, participations=np.array([0, 10, 20]))
    np.testing.assert_allclose(realised[:, 1], expected, rtol=1e-12)
    assert np.all(realised[:, 2] > expected)
    assert np.all(realised[:, 0] == 0.0)
    # at client_rate = 1 the server's view and the third party's coincide
    full = dict(SETTING, client_rate=1.0)
    np.testing.assert_allclose(epsilon(rates, **full, adversary="server"), epsilon(rates, **full), rtol=1e-12)


def test_rdp_curve_shape_and_server_scaling() -> None:
    rates = np.array([[0.1, 0.2], [0.3, 0.4]])
    curve = rdp_curve(rates, noise_multiplier=1.0, rounds=20, local_steps=5, client_rate=0.5, adversary="server")
    assert curve.shape == (len(DEFAULT_ORDERS), 2, 2)
    np.testing.assert_allclose(curve, 0.5 * 20 * 5 * step_rdp(rates, noise_multiplier=1.0), rtol=1e-12)


@pytest.mark.parametrize("adversary", ["third_party", "server"])
@pytest.mark.parametrize(("sigma", "client_rate", "delta"), [(0.6, 0.3, 1e-5), (1.0, 0.5, 1e-3), (4.0, 1.0, 1e-4)])
def test_epsilon_is_non_decreasing_in_q(adversary, sigma, client_rate, delta) -> None:
    rates = np.concatenate([[0.0], np.geomspace(1e-6, 1.0, 300)])
    eps = epsilon(rates, noise_multiplier=sigma, rounds=20, local_steps=5, client_rate=client_rate, delta=delta,
                  adversary=adversary)
    assert eps.shape == rates.shape
    assert np.all(np.diff(eps) >= 0.0)


def test_zero_rate_costs_nothing_and_shape_is_kept() -> None:
    assert epsilon(0.0, **SETTING) == 0.0
    assert epsilon(np.zeros((2, 3)), **SETTING).shape == (2, 3)


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"adversary": "curious"}, "adversary"),
        ({"conversion": "renyi"}, "conversion"),
        ({"client_rate": 0.0}, "client_rate"),
        ({"delta": 1.0}, "delta"),
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"rounds": 0}, "rounds"),
        ({"local_steps": 2.5}, "local_steps"),
        ({"participations": 3}, "participations"),
        ({"adversary": "server", "participations": 21}, "participations"),
    ],
)
def test_invalid_arguments_name_the_argument(change, name) -> None:
    with pytest.raises(ValueError, match=name):
        epsilon(0.1, **{**SETTING, **change})


@pytest.mark.parametrize("q", [-0.1, 1.5, math.nan])
def test_invalid_rates_raise(q) -> None:
    with pytest.raises(ValueError, match="q must lie"):
        epsilon(np.array([0.2, q]), **SETTING)
