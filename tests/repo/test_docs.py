"""The documentation: the scenario reference is generated from the models and covers every key with a description,
the site builds with MkDocs in strict mode (a broken link, a missing page or a stale API reference fails), every
page is in the nav, no Sphinx role is printed literally, and the search index is built."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import yaml

from simulator.cli import main
from simulator.scenario import validate_scenario
from simulator.scenario_reference import PAGE, scenario_reference_markdown, undocumented_keys, updated_page
from tests.support.paths import REPO


OPTIONAL_BLOCKS = ("data.users", "attack")


def _leaf_keys(mapping: dict, prefix: str = "") -> list[str]:
    """Dotted keys of a resolved scenario's values (an absent optional block is not a key)."""
    keys = []
    for key, value in mapping.items():
        if value is None and f"{prefix}{key}" in OPTIONAL_BLOCKS:
            continue
        if isinstance(value, dict) and key != "budgets":
            keys += _leaf_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def test_the_scenario_reference_in_the_repository_is_up_to_date() -> None:
    """docs/reference/scenario.md holds the generated reference (readable without a build); regenerate it with
    ``python -m simulator.scenario_reference``."""
    page = PAGE.read_text()
    assert updated_page(page) == page, "run `python -m simulator.scenario_reference`"
    assert "| `mechanism.budgets` |" in page and "| `federation.rounds` |" in page


def test_list_prints_the_keys_under_a_prefix(capsys) -> None:
    assert main(["list", "mechanism.rpdp"]) == 0
    rpdp = capsys.readouterr().out
    assert rpdp.startswith("mechanism.name: rpdp (10 keys;")
    assert '  mechanism.budgets: mapping; default {"distribution": "three_levels"}\n      Per-record budgets:' in rpdp
    assert "mechanism.noise_multiplier: float > 0.0; default 1.0\n      Noise multiplier sigma.\n" in rpdp
    assert main(["list", "federation"]) == 0
    federation = capsys.readouterr().out
    assert "  federation.rounds: int >= 1; default 10\n" in federation and "federation.server_optimizer.lr" in federation
    assert all(line.startswith(("federation", "  federation.", "      ")) for line in federation.splitlines())
    assert main(["list", "mechanism.none"]) == 0
    assert capsys.readouterr().out == "mechanism.name: none takes no further keys\n"
    assert main(["list", "mechanism"]) == 0
    assert "privsilo list mechanism.NAME (NAME: dp_fedavg, dp_sgd, dprivacy, none, pldp, rpdp, uldp)" in capsys.readouterr().out
    assert main(["list", "federation.nope"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "list: got 'federation.nope'; no scenario key lies under it; blocks: attack, audit" in line and "rpdp" in line


def test_every_scenario_key_has_a_description() -> None:
    assert undocumented_keys() == []


def test_the_reference_lists_every_key_of_a_resolved_scenario() -> None:
    reference = scenario_reference_markdown()
    scenarios = [
        {"mechanism": {"name": "uldp"}, "data": {"users": {"count": 3}}, "protocol": {"secure_aggregation": True}},
        {"mechanism": {"name": "rpdp"}, "attack": {}},
        {"mechanism": {"name": "pldp"}},
        {"mechanism": {"name": "dprivacy", "radius": 1.0}},
    ]
    keys = {key for raw in scenarios for key in _leaf_keys(validate_scenario(raw).to_dict())}
    assert {"mechanism.weighting", "mechanism.estimator", "mechanism.ranges", "attack.round", "data.users.silos"} <= keys
    for key in sorted(keys):
        assert f"| `{key}` |" in reference, key


# A Sphinx role (":class:`X`") that mkdocstrings would print literally; its cross-references are "[X][path]".
SPHINX_ROLE = re.compile(r":(class|func|meth|mod|attr|data|exc|obj|ref):`")


def test_docs_build_strictly(tmp_path) -> None:
    """One build checks the site: strict (every link and anchor resolves), the generated pages filled in, no
    literal Sphinx role anywhere, the API reference holding the entry points, and a non-empty search index."""
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert (site / "reference" / "scenario" / "index.html").is_file()
    page = (site / "reference" / "scenario" / "index.html").read_text()
    assert "mechanism.group_rounding" in page and "<!-- scenario-reference -->" not in page
    literal = {str(path.relative_to(site)): SPHINX_ROLE.findall(path.read_text()) for path in site.rglob("*.html")}
    assert {path: roles for path, roles in literal.items() if roles} == {}
    api = (site / "reference" / "api" / "index.html").read_text()
    for identifier in ("privsilo.run", "simulator.results.RunResult", "simulator.scenario.Scenario",
                       "simulator.scenario.FaultsConfig", "simulator.scenario.ServerOptimizerConfig",
                       "mechanisms.base.Mechanism", "mechanisms.base.PrivacyAccountant", "simulator.errors.ScenarioError"):
        assert f'id="{identifier}"' in api, identifier
    index = json.loads((site / "search" / "search_index.json").read_text())
    locations = {entry["location"].split("#")[0] for entry in index["docs"]}
    assert {"", "your-own-work/", "reference/api/", "failures/"} <= locations
    assert any("privsilo.run" in entry["text"] or "privsilo.run" in entry["title"] for entry in index["docs"])


def test_every_page_is_in_the_nav() -> None:
    """A page left out of the nav builds but cannot be reached from the site's menu."""
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_constructor("!ENV", lambda load, node: None)  # mkdocs.yml's environment variables: not needed here
    config = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=loader)  # noqa: S506 (a SafeLoader)

    def pages(items) -> set[str]:
        found = set()
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            found |= pages(value) if isinstance(value, list) else {value}
        return found

    on_disk = {str(path.relative_to(REPO / "docs")) for path in (REPO / "docs").rglob("*.md")}
    assert on_disk == pages(config["nav"])
