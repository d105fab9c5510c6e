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
"""The repository's top-level folders, installed as `convdb.<folder>` (pyproject's package-dir)."""
THIRD_PARTY_IN_PROJECTIONS = {"pydantic", "pydantic_core", "typing_extensions", "annotated_types"}
# Pure persistent data structures (no I/O, clock or randomness) that keep folds O(log n).
THIRD_PARTY_IN_PROJECTIONS |= {"pyrsistent", "immutables"}
# Standard-library modules that read the clock, make random ids or touch the network.
IMPURE_STDLIB = {"time", "random", "secrets", "socket", "ssl", "http", "urllib", "asyncio", "subprocess"}
IMPURE_CALLS = {"now", "utcnow", "today", "uuid1", "uuid4", "perf_counter", "monotonic"}


@dataclass(frozen=True)
class Import:
    """One imported module, where it is imported."""

    path: Path
    line: int
    module: str

    @property
    def top(self) -> str:
        """The first name (`convdb` for every convdb module)."""
        return self.module.split(".")[0]

    @property
    def package(self) -> str | None:
        """The convdb package imported (`infra` for `convdb.infra.kafka`), or None."""
        parts = self.module.split(".")
        return parts[1] if parts[0] == "convdb" and len(parts) > 1 else None

    def within(self, dotted: str) -> bool:
        """True when the module is `convdb.<dotted>` or below it."""
        name = f"convdb.{dotted}"
        return self.module == name or self.module.startswith(name + ".")

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line} imports {self.module}"


def modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "__pycache__" not in p.parts)


def dotted_package(where: Path) -> list[str]:
    """The import name of the package holding `where` (`convdb.projections.sub` for a file in
    `projections/sub/`, `tests.x` for one in `tests/x/`)."""
    parts = list(where.relative_to(ROOT).parent.parts)
    if parts and parts[0] in PACKAGES:
        return ["convdb", *parts]
    return parts


def imports_of(path: Path, where: Path | None = None) -> Iterator[Import]:
    """Every import in a module (top level, in functions, under TYPE_CHECKING), made absolute.

    `where` resolves relative imports as if the file lived there (for the resolver's own test).
    """
    where = where or path
    tree = ast.parse(path.read_text(), filename=str(path))
    package = dotted_package(where)
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


def violations(package: str, allowed: set[str], *, exempt: tuple[str, ...] = ()) -> list[str]:
    """Imports of other convdb packages outside `allowed`, as readable lines."""
    found = []
    for path in modules(package):
        if any(part in path.relative_to(ROOT).parts for part in exempt):
            continue
        for imp in imports_of(path):
            if imp.package and imp.package != package and imp.package not in allowed:
                found.append(str(imp))
    return found


def every_module() -> list[Path]:
    """The modules of every package, of the `convdb` folder, of the tests and of the benchmarks."""
    return [p for top in (*PACKAGES, "convdb", "tests", "bench") for p in modules(top)]


def test_every_package_has_modules() -> None:
    for package in PACKAGES:
        assert modules(package), package


def test_schemas_imports_no_other_convdb_package() -> None:
    assert not (found := violations("schemas", set())), "\n".join(found)


def test_infra_imports_only_schemas_except_the_cli_and_the_dev_floor() -> None:
    assert not (found := violations("infra", {"schemas"}, exempt=("cli", "dev"))), "\n".join(found)


def test_only_the_cli_tests_and_bench_import_the_dev_floor() -> None:
    found = []
    for path in every_module():
        rel = path.relative_to(ROOT).parts
        if rel[0] in ("tests", "bench") or rel[:2] in (("infra", "cli"), ("infra", "dev")):
            continue
        found += [str(imp) for imp in imports_of(path) if imp.within("infra.dev")]
    assert not found, "\n".join(found)


def test_nothing_imports_the_cli() -> None:
    """The CLI is the one composition root: no convdb module depends on it. Tests may call its
    entry point, and `python -m convdb` is its own."""
    found = []
    for path in every_module():
        rel = path.relative_to(ROOT).parts
        if rel[0] in ("tests", "bench") or rel[:2] == ("infra", "cli") or rel == ("convdb", "__main__.py"):
            continue
        found += [str(imp) for imp in imports_of(path) if imp.within("infra.cli")]
    assert not found, "\n".join(found)


def test_no_module_imports_a_folder_by_its_bare_name() -> None:
    """Every convdb import names `convdb.<package>`: a bare `schemas` would load a second copy of
    the package from the checkout, or a user's own package of that name."""
    found = [str(imp) for path in every_module() for imp in imports_of(path) if imp.top in PACKAGES]
    assert not found, "\n".join(found)


def test_producers_never_import_consumers() -> None:
    assert not (found := violations("producers", {"schemas", "infra", "projections"})), "\n".join(found)


def test_consumers_never_import_producers() -> None:
    assert not (found := violations("consumers", {"schemas", "infra", "projections"})), "\n".join(found)


def test_projections_import_only_schemas_pydantic_and_the_stdlib() -> None:
    found = []
    for path in modules("projections"):
        for imp in imports_of(path):
            if imp.package in ("projections", "schemas"):
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
        ("from . import x", "convdb.projections.sub.x"),
        ("from .. import y", "convdb.projections.y"),
        ("from ..view import fold", "convdb.projections.view"),
        ("import convdb.consumers.store", "convdb.consumers.store"),
        ("def f():\n    from convdb.producers.publisher import EventPublisher", "convdb.producers.publisher"),
    ],
)
def test_import_resolution(tmp_path: Path, source: str, expected: str) -> None:
    fake = tmp_path / "mod.py"
    fake.write_text(source)
    got = [i.module for i in imports_of(fake, where=ROOT / "projections" / "sub" / "mod.py")]
    assert got == [expected]


def module_name(path: Path) -> str:
    """The import name of a module file (`convdb.consumers.store` for consumers/store.py)."""
    package = dotted_package(path)
    return ".".join(package if path.name == "__init__.py" else [*package, path.stem])


def import_graph() -> dict[str, set[str]]:
    """convdb module -> the convdb modules it imports (at any depth: top level, in a function,
    under TYPE_CHECKING). `from package import module` counts as importing the module only."""
    files = {module_name(p): p for top in (*PACKAGES, "convdb") for p in modules(top)}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges = {imp.module for imp in imports_of(path) if imp.module in files}
        only_submodules, attributes_of = set(), set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                submodules = {f"{node.module}.{a.name}" for a in node.names} & files.keys()
                edges |= submodules
                whole = len(submodules) == len(node.names)
                (only_submodules if whole else attributes_of).add(node.module)
        edges -= only_submodules - attributes_of
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            for succ in edges:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    """Not even through a function-level or TYPE_CHECKING import: each one hides a dependency
    that goes both ways."""
    assert not (found := cycles(import_graph())), "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
