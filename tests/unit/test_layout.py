"""The package's shape: no import cycle, floors that imports only run down, one door to torch internals.

``recompute_pass`` and ``cost_model`` are checked for all three; ``benchmarks`` for cycles.

Read from the source (``ast``), so no module is imported. Every import statement counts,
those inside functions too; only imports under ``if TYPE_CHECKING:`` do not (none today).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("recompute_pass", "cost_model")
CHECKED = (*PACKAGES, "benchmarks")  # benchmarks: for import cycles only
# Each package's door to torch internals: a module, or a package with its modules.
DOORS = {"recompute_pass.torch_internals", "cost_model.torch_internals"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p
        for package in CHECKED
        for p in sorted((ROOT / package).rglob("*.py"))
        if "results" not in p.relative_to(ROOT).parts
    }


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from (i for n in node.orelse for i in _imports(ast.Module(body=[n], type_ignores=[])))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node)


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Absolute dotted names each import statement of ``module`` asks for: ``from a import b``
    gives ``a.b`` where that is a module of ours, else ``a``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def _edges() -> dict[str, set[str]]:
    """Module -> the package modules it imports (not the package ``__init__`` a submodule
    import runs implicitly: that is Python's order, not a dependency)."""
    return {
        module: {name for name in _imported_names(module, path) if name in MODULES and name != module}
        for module, path in MODULES.items()
    }


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.parametrize("package", CHECKED)
def test_no_import_cycle_between_modules(package: str) -> None:
    """Function-level imports count: ``benchmarks.cost_accuracy`` and its report, and
    ``benchmarks.distributed`` and ``benchmarks.frontier``, once imported each other inside functions."""
    edges = {m: targets for m, targets in _edges().items() if m.split(".")[0] == package}
    assert sum(map(len, edges.values())) > 10  # the parse found the package's imports
    assert _cycle(edges) is None


def _floor(module: str) -> str:
    """A module's room: its subpackage of ``recompute_pass`` (``recompute_pass.memory``), or
    the top-level module itself (``recompute_pass.report``)."""
    parts = module.split(".")
    return ".".join(parts[:2])


SUBPACKAGES = sorted(
    name
    for name, path in MODULES.items()
    if path.name == "__init__.py" and name.count(".") == 1
    if name.split(".")[0] in PACKAGES  # floors are the library's; benchmarks' folders have none
)


def test_floors_form_no_cycle() -> None:
    """Rooms (subpackages and top-level modules) as nodes: an import that ran up a floor
    would close a cycle here."""
    rooms: dict[str, set[str]] = {}
    for module, targets in _edges().items():
        if module.startswith("recompute_pass.") and module != "recompute_pass":
            room = rooms.setdefault(_floor(module), set())
            room |= {_floor(t) for t in targets if t.startswith("recompute_pass.")} - {_floor(module)}
    assert len(SUBPACKAGES) >= 5
    assert _cycle(rooms) is None


def _allowed(subpackage: str) -> set[str]:
    """What the subpackage's docstring says it may import: the names in double backticks
    of its ``Floor ...`` paragraph."""
    doc = ast.get_docstring(ast.parse(MODULES[subpackage].read_text())) or ""
    paragraph = next((p for p in doc.split("\n\n") if p.startswith("Floor ")), "")
    assert paragraph, f"{subpackage}'s docstring says no floor"
    return set(re.findall(r"``([\w.]+)``", paragraph))


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_each_floor_imports_what_its_docstring_says(subpackage: str) -> None:
    allowed = {f"recompute_pass.{name}" for name in _allowed(subpackage)} | {subpackage}
    external = {name.split(".")[0] for name in _allowed(subpackage)}
    wrong = set()
    for module, path in MODULES.items():
        if _floor(module) != subpackage or module == subpackage:
            continue
        for name in _imported_names(module, path):
            top = name.split(".")[0]
            if top == "recompute_pass" and name in MODULES and _floor(name) not in allowed:
                wrong.add(f"{module} imports {name}")
            if top in PACKAGES and top != "recompute_pass" and top not in external:
                wrong.add(f"{module} imports {name}")
            if top == "torch" and "no torch" in MODULES[subpackage].read_text():
                wrong.add(f"{module} imports {name}")
    assert not wrong, sorted(wrong)


def _private_torch(path: Path) -> list[str]:
    """Private torch names (``torch._x``, not dunders) a file imports or reads."""
    found = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Attribute):
            chain = []
            inner: ast.expr = node
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name):
                names = [".".join([inner.id, *reversed(chain)])]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["torch", "ops"]:  # operator names (aten, profiler), not private modules
                continue
            if parts[0] == "torch" and any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
                found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}: {name}")
    return found


def _behind_a_door(module: str) -> bool:
    return any(module == door or module.startswith(f"{door}.") for door in DOORS)


def test_private_torch_names_only_in_torch_internals() -> None:
    inside = [m for m in MODULES if m.startswith("recompute_pass.torch_internals.")]
    assert all(_private_torch(MODULES[m]) for m in inside)  # the check sees them there, in every area
    outside = [
        hit
        for module, path in MODULES.items()
        if module.split(".")[0] in PACKAGES and not _behind_a_door(module)
        for hit in _private_torch(path)
    ]
    assert not outside
