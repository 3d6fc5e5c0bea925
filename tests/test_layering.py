"""The import structure, read from the source files: parts import only their own floor or lower,
and no module imports itself through others (lazy imports inside functions count too)."""

from __future__ import annotations

import ast
from pathlib import Path

import attnmt

ROOT = Path(attnmt.__file__).parent

# ARCHITECTURE.md, "Layers": a part may import parts of its own floor or of lower floors.
FLOORS = {
    "errors": 0, "jsonio": 0, "files": 0, "progress": 0, "config": 0, "config_schema": 0, "strict_yaml": 0, "plugins": 0, "data": 0,
    "attention": 0, "kernels": 0,
    "models": 1, "ngram": 1, "corpora": 1,
    "runs": 2,
    "train": 3, "decode": 3, "eval": 3, "export": 3,
    "api": 4, "cli": 4, "serve": 4, "__init__": 4, "__main__": 4,
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The attnmt modules ``path`` imports anywhere in its body."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != "attnmt")
    return found


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, set(modules)) for name, path in modules.items()}


def test_every_part_has_a_floor():
    assert {_part(m) for m in _modules()} <= set(FLOORS)


def test_no_import_from_a_lower_floor_to_a_higher_one():
    upward = [f"{a} -> {b}" for a, deps in _graph().items() for b in deps
              if FLOORS[_part(b)] > FLOORS[_part(a)]]
    assert not upward


def _circles(graph: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    circles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                circles.append(" -> ".join(path[path.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return circles


def test_no_import_circles():
    assert not _circles(_graph())


def test_parts_form_no_circle():
    """Between parts too: if eval imports train, train must not import eval."""
    parts: dict[str, set[str]] = {}
    for a, deps in _graph().items():
        parts.setdefault(_part(a), set()).update(_part(b) for b in deps if _part(b) != _part(a))
    assert not _circles(parts)


def test_decode_does_not_stand_on_train():
    assert not [f"{a} -> {b}" for a, deps in _graph().items() for b in deps
                if _part(a) == "decode" and _part(b) == "train"]


def test_kernels_import_only_kernels():
    """The fast paths stand below the definitions they implement: attention/ and models/ call
    kernels/, and kernels/ import nothing else of attnmt (they name their definitions as text)."""
    assert not [f"{a} -> {b}" for a, deps in _graph().items() for b in deps
                if _part(a) == "kernels" and _part(b) != "kernels"]


def test_every_kernel_names_definitions_that_exist():
    import importlib
    import pkgutil

    import attnmt.kernels

    for info in pkgutil.iter_modules(attnmt.kernels.__path__):
        module = importlib.import_module(f"attnmt.kernels.{info.name}")
        for name in getattr(module, "IMPLEMENTS", ()):
            owner, _, attr = name.rpartition(".")
            try:
                target = importlib.import_module(owner)
            except ImportError:  # a class's method: owner is module.Class
                owner, _, cls = owner.rpartition(".")
                target = getattr(importlib.import_module(owner), cls)
            assert hasattr(target, attr), f"{info.name}: {name}"
