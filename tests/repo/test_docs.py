"""The documentation: the scenario reference is generated from the models and covers every key with a description,
the site builds with MkDocs in strict mode (a broken link, a missing page or a stale API reference fails), every
page is in the nav, no Sphinx role is printed literally in the rendered site, the search index is built, and the
README stays a front page of at most 250 lines whose test command is the one `.ci/run` runs."""
from __future__ import annotations

import html
import json
import re
import subprocess
import sys

import yaml

from privsilo.simulator.cli import main
from privsilo.simulator.scenario import validate_scenario
from privsilo.simulator.scenario.reference import PAGE, scenario_reference_markdown, undocumented_keys, updated_page
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
    ``python -m privsilo.simulator.scenario.reference``."""
    page = PAGE.read_text()
    assert updated_page(page) == page, "run `python -m privsilo.simulator.scenario.reference`"
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


# A Sphinx role in a docstring (":func:`x`") that mkdocstrings prints literally: in the rendered page the backticks
# become <code> (":func:<code>x</code>", read as ":func:x" once the tags go) or vanish (":func x"). Docstrings
# cross-reference with "[`x`][module.x]" or name a thing in plain backticks instead.
RENDERED_ROLE = re.compile(r"(?<![\w:.-]):(class|func|meth|mod|attr|data|exc|obj|ref)(?::\s*|\s+)`?~?[A-Za-z_]")
HTML_TAG = re.compile(r"<[^>]+>")


def literal_roles(page_html: str) -> list[str]:
    """The literal Sphinx roles a rendered page shows, as its reader sees them (tags stripped, entities decoded)."""
    text = html.unescape(HTML_TAG.sub("", page_html))
    return [text[max(match.start() - 30, 0):match.end() + 30] for match in RENDERED_ROLE.finditer(text)]


def test_the_role_check_finds_roles_as_mkdocstrings_renders_them() -> None:
    for shown in ('<p>returns the largest (:func:<code>fdp_one_run_audit</code>) bound</p>',
                  "<p>read at :data:<code>SMALL_DELTA</code> times delta</p>", "<td>see :mod:privsilo.mechanisms.gdp</td>",
                  "<p>the <code>ceiling</code> of :func one_run_audit</p>", "<p>:meth:`snapshot`</p>",
                  "<p>(:class:<code>~privsilo.simulator.engine.actors.SiloWorker</code>)</p>", "<li>:attr: <code>x</code></li>"):
        assert literal_roles(shown), shown
    for clean in ('<p>the <a href="#privsilo.mechanisms.gdp"><code>privsilo.mechanisms.gdp</code></a> module</p>',
                  "<code>model.name: \"package.module:factory\"</code>", "<p>metadata:data, a:b, 10:30 func</p>",
                  "<code>data: {dataset: digits}</code>"):
        assert literal_roles(clean) == [], clean


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
    literal = {str(path.relative_to(site)): literal_roles(path.read_text()) for path in site.rglob("*.html")}
    assert {path: roles for path, roles in literal.items() if roles} == {}
    api = (site / "reference" / "api" / "index.html").read_text()
    for identifier in ("privsilo.run", "privsilo.simulator.engine.results.RunResult", "privsilo.simulator.scenario.Scenario",
                       "privsilo.simulator.scenario.FaultsConfig", "privsilo.simulator.scenario.ServerOptimizerConfig",
                       "privsilo.mechanisms.base.Mechanism", "privsilo.mechanisms.base.PrivacyAccountant", "privsilo.simulator.errors.ScenarioError"):
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


README_LIMIT = 250


def test_the_readme_is_a_front_page() -> None:
    """At most 250 lines: what privsilo is, set-up, a scenario, the commands, a first result, where the docs are;
    measured tables and long explanations live in docs/."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= README_LIMIT, "move detail into a page under docs/"
    sections = re.findall(r"^## (.+)$", readme, flags=re.MULTILINE)
    assert {"Set-up and quickstart", "A scenario file", "Command line", "A first result", "Documentation"} <= set(sections)


def test_the_readme_test_command_is_what_ci_runs() -> None:
    """.ci/run runs the README's install-and-test command verbatim (its last line), and so the README shows it."""
    ci_command = (REPO / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci_command.endswith(".venv/bin/python -m pytest -q")
    assert f"```bash\n{ci_command}\n```" in (REPO / "README.md").read_text()
