"""MkDocs hooks. The API reference reads the ``privsilo`` package as it installs: the folders at the repository root
seen through ``build/api-packages/privsilo`` (links made before the build), since mkdocstrings does not follow
setuptools' package-dir mapping. The build fails while the scenario reference in ``docs/reference/scenario.md``
differs from the one generated from the pydantic models (``privsilo.simulator.scenario.reference.updated_page``),
so the page, readable without a build, cannot drift from the code."""
from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError

PAGE = "reference/scenario.md"
REPO = Path(__file__).resolve().parents[1]
API_PACKAGES = REPO / "build" / "api-packages"  # mkdocs.yml's mkdocstrings paths
FOLDERS = ("simulator", "mechanisms", "protocols")


def on_startup(**_: object) -> None:
    """Lay out ``build/api-packages/privsilo`` as the wheel does: the facade's ``__init__`` and the three folders."""
    package = API_PACKAGES / "privsilo"
    package.mkdir(parents=True, exist_ok=True)
    for name, source in [("__init__.py", REPO / "privsilo" / "__init__.py"), *((f, REPO / f) for f in FOLDERS)]:
        link = package / name
        if not (link.is_symlink() and link.resolve() == source):
            link.unlink(missing_ok=True)
            link.symlink_to(source)


def on_page_markdown(markdown: str, *, page, config, files) -> str:  # noqa: ARG001 (MkDocs' hook signature)
    if page.file.src_uri != PAGE:
        return markdown
    from privsilo.simulator.scenario.reference import updated_page

    if updated_page(markdown) != markdown:
        raise PluginError(f"docs/{PAGE} is out of date: run `python -m privsilo.simulator.scenario.reference` to regenerate it")
    return markdown
