"""specllama's import graph, read from the source (nothing is imported).

`python tests/import_graph.py` prints each part's imports, the circles (none expected) and how
many layers deep the modules stack; `tests/test_layers.py` fails on a circle or on an import that
goes up the layers. Every import counts, also those inside functions: a lazy import is still a
dependency.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specllama"

# The parts, lowest first. A part may import itself and the parts its entry names.
BASE = {"base"}
ALLOWED: dict[str, set[str]] = {
    "base": BASE,  # errors, paths, chat (conversations)
    "family": BASE | {"family"},  # a model family's way of writing, read from its template
    "llama": BASE | {"llama"},
    "engine": BASE | {"llama", "engine"},
    "policy": BASE | {"llama", "engine", "policy"},
    "models": BASE | {"llama", "models"},
    "session": BASE | {"family", "llama", "engine", "policy", "models", "session"},
    "server": BASE | {"family", "llama", "engine", "policy", "models", "session", "server"},
    "bench": BASE | {"family", "llama", "engine", "policy", "models", "session", "bench"},
    "cli": BASE
    | {"family", "llama", "engine", "policy", "models", "session", "server", "bench", "cli"},
    "main": {"cli"},
}
# Parts that never print nor know of a face: no rich, typer or web stack.
QUIET = {"base", "family", "llama", "engine", "policy", "models", "session"}
FACE_LIBRARIES = {"rich", "typer", "starlette", "uvicorn"}


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def part_of(module: str) -> str:
    """The part a module belongs to: its folder, or for the top-level modules their role."""
    pieces = module.split(".")
    if len(pieces) == 1 or pieces[1] == "__init__":
        return "base"
    if pieces[1] == "__main__":
        return "main"
    if pieces[1] in ALLOWED and len(pieces) >= 2 and (PACKAGE / pieces[1]).is_dir():
        return pieces[1]
    return "base"


def imported_names(path: Path) -> Iterator[str]:
    """Every absolute module name `path` imports (for `from m import n`: m.n when that is a
    module of the package, else m)."""
    known = modules()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in known else node.module


@cache
def graph() -> dict[str, frozenset[str]]:
    """module -> the package's modules it imports."""
    known = modules()
    return {
        name: frozenset(m for m in imported_names(path) if m in known and m != name)
        for name, path in known.items()
    }


def circles() -> list[list[str]]:
    """The import cycles, each as a list of modules (Tarjan's strongly connected components)."""
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def depth() -> int:
    """How many modules the longest chain of imports holds (circles cut where they close)."""
    edges = graph()
    memo: dict[str, int] = {}

    def longest(node: str, seen: frozenset[str]) -> int:
        if node in memo:
            return memo[node]
        below = [longest(n, seen | {node}) for n in edges[node] if n not in seen]
        memo[node] = 1 + max(below, default=0)
        return memo[node]

    return max(longest(n, frozenset()) for n in edges)


def upward_imports() -> list[str]:
    """Imports that break the layers, as 'module -> module (part -> part)'."""
    broken = []
    for module, targets in sorted(graph().items()):
        part = part_of(module)
        for target in sorted(targets):
            if part_of(target) not in ALLOWED[part]:
                broken.append(f"{module} -> {target} ({part} -> {part_of(target)})")
    return broken


def face_libraries_in_quiet_parts() -> list[str]:
    """Quiet parts that import rich, typer or the web stack."""
    found = []
    for module, path in sorted(modules().items()):
        if part_of(module) in QUIET:
            for name in imported_names(path):
                if name.split(".")[0] in FACE_LIBRARIES:
                    found.append(f"{module} imports {name}")
    return found


def llama_cpp_outside_llama() -> list[str]:
    return [
        module
        for module, path in sorted(modules().items())
        if part_of(module) != "llama"
        and any(n.split(".")[0] == "llama_cpp" for n in imported_names(path))
    ]


def main() -> None:
    by_part: dict[str, set[str]] = {}
    for module, targets in graph().items():
        by_part.setdefault(part_of(module), set()).update(part_of(t) for t in targets)
    for part in ALLOWED:
        uses = sorted(by_part.get(part, set()) - {part})
        print(f"{part:8} imports {', '.join(uses) or 'nothing'}")
    print(f"modules: {len(graph())}, longest import chain: {depth()} modules")
    print(f"circles: {circles() or 'none'}")
    print(f"imports up the layers: {upward_imports() or 'none'}")


if __name__ == "__main__":
    main()
