"""The package's import graph has no loop, imports for type checkers included: each module can
be read knowing only what it imports."""

from __future__ import annotations

import grimp


def loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in edges[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                found.append(sorted(group))

    for module in edges:
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_back_even_for_type_checkers() -> None:
    graph = grimp.build_graph("assistant", cache_dir=None)  # (TYPE_CHECKING imports counted)
    modules = {module for module in graph.modules if module.startswith("assistant.")}
    edges = {
        module: graph.find_modules_directly_imported_by(module) & modules for module in modules
    }

    assert loops(edges) == []


def test_a_loop_through_annotations_is_found() -> None:
    assert loops({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
