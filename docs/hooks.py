"""MkDocs hook: the build fails while the scenario reference in ``docs/reference/scenario.md`` differs from the
one generated from the pydantic models (:func:`privsilo.simulator.scenario.reference.updated_page`), so the page, readable
without a build, cannot drift from the code."""
from __future__ import annotations

from mkdocs.exceptions import PluginError

PAGE = "reference/scenario.md"


def on_page_markdown(markdown: str, *, page, config, files) -> str:  # noqa: ARG001 (MkDocs' hook signature)
    if page.file.src_uri != PAGE:
        return markdown
    from privsilo.simulator.scenario.reference import updated_page

    if updated_page(markdown) != markdown:
        raise PluginError(f"docs/{PAGE} is out of date: run `python -m privsilo.simulator.scenario.reference` to regenerate it")
    return markdown
