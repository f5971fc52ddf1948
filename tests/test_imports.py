"""The package's modules import each other without a cycle, and none imports another's private
names: a cycle (even through an import inside a function) means two modules that cannot be
read, tested or changed apart."""

from __future__ import annotations

import ast
from pathlib import Path

EAT = Path(__file__).resolve().parents[1] / "eat"


def module_name(path: Path) -> str:
    parts = path.relative_to(EAT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in EAT.rglob("*.py")}


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return (
        isinstance(node, ast.If)
        and isinstance(test, (ast.Name, ast.Attribute))
        and ast.unparse(test).endswith("TYPE_CHECKING")
    )


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names taken from it) of every import in the file, at any depth (an import
    inside a function still ties the two modules), except under `if TYPE_CHECKING:`."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if _type_checking_only(node):
            return
        if isinstance(node, ast.Import):
            found.extend((a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [a.name for a in node.names]
            subs = [f"{node.module}.{n}" for n in names if f"{node.module}.{n}" in MODULES]
            if subs and len(subs) == len(names):  # `from eat.runners import inputs`
                found.extend((s, []) for s in subs)
            else:
                found.append((node.module, names))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def graph() -> dict[str, set[str]]:
    return {
        name: {m for m, _ in imports(path) if m in MODULES and m != name}
        for name, path in MODULES.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_eat():
    assert cycles(graph()) == []


def test_no_module_imports_another_modules_private_names():
    private = [
        f"{module_name(path)} takes {name} from {module}"
        for path in MODULES.values()
        for module, names in imports(path)
        if module.startswith("eat")
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert private == []


# The loop's heart stays readable one function at a time (the supervisor's nodes, a turn, the
# run's state folds, the native runner's steps).
HEART = ("supervisor.py", "turn.py", "state.py", "runners/native.py")
LONGEST = 50


def test_no_function_in_the_loops_heart_is_over_50_lines():
    long = [
        f"{name}: {node.name} has {node.end_lineno - node.lineno + 1} lines"
        for name in HEART
        for node in ast.walk(ast.parse((EAT / name).read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > LONGEST
    ]
    assert long == []
