"""The documentation: the scenario reference is generated from the models and covers every key with a description,
and the site builds with MkDocs in strict mode (a broken link, a missing page or a stale API reference fails)."""
from __future__ import annotations

import subprocess
import sys

from simulator.scenario import validate_scenario
from simulator.scenario_reference import scenario_reference_markdown, undocumented_keys
from tests.conftest import REPO


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


def test_docs_build_strictly(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert (tmp_path / "site" / "reference" / "scenario" / "index.html").is_file()
    page = (tmp_path / "site" / "reference" / "scenario" / "index.html").read_text()
    assert "mechanism.group_rounding" in page and "<!-- scenario-reference -->" not in page
