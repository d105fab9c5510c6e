"""The layering rules of STYLE §1, checked on every module's imports (ast, nothing is imported)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("schemas", "projections", "infra", "producers", "consumers")
THIRD_PARTY_IN_PROJECTIONS = {"pydantic", "pydantic_core", "typing_extensions", "annotated_types"}
# Pure persistent data structures (no I/O, clock or randomness) that keep folds O(log n).
THIRD_PARTY_IN_PROJECTIONS |= {"pyrsistent", "immutables"}
# Standard-library modules that read the clock, make random ids or touch the network.
IMPURE_STDLIB = {"time", "random", "secrets", "socket", "ssl", "http", "urllib", "asyncio", "subprocess"}
IMPURE_CALLS = {"now", "utcnow", "today", "uuid1", "uuid4", "perf_counter", "monotonic"}


@dataclass(frozen=True)
class Import:
    """One imported top-level module, where it is imported."""

    path: Path
    line: int
    module: str

    @property
    def top(self) -> str:
        return self.module.split(".")[0]

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} imports {self.module}"


def modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def imports_of(path: Path, where: Path | None = None) -> Iterator[Import]:
    """Every import in a module (top level, in functions, under TYPE_CHECKING), made absolute.

    `where` resolves relative imports as if the file lived there (for the resolver's own test).
    """
    where = where or path
    tree = ast.parse(path.read_text(), filename=str(path))
    package = where.relative_to(ROOT).parent.parts
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(where, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if not node.level:
                yield Import(where, node.lineno, node.module or "")
                continue
            base = list(package[: len(package) - node.level + 1])
            names = [node.module] if node.module else [a.name for a in node.names]
            for name in names:
                yield Import(where, node.lineno, ".".join([*base, name]))


def violations(package: str, allowed: set[str], *, exempt: str | None = None) -> list[str]:
    """Imports of other convdb packages outside `allowed`, as readable lines."""
    found = []
    for path in modules(package):
        if exempt and exempt in path.relative_to(ROOT).parts:
            continue
        for imp in imports_of(path):
            if imp.top in PACKAGES and imp.top != package and imp.top not in allowed:
                found.append(str(imp))
    return found


def test_every_package_has_modules() -> None:
    for package in PACKAGES:
        assert modules(package), package


def test_schemas_imports_no_other_convdb_package() -> None:
    assert not (found := violations("schemas", set())), "\n".join(found)


def test_infra_imports_only_schemas_except_the_cli() -> None:
    assert not (found := violations("infra", {"schemas"}, exempt="cli")), "\n".join(found)


def test_producers_never_import_consumers() -> None:
    assert not (found := violations("producers", {"schemas", "infra", "projections"})), "\n".join(found)


def test_consumers_never_import_producers() -> None:
    assert not (found := violations("consumers", {"schemas", "infra", "projections"})), "\n".join(found)


def test_projections_import_only_schemas_pydantic_and_the_stdlib() -> None:
    found = []
    for path in modules("projections"):
        for imp in imports_of(path):
            if imp.top in ("projections", "schemas"):
                continue
            if imp.top in IMPURE_STDLIB:
                found.append(f"{imp} (clock, randomness or network)")
            elif imp.top not in sys.stdlib_module_names and imp.top not in THIRD_PARTY_IN_PROJECTIONS:
                found.append(f"{imp} (not stdlib, pydantic or schemas)")
    assert not found, "\n".join(found)


def test_projections_read_no_clock_and_make_no_random_ids() -> None:
    found = []
    for path in modules("projections"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in IMPURE_CALLS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} calls .{node.func.attr}()")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from . import x", "projections.sub.x"),
        ("from .. import y", "projections.y"),
        ("from ..view import fold", "projections.view"),
        ("import consumers.store", "consumers.store"),
        ("def f():\n    from producers.publisher import EventPublisher", "producers.publisher"),
    ],
)
def test_import_resolution(tmp_path: Path, source: str, expected: str) -> None:
    fake = tmp_path / "mod.py"
    fake.write_text(source)
    got = [i.module for i in imports_of(fake, where=ROOT / "projections" / "sub" / "mod.py")]
    assert got == [expected]
