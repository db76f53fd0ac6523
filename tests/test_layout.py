"""The code's layout holds: no import cycles, no module over 600 lines, and
neither backend importing the other (that no doc for users names a private
module is checked with the docs, in test_docs.py).

The import graph is read with ``ast`` (no module is imported): an edge
``a -> b`` for every ``import b``/``from b import ...`` of a module of the
project, at any depth in ``a`` (imports inside functions count: a cycle
there still ties the two modules together). ``from package import name``
is an edge to ``package.name`` when that is a module, else to ``package``.
Importing a module also imports its parent packages, so their
``__init__`` modules take part too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simdist", "fake_backends", "properties")
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _resolve(module: str, path: Path, level: int, name: str | None) -> str:
    """The absolute name of a (possibly relative) import in ``module``."""
    if not level:
        return name or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{name}" if name else package


def _parents(name: str):
    parts = name.split(".")
    for i in range(1, len(parts)):
        yield ".".join(parts[:i])


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, path, node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:  # `import a.b.c` of a name inside a module
                    target = target.rpartition(".")[0]
                if not target:
                    continue
                for name in (*_parents(target), target):
                    if name != module and name in modules and not module.startswith(name + "."):
                        graph[module].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.slow
def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_module_is_longer_than_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules().values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


@pytest.mark.slow
@pytest.mark.parametrize("backend, other", [("simdist.sim", "simdist.mpi"), ("simdist.mpi", "simdist.sim")])
def test_neither_backend_imports_the_other(backend, other):
    graph = import_graph()
    crossing = {m: sorted(t for t in targets if t == other or t.startswith(other + "."))
                for m, targets in graph.items() if m == backend or m.startswith(backend + ".")}
    assert not {m: t for m, t in crossing.items() if t}
