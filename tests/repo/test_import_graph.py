"""The packages' imports point one way: no import circle among the modules of simulator/, mechanisms/ and
protocols/, and mechanisms/ and protocols/ import no Ray (simulator/ is the only place that does). The tests'
imports too: no module of a test tier imports from another test module (shared helpers live in tests/support/).

Every ``import`` counts, wherever it stands (module top, inside a function, under ``TYPE_CHECKING``): a lazy
import is still an arrow from one module to another."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGES = ("simulator", "mechanisms", "protocols")
TEST_TIERS = ("unit", "integration", "system", "repo")


def _module_name(path: Path) -> str:
    parts = ["privsilo", *path.relative_to(REPO).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))}


def _imported(node: ast.AST, module: str, path: Path) -> list[str]:
    """Names of the modules an import statement reads (``from a.b import c`` reads ``a.b`` and, if it is a
    module, ``a.b.c``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets.update(name for name in _imported(node, module, path) if name in modules and name != module)
        graph[module] = targets
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circles() -> None:
    circles = import_circles(import_graph())
    assert not circles, "import circles: " + "; ".join(" <-> ".join(circle) for circle in circles)


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"x": {"y"}, "y": {"x"}}) == [["x", "y"]]


def test_the_graph_sees_lazy_imports() -> None:
    graph = import_graph()
    assert "privsilo.mechanisms.uldp.silo" in graph["privsilo.mechanisms.uldp.mechanism"]  # imported inside a method
    assert "privsilo.simulator.run_dir.writers" in graph["privsilo.simulator.engine.api"]


def test_mechanisms_and_protocols_import_no_ray() -> None:
    for module, path in _modules().items():
        if module.split(".")[1] == "simulator":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = _imported(node, module, path)
            assert not any(name == "ray" or name.startswith("ray.") for name in names), f"{module} imports Ray"


def tier_imports(path: Path, source: str | None = None) -> list[str]:
    """``FILE:LINE: IMPORT`` for every import in the test module at ``path`` (``source``, default its text) that
    reads a module of a test tier (``tests.unit``, ``tests.integration``, ``tests.system``, ``tests.repo``)."""
    parts = path.relative_to(REPO).with_suffix("").parts
    module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    tiers = tuple(f"tests.{tier}" for tier in TEST_TIERS)
    found = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, filename=str(path))):
        names = _imported(node, module, path)
        if any(name == tier or name.startswith(tier + ".") for name in names for tier in tiers):
            found.append((node.lineno, f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}"))
    return [line for _, line in sorted(found)]


def test_no_test_module_imports_another_test_module() -> None:
    found = [line for tier in TEST_TIERS for path in sorted((REPO / "tests" / tier).rglob("*.py")) for line in tier_imports(path)]
    assert not found, "test modules import from other test modules (move what they share to tests/support/):\n" + "\n".join(found)


def test_the_test_import_check_sees_lazy_and_relative_imports() -> None:
    path = REPO / "tests" / "unit" / "example" / "test_example.py"
    source = ("from tests.support.paths import REPO\nimport tests.integration.test_a\nfrom tests import support\n\n\n"
              "def test_x():\n    from tests.unit.other import helper\n    from .. import test_b\n    from tests import system\n")
    assert tier_imports(path, source) == [
        "tests/unit/example/test_example.py:2: import tests.integration.test_a",
        "tests/unit/example/test_example.py:7: from tests.unit.other import helper",
        "tests/unit/example/test_example.py:8: from .. import test_b",
        "tests/unit/example/test_example.py:9: from tests import system",
    ]
