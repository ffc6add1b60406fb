"""ULDP-FL user-level accounting: the paper's numbers, group privacy with safe rounding, Google's dp_accounting."""
from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest

from privsilo.mechanisms.accounting import DEFAULT_ORDERS
from privsilo.mechanisms.events import GroupDpSgdEvent, UserLevelGaussianEvent
from privsilo.mechanisms.uldp import UldpAccountant, epsilon, group_epsilon, group_exponent


def test_one_round_without_sampling_matches_the_papers_code() -> None:
    value = epsilon(variant="avg", noise_multiplier=5.0, rounds=1, delta=1e-5)
    assert value == pytest.approx(0.794522032537103, rel=1e-12)


@pytest.mark.parametrize(("rounds", "expected"), [(50, 7.08), (100, 10.73), (200, 16.51)])
def test_rounds(rounds: int, expected: float) -> None:
    for variant in ("naive", "avg", "avg_w", "sgd"):
        assert epsilon(variant=variant, noise_multiplier=5.0, rounds=rounds, delta=1e-5) == pytest.approx(expected, abs=0.005)


@pytest.mark.parametrize(("user_rate", "expected"), [(0.1, 0.835), (0.3, 2.76), (0.5, 4.86), (0.7, 7.11)])
def test_user_sub_sampling(user_rate: float, expected: float) -> None:
    value = epsilon(variant="avg", noise_multiplier=5.0, rounds=100, delta=1e-5, user_rate=user_rate)
    assert value == pytest.approx(expected, abs=0.005)


def _google_rdp(q: float, sigma: float, steps: int, orders) -> np.ndarray:
    accountant = dp_accounting.rdp.RdpAccountant(orders=list(orders))
    accountant.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    return np.asarray(accountant._rdp)  # the composed RDP curve at ``orders``


@pytest.mark.parametrize(("user_rate", "rounds"), [(1.0, 1), (1.0, 100), (0.3, 100), (0.05, 500)])
def test_user_level_agrees_with_google_dp_accounting(user_rate: float, rounds: int) -> None:
    """Over integer orders both libraries compute the same RDP (Mironov et al. 2019, Sec. 3.2) and the same
    conversion (Balle et al. 2020, Thm. 21): epsilon agrees to 1e-9."""
    integer_orders = [o for o in DEFAULT_ORDERS if float(o).is_integer()]
    google = dp_accounting.rdp.RdpAccountant(orders=integer_orders)
    event = dp_accounting.PoissonSampledDpEvent(user_rate, dp_accounting.GaussianDpEvent(5.0))
    google.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
    ours = epsilon(variant="sgd", noise_multiplier=5.0, rounds=rounds, delta=1e-5, user_rate=user_rate)
    want = google.get_epsilon(1e-5)
    assert ours <= want * (1 + 1e-9)  # our default orders include the integer ones
    assert ours == pytest.approx(want, rel=2e-2)


# Mironov Prop. 2 with k = 2^c: (alpha, rho) -> (alpha / 2^c, 3^c rho), alpha >= 2^(c+1). At sigma = 5, q = 0.01,
# 10^5 steps, delta = 1e-5 (the paper's Figure 2 setting).
FIGURE_2 = dict(sampling_rate=0.01, noise_multiplier=5.0, rounds=100_000, local_steps=1, delta=1e-5)


def test_group_of_one_is_record_level_dp_sgd() -> None:
    assert epsilon(variant="group", group_k=1, **FIGURE_2) == pytest.approx(2.8492070372513036, rel=1e-9)


def test_group_paper_mode_reproduces_the_papers_figure() -> None:
    """The paper's code gives about 2,150 for k = 32; it minimises over base orders below 2^(c+1) too."""
    value = epsilon(variant="group", group_k=32, group_rounding="paper", **FIGURE_2)
    assert value == pytest.approx(2152.0, rel=1e-3)


def test_group_safe_mode_uses_only_orders_prop_2_allows() -> None:
    """Safe value at k = 32: user-level orders beta >= 2 (alpha = 32 beta >= 64), checked against dp_accounting's
    RDP of the subsampled Gaussian at the record-level orders and the Lemma 2 conversion done by hand."""
    betas = np.array([b for b in DEFAULT_ORDERS if b >= 2 and float(b).is_integer()], dtype=float)
    rdp = 3.0**5 * _google_rdp(0.01, 5.0, 100_000, betas * 32)
    by_hand = np.min(rdp + np.log((betas - 1) / betas) - (np.log(1e-5) + np.log(betas)) / (betas - 1))
    value = epsilon(variant="group", group_k=32, **FIGURE_2)
    assert value <= by_hand * (1 + 1e-9)
    assert value == pytest.approx(by_hand, rel=1e-3)
    assert value == pytest.approx(3266.97, rel=1e-5)  # the README's figure; its optimum is beta = 2, Prop. 2's limit
    assert value > epsilon(variant="group", group_k=32, group_rounding="paper", **FIGURE_2)


def test_group_epsilon_grows_with_k_from_2_85() -> None:
    values = [epsilon(variant="group", group_k=k, **FIGURE_2) for k in (1, 2, 4, 8, 16, 32, 64)]
    assert values[0] == pytest.approx(2.85, abs=0.005)
    assert all(a < b for a, b in zip(values, values[1:]))
    assert values[5] > 2000


@pytest.mark.parametrize(("k", "up", "paper"), [(1, 0, 0), (2, 1, 1), (3, 2, 1), (5, 3, 2), (8, 3, 3), (9, 4, 3)])
def test_group_rounding(k: int, up: int, paper: int) -> None:
    assert group_exponent(k, "up") == up
    assert group_exponent(k, "paper") == paper


def test_group_k_not_a_power_of_two_is_rounded_up() -> None:
    three = epsilon(variant="group", group_k=3, **FIGURE_2)
    assert three == epsilon(variant="group", group_k=4, **FIGURE_2)
    assert three > epsilon(variant="group", group_k=3, group_rounding="paper", **FIGURE_2)


def test_group_takes_the_worst_silo() -> None:
    low, high = [(0.01, 5.0, 1000)], [(0.05, 5.0, 1000)]
    both = group_epsilon([low, high], group_k=4, delta=1e-5)
    assert both == group_epsilon([high], group_k=4, delta=1e-5)
    assert both > group_epsilon([low], group_k=4, delta=1e-5)


def test_accountant_counts_each_round_once_across_silos() -> None:
    accountant = UldpAccountant(variant="avg_w", delta=1e-5)
    for round_index in range(50):
        for silo in range(4):
            accountant.record(silo, UserLevelGaussianEvent(round_index=round_index, user_rate=0.5, noise_multiplier=5.0, users_sampled=20))
    report = accountant.report()
    assert report["epsilon"] == epsilon(variant="avg_w", noise_multiplier=5.0, rounds=50, delta=1e-5, user_rate=0.5)
    assert report["rounds_accounted"] == 50


def test_report_does_not_publish_the_user_sample_sizes() -> None:
    """The amplified epsilon assumes the third party does not learn the sample; its per-round sizes would
    condition it (the RDP averaged over the realised sizes is higher than the one reported)."""
    accountant = UldpAccountant(variant="avg_w", delta=1e-5)
    for round_index, sampled in enumerate((17, 23, 20)):
        accountant.record(0, UserLevelGaussianEvent(round_index=round_index, user_rate=0.1, noise_multiplier=2.0, users_sampled=sampled))
    report = accountant.report()
    assert not any("sampled" in key and "without" not in key for key in report)
    assert not any(isinstance(value, list) for value in report.values())


def test_accountant_rejects_silos_that_disagree() -> None:
    accountant = UldpAccountant(variant="avg", delta=1e-5)
    accountant.record(0, UserLevelGaussianEvent(round_index=0, user_rate=1.0, noise_multiplier=5.0, users_sampled=10))
    with pytest.raises(ValueError, match="disagree"):
        accountant.record(1, UserLevelGaussianEvent(round_index=0, user_rate=1.0, noise_multiplier=4.0, users_sampled=10))


def test_group_accountant_equals_epsilon_function() -> None:
    accountant = UldpAccountant(variant="group", delta=1e-5)
    for round_index in range(10):
        accountant.record(0, GroupDpSgdEvent(round_index=round_index, sampling_rate=0.2, noise_multiplier=1.5, steps=5, group_k=3))
        accountant.record(1, GroupDpSgdEvent(round_index=round_index, sampling_rate=0.4, noise_multiplier=1.5, steps=5, group_k=3))
    report = accountant.report()
    want = epsilon(variant="group", noise_multiplier=1.5, rounds=10, delta=1e-5, group_k=3, sampling_rate=0.4, local_steps=5)
    assert report["epsilon"] == pytest.approx(want, rel=1e-12)
    assert report["group_k"] == 3 and report["group_size_accounted"] == 4


def test_zero_noise_gives_no_guarantee() -> None:
    assert epsilon(variant="naive", noise_multiplier=0.0, rounds=3, delta=1e-5) == math.inf


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(user_rate=0.0),
        dict(user_rate=1.5),
        dict(noise_multiplier=-1.0),
        dict(delta=0.0),
        dict(variant="group", group_k=0, sampling_rate=0.1, local_steps=1),
        dict(variant="group", group_k=2, sampling_rate=0.1, local_steps=1, user_rate=0.5),
        dict(variant="nope"),
    ],
)
def test_bad_arguments(kwargs: dict) -> None:
    settings = dict(variant="avg", noise_multiplier=5.0, rounds=10, delta=1e-5) | kwargs
    with pytest.raises(ValueError):
        epsilon(**settings)


def test_group_accountant_merges_rounds_so_reports_stay_cheap() -> None:
    accountant = UldpAccountant(variant="group", delta=1e-5)
    for round_index in range(100):
        accountant.record(2, GroupDpSgdEvent(round_index=round_index, sampling_rate=0.1, noise_multiplier=5.0, steps=50, group_k=6))
    assert accountant._silo_schedules == {2: [(0.1, 5.0, 5000)]}
    want = epsilon(variant="group", noise_multiplier=5.0, rounds=100, delta=1e-5, group_k=6, sampling_rate=0.1, local_steps=50)
    assert accountant.report()["epsilon"] == pytest.approx(want, rel=1e-12)
