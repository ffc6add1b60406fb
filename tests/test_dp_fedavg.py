"""``dp_fedavg`` (client-level DP-FedAvg): its accountant against Google's dp_accounting (RDP and PLD) and Opacus,
the silo's clipping, the server's noise and divisor, and a run through real Ray actors."""
from __future__ import annotations

import json
import logging

import dp_accounting
import numpy as np
import pytest
from opacus.accountants import RDPAccountant as OpacusRdp

from mechanisms.dp_fedavg.accountant import ClientLevelAccountant
from mechanisms.dp_fedavg.mechanism import DpFedAvgServer, clip_to_norm
from mechanisms.dp_fedavg.params import DpFedAvgParams
from mechanisms.events import ClientLevelGaussianEvent
from mechanisms.rdp import DEFAULT_ORDERS
from simulator.engine import run

DELTA = 1e-5
SETTINGS = [(1.0, 1.0, 10), (0.5, 1.0, 30), (0.1, 0.8, 200), (0.01, 1.2, 1000)]  # (q, z, rounds)


def _accountant(q: float, z: float, rounds: int, *, accountant: str = "rdp", silos: int = 3) -> ClientLevelAccountant:
    account = ClientLevelAccountant(delta=DELTA, accountant=accountant)
    for round_index in range(rounds):
        for silo in range(silos):  # every uploading silo reports the round; it counts once
            account.record(silo, ClientLevelGaussianEvent(round_index=round_index, sampling_rate=q, noise_multiplier=z))
    return account


def _google(q: float, z: float, rounds: int, accountant) -> float:
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z))
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
    return accountant.get_epsilon(DELTA)


@pytest.mark.parametrize(("q", "z", "rounds"), SETTINGS)
def test_rdp_epsilon_against_dp_accounting_and_opacus(q, z, rounds, caplog) -> None:
    """Never below dp_accounting's PLD (the tightest of the references), within 2 % of its RDP, equal to Opacus' RDP
    (same orders, same conversion), and equal to dp_accounting's RDP over the integer orders both evaluate exactly."""
    caplog.set_level(logging.ERROR)  # dp_accounting warns where its fractional-order series gives up
    ours = _accountant(q, z, rounds).report()["epsilon"]
    opacus = OpacusRdp()
    opacus.history = [(z, q, rounds)]
    assert ours == pytest.approx(opacus.get_epsilon(DELTA), rel=1e-9)
    assert ours >= _google(q, z, rounds, dp_accounting.pld.PLDAccountant())
    assert ours == pytest.approx(_google(q, z, rounds, dp_accounting.rdp.RdpAccountant()), rel=0.02)
    integer_orders = [order for order in DEFAULT_ORDERS if float(order).is_integer()]
    assert ours <= _google(q, z, rounds, dp_accounting.rdp.RdpAccountant(orders=integer_orders)) * (1 + 1e-9)


@pytest.mark.parametrize(("q", "z", "rounds"), SETTINGS)
def test_pld_epsilon_never_below_dp_accounting(q, z, rounds) -> None:
    """At q = 1 ours is the exact Gaussian figure (Balle and Wang 2018), which dp_accounting's grid exceeds by 1e-9."""
    report = _accountant(q, z, rounds, accountant="pld").report()
    google = _google(q, z, rounds, dp_accounting.pld.PLDAccountant())
    assert google * (1 - (1e-8 if q == 1.0 else 0.0)) <= report["epsilon"] <= google * 1.01
    assert report["epsilon"] == report["epsilon_pld"] <= report["epsilon_rdp"]


def test_report_is_client_level_and_gives_the_servers_view() -> None:
    report = _accountant(0.5, 1.0, 30).report()
    assert report["guarantee"].startswith("client-level") and report["rounds_accounted"] == 30
    assert report["epsilon_without_sampling"] == pytest.approx(_accountant(1.0, 1.0, 30).report()["epsilon"], rel=1e-12)
    assert "epsilon_without_sampling" not in _accountant(1.0, 1.0, 30).report()


def test_accountant_refuses_disagreeing_silos_and_other_events() -> None:
    account = _accountant(0.5, 1.0, 1)
    with pytest.raises(ValueError, match="disagree"):
        account.record(1, ClientLevelGaussianEvent(round_index=0, sampling_rate=0.5, noise_multiplier=2.0))
    with pytest.raises(TypeError):
        account.record(0, object())
    assert _accountant(1.0, 0.0, 3).report()["epsilon"] is None  # z = 0: no guarantee


def test_clip_to_norm() -> None:
    rng = np.random.default_rng(0)
    for scale in (0.1, 1.0, 10.0):
        vector = rng.standard_normal(50) * scale
        clipped = clip_to_norm(vector, 1.0)
        assert np.linalg.norm(clipped) <= 1.0 + 1e-12
        assert np.allclose(clipped / np.linalg.norm(clipped), vector / np.linalg.norm(vector))
        if np.linalg.norm(vector) <= 1.0:
            assert np.array_equal(clipped, vector)


def test_server_adds_z_c_noise_and_divides_by_q_n() -> None:
    """The noise on the sum has standard deviation z C, and the divisor is q N whatever the realised count."""
    params = DpFedAvgParams(noise_multiplier=2.0, clip_norm=0.5)
    server = DpFedAvgServer(params, num_silos=40)
    d, q, participants = 200_000, 0.25, 7
    server.round_plan(np.random.default_rng(1), round_index=0)
    total = np.concatenate([np.full(d, 3.0), [q * participants]])
    (new,) = server.aggregate((np.zeros(d),), total, num_participants=participants)
    noise = new * (q * 40) - 3.0
    assert abs(noise.mean()) < 5 * 1.0 / np.sqrt(d)
    assert noise.std() == pytest.approx(2.0 * 0.5, rel=0.01)


def test_params_refuse_bad_values() -> None:
    for bad in ({"clip_norm": 0.0}, {"noise_multiplier": -1.0}, {"delta": 1.0}, {"noise": "local"}):
        with pytest.raises(ValueError):
            DpFedAvgParams(**bad)


def test_run_through_ray_reports_the_accountants_epsilon(ray_local, tmp_path) -> None:
    scenario = {
        "name": "dp_fedavg_e2e", "seed": 0,
        "data": {"dataset": "digits", "partition": "iid", "silos": 6},
        "model": {"name": "logistic_regression"},
        "federation": {"rounds": 3, "client_rate": 0.5, "local_steps": 2, "batch_size": 16, "lr": 0.1},
        "mechanism": {"name": "dp_fedavg", "noise_multiplier": 1.5, "clip_norm": 1.0, "delta": DELTA},
        "resources": {"server": {"num_cpus": 0.5}, "silo": {"num_cpus": 0.5, "num_gpus": 0}},
    }
    run(scenario, out_dir=tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    privacy = summary["privacy"]
    rounds = privacy["rounds_accounted"]
    assert 1 <= rounds <= 3
    assert privacy["epsilon"] == pytest.approx(_accountant(0.5, 1.5, rounds).report()["epsilon"], rel=1e-12)
    assert privacy["guarantee"].startswith("client-level")
    assert any("number of silos" in item for item in privacy["assumed_public"])
    assert np.isfinite(summary["final"]["accuracy"])
