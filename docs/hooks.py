"""MkDocs hook: fills the scenario reference page from the pydantic models at build time
(:func:`simulator.scenario_reference.scenario_reference_markdown`), so it cannot drift from the code."""
from __future__ import annotations

MARKER = "<!-- scenario-reference -->"


def on_page_markdown(markdown: str, *, page, config, files) -> str:  # noqa: ARG001 (MkDocs' hook signature)
    if MARKER not in markdown:
        return markdown
    from simulator.scenario_reference import scenario_reference_markdown

    return markdown.replace(MARKER, scenario_reference_markdown())
