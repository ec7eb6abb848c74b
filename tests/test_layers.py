"""The package's layers, as docs/design.md declares them, held by its imports: every module of
``spark_assign`` is in exactly one layer, and imports (at the top or inside a function) only
modules of its own layer or of a lower one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "spark_assign"

def declared_layers() -> list[tuple[int, str, list[str]]]:
    """``(layer, name, module patterns)`` from docs/design.md's table."""
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \|$", (ROOT / "docs" / "design.md").read_text(), re.M)
    assert rows, "docs/design.md has no layer table"
    return [(int(n), name.strip(), re.findall(r"`([^`]+)`", mods)) for n, name, mods in rows]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + [node.module]) if node.module else ".".join(base)
            found |= {t for t in [target, *(f"{target}.{a.name}" for a in node.names)] if t in modules}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
    return found - {name}


def layer_of(module: str, layers) -> int:
    """A module's layer: the one that names it, else the one whose ``package.*`` holds it."""
    short = module.removeprefix("spark_assign.") if module != "spark_assign" else "spark_assign"
    hits = [n for n, _, patterns in layers if short in patterns] or [
        n for n, _, patterns in layers for p in patterns if p.endswith(".*") and short.startswith(p[:-1])]
    assert len(hits) == 1, f"module {module} is in layers {hits} of docs/design.md: expected exactly one"
    return hits[0]


def test_every_import_goes_to_its_own_layer_or_a_lower_one():
    layers = declared_layers()
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    level = {m: layer_of(m, layers) for m in paths}
    upward = sorted((m, level[m], d, level[d]) for m, p in paths.items() for d in imports_of(p, set(paths))
                    if level[d] > level[m])
    assert not upward, "imports of a higher layer (module, its layer, imported, its layer): " + "; ".join(
        f"{m} ({a}) -> {d} ({b})" for m, a, d, b in upward)
