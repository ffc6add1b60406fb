"""``pldp`` without Ray: the honest accountant against a brute-force loop over every perturbed scalar, the silo's
upload and the server's average, the paper's settings, and refusals of bad parameters (one line naming the field)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from privsilo.mechanisms.base import model_to_vector
from privsilo.mechanisms.events import LocalDpPlan, LocalDpUpload, PoissonGaussianEvent
from privsilo.mechanisms.pldp import PAPER_BUDGETS, PAPER_RANGES, pdpm_outputs
from privsilo.mechanisms.pldp.accountant import LocalDpAccountant
from privsilo.mechanisms.pldp.mechanism import Pldp
from privsilo.mechanisms.pldp.params import PldpParams
from privsilo.simulator.cli import main
from privsilo.simulator.errors import ScenarioError
from privsilo.simulator.run_dir.writers import privacy_line
from privsilo.simulator.scenario import validate_scenario
from tests.support.scenarios import small_scenario, tiny_silo_context


def _brute_force(plans: dict[int, LocalDpPlan], participations: list[tuple[int, ...]]) -> dict[int, float]:
    """Basic composition, one perturbed scalar at a time: every upload of every client adds eps per coordinate."""
    spent = {client: 0.0 for client in plans}
    for participants in participations:
        for client in participants:
            for _ in range(plans[client].coordinates):
                spent[client] += plans[client].epsilon_per_coordinate
    return spent


def test_accountant_equals_a_brute_force_loop_over_every_perturbed_scalar() -> None:
    rng = np.random.default_rng(4)
    clients = 7
    plans = {c: LocalDpPlan(epsilon_per_coordinate=float(rng.choice([0.1, 0.35, 1.0])), coordinates=int(rng.integers(1, 400)))
             for c in range(clients)}
    participations = [tuple(int(c) for c in np.flatnonzero(rng.random(clients) < 0.6)) for _ in range(25)]
    participations.append(())  # a skipped round
    never = clients  # enrolled, never sampled
    accountant = LocalDpAccountant()
    accountant.enrol(range(clients + 1))
    for client, plan in plans.items():
        accountant.record(client, plan)
    accountant.record(never, LocalDpPlan(epsilon_per_coordinate=0.5, coordinates=3))
    for participants in participations:
        for client in participants:
            plan = plans[client]
            accountant.record(client, LocalDpUpload(epsilon_per_coordinate=plan.epsilon_per_coordinate, coordinates=plan.coordinates))
    report = accountant.report()
    want = _brute_force(plans, participations)
    for client in plans:
        assert report["epsilon_per_client"][str(client)] == pytest.approx(want[client], rel=1e-12)
        assert report["epsilon_per_coordinate"][str(client)] == plans[client].epsilon_per_coordinate
        assert report["uploads"][str(client)] == sum(client in p for p in participations)
    assert report["epsilon_per_client"][str(never)] == 0.0 and report["epsilon_per_coordinate"][str(never)] == 0.5
    assert report["epsilon"] == pytest.approx(max(want.values()), rel=1e-12)
    assert report["epsilon_per_silo"] == report["epsilon_per_client"] and report["delta"] == 0.0


def test_accountant_rejects_foreign_or_broken_events_before_changing_state() -> None:
    accountant = LocalDpAccountant()
    accountant.record(0, LocalDpUpload(epsilon_per_coordinate=1.0, coordinates=2))
    before = accountant.report()
    for event, error in (
        (PoissonGaussianEvent(sampling_rate=0.1, noise_multiplier=1.0, steps=1), TypeError),
        (LocalDpUpload(epsilon_per_coordinate=0.0, coordinates=2), ValueError),
        (LocalDpUpload(epsilon_per_coordinate=math.inf, coordinates=2), ValueError),
        (LocalDpUpload(epsilon_per_coordinate=1.0, coordinates=0), ValueError),
    ):
        with pytest.raises(error):
            accountant.record(0, event)
    assert accountant.report() == before


def test_the_papers_settings_cycle_through_their_levels() -> None:
    assert PAPER_RANGES["tau2"] == (0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0)
    assert PAPER_BUDGETS["eps2"] == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    params = PldpParams(ranges="tau1", budgets="eps2", centers=[0.0, 0.5, -0.5, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    clients = [params.client(i) for i in range(11)]
    assert [c.length for c in clients[:3]] == [0.2, 0.4, 0.2]
    assert [c.epsilon for c in clients] == [*PAPER_BUDGETS["eps2"], 0.1]
    assert [c.center for c in clients[:3]] == [0.0, 0.5, -0.5]


@pytest.mark.parametrize(("perturb", "coordinates"), [("weights", "all"), ("update", "all"), ("update", 20)])
def test_silo_uploads_pdpm_outputs_and_the_server_averages_them(perturb: str, coordinates) -> None:
    params = PldpParams(perturb=perturb, coordinates=coordinates, ranges=[0.4, 0.8, 1.2], budgets="eps3", centers=[0.0, 0.05, 0.0])
    mechanism = Pldp(params)
    context = tiny_silo_context(silo_id=1)
    start = model_to_vector(context.model)
    silo = mechanism.silo(context)
    (plan,) = silo.setup_events()
    d = start.size
    k = d if coordinates == "all" else coordinates
    assert plan == LocalDpPlan(epsilon_per_coordinate=1.0 if coordinates == "all" else 1.0 / k, coordinates=k)
    contribution = silo.contribute((start,), round_index=0)
    assert contribution.events == (LocalDpUpload(epsilon_per_coordinate=plan.epsilon_per_coordinate, coordinates=k),)
    assert "train_loss" not in contribution.metrics  # un-noised: not released
    upload, weight = contribution.vector[:-1], contribution.vector[-1]
    assert weight == 1.0
    released = upload + start if perturb == "weights" else upload  # what the client perturbed, as released
    outputs = pdpm_outputs(length=0.8, epsilon=plan.epsilon_per_coordinate)
    scale = d / k
    allowed = 0.05 + scale * np.array([outputs.high, outputs.low, 0.0])
    assert np.isclose(released[:, None], allowed[None], rtol=1e-9, atol=1e-12).any(axis=1).all()
    assert (~np.isclose(released, 0.05, rtol=0, atol=1e-12)).sum() <= k
    server = mechanism.server()
    other = np.concatenate([np.full(d, 2.0), [1.0]])
    (after,) = server.aggregate((start,), contribution.vector + other, num_participants=2)
    assert np.allclose(after, start + (upload + 2.0) / 2, rtol=1e-12)


@pytest.mark.parametrize(
    ("mechanism", "field"),
    [
        ({"budgets": 0.0}, "mechanism.budgets"),
        ({"budgets": [0.5, -0.1, 1.0]}, "mechanism.budgets"),
        ({"budgets": "eps4"}, "mechanism.budgets"),
        ({"ranges": -2.0}, "mechanism.ranges"),
        ({"ranges": [1.0, 0.0, 1.0]}, "mechanism.ranges"),
        ({"ranges": [1.0, 2.0]}, "mechanism.ranges"),  # 2 lengths for 3 clients
        ({"budgets": [1.0, 1.0, 1.0, 1.0]}, "mechanism.budgets"),
        ({"centers": [0.0]}, "mechanism.centers"),
        ({"coordinates": 0}, "mechanism.coordinates"),
        ({"coordinates": 651}, "mechanism.coordinates"),  # d = 64 x 10 + 10 = 650 for logistic regression on digits
        ({"coordinates": True}, "mechanism.coordinates"),
        ({"perturb": "gradients"}, "mechanism.perturb"),
    ],
)
def test_bad_parameters_name_the_field(mechanism: dict, field: str) -> None:
    with pytest.raises(ScenarioError) as err:
        validate_scenario(small_scenario(mechanism={"name": "pldp", **mechanism}))
    assert err.value.field == field


def test_k_may_equal_d() -> None:
    scenario = validate_scenario(small_scenario(mechanism={"name": "pldp", "coordinates": 650}))
    assert scenario.mechanism.params.coordinates == 650


def test_validate_exits_2_with_one_line_naming_the_field(tmp_path, capsys) -> None:
    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(small_scenario(mechanism={"name": "pldp", "ranges": [1.0, 2.0]})))
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "privsilo: error: mechanism.ranges: got [1.0, 2.0]; has 2 lengths but the federation has 3 clients "
        "(data.silos): one length per client"
    ]


def test_result_line_names_both_figures() -> None:
    accountant = LocalDpAccountant()
    accountant.record(0, LocalDpPlan(epsilon_per_coordinate=0.5, coordinates=100))
    accountant.record(0, LocalDpUpload(epsilon_per_coordinate=0.5, coordinates=100))
    line = privacy_line(accountant.report(), mechanism="pldp")
    assert "epsilon_per_client = 50 " in line and "epsilon_per_coordinate = 0.5 " in line
