"""What the shipped scenarios' comments say: every pointer into the documentation resolves to a page and a heading
that exist, no comment points at the README (its sections move), and every privacy figure a comment states is the
accountant's at the file's own settings (measured accuracies live in the documentation's measured sections, which
the comments point to)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from privsilo.mechanisms.events import EuclideanLaplaceEvent, PoissonGaussianEvent
from privsilo.mechanisms.registry import mechanism_class
from privsilo.mechanisms.uldp import epsilon as uldp_epsilon
from privsilo.simulator.scenario import load_scenario_file
from tests.support.paths import REPO

SCENARIOS = REPO / "scenarios"
SHIPPED = sorted(SCENARIOS.rglob("*.yaml"))
IDS = [str(p.relative_to(SCENARIOS)) for p in SHIPPED]
# A pointer: a page under docs/, optionally with the anchor of one of its headings.
POINTER = re.compile(r"docs/[\w/.-]+?\.md(?:#[\w-]+)?")


def _comments(path: Path) -> str:
    """The file's comment lines joined by spaces, without the leading '#'."""
    return " ".join(line.lstrip("#").strip() for line in path.read_text().splitlines() if line.lstrip().startswith("#"))


def _anchors(page: Path) -> set[str]:
    """The anchors MkDocs gives the page's headings (Python-Markdown's toc slugify, as mkdocs.yml configures it)."""
    headings = [line.lstrip("#").strip() for line in page.read_text().splitlines() if re.match(r"#{1,6} ", line)]
    return {slugify(heading, "-") for heading in headings}


def _unresolved(pointers: list[str]) -> list[str]:
    missing = []
    for pointer in pointers:
        page, _, anchor = pointer.partition("#")
        path = REPO / page
        if not path.is_file() or (anchor and anchor not in _anchors(path)):
            missing.append(pointer)
    return missing


def test_pointers_are_found() -> None:
    """The pattern finds the pointers the comments use (a pattern that found nothing would pass every file)."""
    found = POINTER.findall(_comments(SCENARIOS / "uldp" / "mnist.yaml"))
    assert found == ["docs/mechanisms/uldp.md#measured-on-mnist-reduced"]
    assert _unresolved(["docs/mechanisms/uldp.md#no-such-heading", "docs/nowhere.md"]) == [
        "docs/mechanisms/uldp.md#no-such-heading", "docs/nowhere.md"]


@pytest.mark.parametrize("path", SHIPPED, ids=IDS)
def test_every_pointer_in_a_scenario_comment_resolves(path: Path) -> None:
    comments = _comments(path)
    assert "README" not in comments, "point to a page and heading under docs/, not to the README"
    assert _unresolved(POINTER.findall(comments)) == []


def test_every_link_from_the_readme_into_the_docs_resolves() -> None:
    links = re.findall(r"\]\((docs/[^)\s]+)\)", (REPO / "README.md").read_text())
    assert links and _unresolved(links) == []


def _scenario(name: str, **data):
    raw = load_scenario_file(SCENARIOS / name)
    raw["data"] = {**raw["data"], **data}
    return raw


def _stated(name: str, value: float, digits: int = 2) -> None:
    """The comment of ``name`` states ``value`` rounded to ``digits`` decimals."""
    assert re.search(rf"(?<![\d.]){re.escape(f'{value:.{digits}f}')}(?![\d])", _comments(SCENARIOS / name)), (name, value)


def _dp_sgd_epsilon(raw: dict, *, records: int, steps: int, accountant: str = "rdp") -> float:
    mechanism = raw["mechanism"]
    params = mechanism_class("dp_sgd").Params.model_validate(
        {k: v for k, v in mechanism.items() if k != "name"} | {"accountant": accountant})
    rate = params.rate(batch_size=raw["federation"]["batch_size"], num_records=records)
    accountant_ = mechanism_class("dp_sgd")(params).accountant()
    accountant_.record(0, PoissonGaussianEvent(sampling_rate=rate, noise_multiplier=params.noise_multiplier, steps=steps))
    report = accountant_.report()
    return report["epsilon"] if accountant == "rdp" else report.get("epsilon_pld", report["epsilon"])


def test_mnist_dpsgd_epsilon() -> None:
    """q = 64 / 6,000 (60,000 MNIST training images over 10 IID silos), every round counted (15 x 50 steps)."""
    raw = load_scenario_file(SCENARIOS / "mnist_dpsgd.yaml")
    fed = raw["federation"]
    _stated("mnist_dpsgd.yaml", _dp_sgd_epsilon(raw, records=60_000 // raw["data"]["silos"], steps=fed["rounds"] * fed["local_steps"]))


@pytest.mark.parametrize(("sigma", "digits"), [(1.0, 1), (0.3, 0), (3.0, 2)])
def test_dp_sgd_audit_claims(sigma: float, digits: int) -> None:
    """The claimed epsilons of the DP-SGD audit at its three noise levels (q = 0.5 is public, so records do not matter)."""
    raw = load_scenario_file(SCENARIOS / "audits" / "dp_sgd_digits.yaml")
    raw["mechanism"] = {**raw["mechanism"], "noise_multiplier": sigma}
    fed = raw["federation"]
    steps = fed["rounds"] * fed["local_steps"]
    _stated("audits/dp_sgd_digits.yaml", _dp_sgd_epsilon(raw, records=100, steps=steps), digits)


@pytest.mark.parametrize("name", ["dp_fedavg/central.yaml", "dp_fedavg/adaptive.yaml", "audits/dp_fedavg_digits.yaml"])
def test_dp_fedavg_epsilons(name: str) -> None:
    """Client-level: every round counted at q = client_rate (the third party's figure) and at q = 1 (the server's)."""
    from privsilo.mechanisms.accounting import schedule_epsilon

    raw = load_scenario_file(SCENARIOS / name)
    mechanism, fed = raw["mechanism"], raw["federation"]
    settings = ((fed["client_rate"], "rdp"), (fed["client_rate"], "pld"), (1.0, "rdp"))
    for rate, accountant in settings[: 3 if "server, who knows" in _comments(SCENARIOS / name) else 2]:
        entry = (rate, mechanism["noise_multiplier"], fed["rounds"])
        _stated(name, schedule_epsilon((entry,), mechanism["delta"], accountant))


@pytest.mark.parametrize("name, feature_shape, central_z, digits", [
    ("dp_fedavg/distributed.yaml", (64,), 1.948, 3),  # mlp_128 on 8x8 digits
    ("dp_fedavg/mnist_distributed.yaml", (1, 28, 28), 1.999945, 6),
])
def test_dp_fedavg_distributed_epsilon(name, feature_shape, central_z, digits) -> None:
    """Kairouz et al.'s Proposition 14 over the shipped rounds, every silo uploading; and the central noise
    multiplier the comment compares with gives the same epsilon (two decimals)."""
    from privsilo.mechanisms.accounting import schedule_epsilon
    from privsilo.mechanisms.events import DistributedDiscreteGaussianEvent
    from privsilo.simulator.models.builtin import parameter_count

    raw = load_scenario_file(SCENARIOS / name)
    mechanism, fed, silos = raw["mechanism"], raw["federation"], raw["data"]["silos"]
    params = mechanism_class("dp_fedavg").Params.model_validate({k: v for k, v in mechanism.items() if k != "name"})
    setting = params.distributed_setting(silos, parameter_count(raw["model"]["name"], feature_shape=feature_shape, num_classes=10))
    accountant = mechanism_class("dp_fedavg")(params).accountant()
    for round_index in range(fed["rounds"]):
        for silo in range(silos):
            accountant.record(silo, DistributedDiscreteGaussianEvent(
                round_index=round_index, sigma=setting.sigma, l2_bound=setting.l2_bound, l1_bound=setting.l1_bound,
                dimension=setting.dimension))
    epsilon = accountant.report()["epsilon"]
    _stated(name, epsilon)
    central = schedule_epsilon(((1.0, central_z, fed["rounds"]),), mechanism["delta"], "rdp")
    assert f"{central:.2f}" == f"{epsilon:.2f}"
    _stated(name, central_z, digits)
    if name == "dp_fedavg/distributed.yaml":
        _stated(name, setting.gamma * 1e5, 1)  # "gamma = 9.9e-5"
        assert f"Modulus 2^{setting.bits}" in _comments(SCENARIOS / name)


def _uldp_stated_epsilon(name: str, user_rate: float, noise_multiplier: float | None = None) -> float:
    raw = load_scenario_file(SCENARIOS / name)
    if "base" in raw:  # a grid: the settings of its base scenario, a file beside it
        raw = load_scenario_file((SCENARIOS / name).parent / raw["base"])
    mechanism = raw["mechanism"]
    return uldp_epsilon(variant="avg", noise_multiplier=noise_multiplier or mechanism["noise_multiplier"],
                        rounds=raw["federation"]["rounds"], delta=mechanism["delta"], user_rate=user_rate)


@pytest.mark.parametrize(("name", "user_rates"), [
    ("uldp/heart_disease.yaml", [1.0]), ("uldp/mnist.yaml", [1.0]), ("uldp/mnist_naive.yaml", [1.0, 0.5]),
    ("uldp/heart_disease_sampling_grid.yaml", [1.0, 0.5]), ("uldp/mnist_sampling_grid.yaml", [1.0, 0.5]),
    ("uldp/heart_disease_grid.yaml", [1.0]), ("uldp/mnist_grid.yaml", [1.0]), ("audits/uldp_digits.yaml", [1.0]),
])
def test_uldp_epsilons(name: str, user_rates: list[float]) -> None:
    for user_rate in user_rates:
        _stated(name, _uldp_stated_epsilon(name, user_rate))


def test_uldp_audit_at_sigma_one_half() -> None:
    _stated("audits/uldp_digits.yaml", _uldp_stated_epsilon("audits/uldp_digits.yaml", 1.0, noise_multiplier=0.5), 1)


@pytest.mark.parametrize(("name", "per_participation", "per_client"), [
    ("dprivacy/rotated_mnist.yaml", "14,560", "218,400"), ("dprivacy/synthetic_linear.yaml", "0.8", None),
])
def test_dprivacy_leakage(name: str, per_participation: str, per_client: str | None) -> None:
    """2n/nu per participation under the clipped calibration (eps = n / (nu R), leakage eps 2R)."""
    from privsilo.mechanisms.dprivacy.accountant import participation_leakage
    from privsilo.simulator.data import DATASETS
    from privsilo.simulator.models.builtin import parameter_count

    raw = load_scenario_file(SCENARIOS / name)
    mechanism, info = raw["mechanism"], DATASETS[raw["data"]["dataset"]]
    n = parameter_count(raw["model"]["name"], feature_shape=info.feature_shape, num_classes=info.num_classes or 1)
    event = EuclideanLaplaceEvent(epsilon=n / (mechanism["nu"] * mechanism["radius"]), radius=mechanism["radius"],
                                  calibration="clipped", hypothesis_spread=0.0)
    leakage, _ = participation_leakage(event)
    assert f"{leakage:,.0f}" == per_participation or f"{leakage:.1f}" == per_participation
    assert per_participation in _comments(SCENARIOS / name)
    if per_client:
        assert f"{leakage * raw['federation']['rounds']:,.0f}" == per_client and per_client in _comments(SCENARIOS / name)

