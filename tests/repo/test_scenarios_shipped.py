"""The shipped scenario files: they validate, state their expected result, and heart_disease_dpsgd's settings give
a single-digit epsilon (issue 7, item 3)."""
from __future__ import annotations

import pytest

from privsilo.mechanisms.events import PoissonGaussianEvent
from privsilo.mechanisms.registry import mechanism_class
from privsilo.simulator.data import load_dataset
from privsilo.simulator.scenario import apply_overrides, load_scenario_file, validate_scenario
from tests.support.paths import REPO

SCENARIOS = REPO / "scenarios"
SHIPPED = sorted(p for p in SCENARIOS.rglob("*.yaml"))
SINGLE_NON_MNIST = ["quickstart.yaml", "quickstart_secagg.yaml", "heart_disease_dpsgd.yaml", "rpdp/heart_disease_three_levels.yaml",
                    "dprivacy/rotated_mnist.yaml", "dprivacy/synthetic_linear.yaml", "attacks/lfw_dlg.yaml",
                    "attacks/mnist_defences.yaml", "attacks/mnist_dlg.yaml", "audits/dp_sgd_digits.yaml", "audits/uldp_digits.yaml",
                    "dp_fedavg/central.yaml", "dp_fedavg/adaptive.yaml", "dp_fedavg/distributed.yaml",
                    "audits/dp_fedavg_digits.yaml"]


def _validated(name: str, heart_disease_dir):
    raw = load_scenario_file(SCENARIOS / name)
    overrides = [f"data.path={heart_disease_dir}"] if raw["data"]["dataset"] == "heart_disease" else []
    return validate_scenario(apply_overrides(raw, overrides))


@pytest.mark.parametrize("name", SINGLE_NON_MNIST)
def test_shipped_single_scenarios_validate(name, heart_disease_dir):
    assert _validated(name, heart_disease_dir).name == load_scenario_file(SCENARIOS / name)["name"]


def test_every_shipped_single_scenario_is_listed_here():
    singles = {str(p.relative_to(SCENARIOS)) for p in SHIPPED if not p.name.endswith("_grid.yaml")}
    assert singles - set(SINGLE_NON_MNIST) == {
        "mnist_dpsgd.yaml", "rpdp/mnist_iid.yaml", "rpdp/mnist_noniid.yaml", "uldp/heart_disease.yaml", "pldp/mnist.yaml",
        "pldp/fashion_mnist.yaml", "uldp/mnist.yaml", "uldp/mnist_naive.yaml", "dp_fedavg/mnist_distributed.yaml",
    }


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(SCENARIOS)) for p in SHIPPED])
def test_every_shipped_file_states_its_expected_result(path):
    comments = " ".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert "Expected" in comments and "privsilo " in comments


def test_heart_disease_dpsgd_spends_a_single_digit_epsilon(heart_disease_dir):
    """The accountant alone, fed the events the shipped settings produce for every hospital (no training)."""
    scenario = _validated("heart_disease_dpsgd.yaml", heart_disease_dir)
    fed, mechanism = scenario.federation, mechanism_class(scenario.mechanism.name)(scenario.mechanism.params)
    dataset = load_dataset("heart_disease", path=scenario.data.path, seed=scenario.seed)
    accountant = mechanism.accountant()
    for silo_id, records in enumerate(dataset.natural_partition):
        rate = mechanism.params.rate(batch_size=fed.batch_size, num_records=len(records))
        event = PoissonGaussianEvent(sampling_rate=rate, noise_multiplier=mechanism.params.noise_multiplier, steps=fed.local_steps)
        for _ in range(fed.rounds):
            accountant.record(silo_id, event)
    epsilon = accountant.report()["epsilon"]
    assert epsilon < 10
    assert round(epsilon, 2) == 3.45  # the figure the scenario's comment states
    assert scenario.data.partition == "natural" and len(dataset.natural_partition) == scenario.data.silos


@pytest.mark.parametrize("name", ["pldp/mnist.yaml", "pldp/fashion_mnist.yaml"])
def test_pldp_comments_state_the_exact_averaged_noise(name):
    """The noise figures in a PLDP scenario's comment are privsilo.mechanisms.pldp.averaged_noise_std at the scenario's own
    settings (clients 0..n-1 upload, levels in turn by client id, weights at the centre), for its ranges and tau1."""
    import re

    import numpy as np

    from privsilo.mechanisms.pldp import averaged_noise_std
    from privsilo.mechanisms.pldp.settings import PAPER_BUDGETS, PAPER_RANGES

    raw = load_scenario_file(SCENARIOS / name)
    comments = " ".join(line.lstrip("# ") for line in (SCENARIOS / name).read_text().splitlines() if line.startswith("#"))
    mechanism = raw["mechanism"]

    def noise(ranges: str, uploads: int) -> float:
        clients = np.arange(uploads)
        lengths, budgets = PAPER_RANGES[ranges], PAPER_BUDGETS[mechanism["budgets"]]
        return averaged_noise_std(
            0.0,  # weights at the centre
            length=np.array(lengths)[clients % len(lengths)],
            epsilon=np.array(budgets)[clients % len(budgets)],
        )

    stated = re.search(r"standard deviation ([\d.]+) per weight at 70 uploads \(([\d.]+) at 7", comments)
    assert stated, "the comment states the noise at 70 and 7 uploads"
    assert float(stated.group(1)) == pytest.approx(noise(mechanism["ranges"], 70), abs=5e-4)
    assert float(stated.group(2)) == pytest.approx(noise(mechanism["ranges"], 7), abs=5e-3)
    tau1 = re.search(r"ranges=tau1 \(([\d.]+) per weight at 70 uploads", comments)
    assert tau1 and float(tau1.group(1)) == pytest.approx(noise("tau1", 70), abs=5e-4)
