"""Import rules of docs/design.md §1, checked on the source with ``ast`` (no imports executed).

* ``service.dp`` imports only the standard library, numpy, scipy, Google's ``dp_accounting``
  (noisy_gd's privacy accountant, pure numerics) and ``service.dp`` itself;
* only ``service.api`` (and ``service.main``, the composition root that builds the FastAPI app)
  imports FastAPI or Starlette;
* only ``service.db`` imports SQLAlchemy or Alembic (all SQL lives there);
* ``service.domain`` and ``service.db`` never import ``service.api``; ``service.db`` never imports
  ``service.domain`` use cases (only the plain ``service.domain.errors``);
* no import circles among ``service`` modules (lazy imports included).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

DP_ALLOWED_THIRD_PARTY = {"numpy", "scipy", "dp_accounting"}
WEB_FRAMEWORKS = {"fastapi", "starlette"}
DATABASE_LIBRARIES = {"sqlalchemy", "alembic", "psycopg", "psycopg2", "sqlite3"}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path = ROOT) -> Iterator[tuple[str, int]]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path, root)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield target, node.lineno
            for alias in node.names:
                yield f"{target}.{alias.name}", node.lineno


def service_files(root: Path = ROOT) -> list[Path]:
    return sorted((root / "service").rglob("*.py"))


def top(name: str) -> str:
    return name.split(".")[0]


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def dp_rule(module: str, name: str) -> bool:
    """service.dp: only the standard library, numpy, scipy, dp_accounting and service.dp."""
    if not in_package(module, "service.dp"):
        return False
    if top(name) == "service":
        return not in_package(name, "service.dp")
    return top(name) not in sys.stdlib_module_names | DP_ALLOWED_THIRD_PARTY


def web_rule(module: str, name: str) -> bool:
    """FastAPI/Starlette only in service.api and the composition root service.main."""
    allowed = in_package(module, "service.api") or module == "service.main"
    return top(name) in WEB_FRAMEWORKS and not allowed


def sql_rule(module: str, name: str) -> bool:
    """SQLAlchemy, Alembic and database drivers only in service.db."""
    return top(name) in DATABASE_LIBRARIES and not in_package(module, "service.db")


def no_api_below_rule(module: str, name: str) -> bool:
    """The domain and the database layers never depend on the HTTP layer."""
    lower = in_package(module, "service.domain") or in_package(module, "service.db")
    return lower and in_package(name, "service.api")


def db_below_domain_rule(module: str, name: str) -> bool:
    """service.db may use the domain's plain error classes, never its use cases."""
    return (
        in_package(module, "service.db")
        and in_package(name, "service.domain")
        and not in_package(name, "service.domain.errors")
    )


RULES = {
    "dp": dp_rule,
    "web": web_rule,
    "sql": sql_rule,
    "no-api-below": no_api_below_rule,
    "db-below-domain": db_below_domain_rule,
}


def violations(rule: str, root: Path = ROOT) -> list[str]:
    check = RULES[rule]
    found: list[str] = []
    for path in service_files(root):
        module = module_name(path, root)
        for name, line in imports_of(path, root):
            if check(module, name):
                found.append(f"{path.relative_to(root)}:{line} imports {name}")
    return found


@pytest.mark.parametrize("rule", sorted(RULES))
def test_import_rules(rule: str) -> None:
    assert violations(rule) == []


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        ("dp/bad.py", "from ..db import models\n", "dp"),
        ("dp/bad.py", "import pandas\n", "dp"),
        ("dp/sub/bad.py", "from ...api import deps\n", "dp"),
        ("domain/bad.py", "from fastapi import Depends\n", "web"),
        ("domain/bad.py", "from sqlalchemy import select\n", "sql"),
        ("db/bad.py", "from service.api.errors import Problem\n", "no-api-below"),
        ("db/bad.py", "from service.domain import sites\n", "db-below-domain"),
    ],
)
def test_the_rules_catch_violations(tmp_path: Path, module: str, source: str, rule: str) -> None:
    """Each rule fails on a planted violation, so an empty result above means something."""
    path = tmp_path / "service" / module
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert violations(rule, tmp_path) != []


def test_allowed_imports_pass(tmp_path: Path) -> None:
    package = tmp_path / "service"
    (package / "dp").mkdir(parents=True)
    (package / "dp" / "ok.py").write_text("import math\nimport numpy\nfrom . import noise\n")
    (package / "db").mkdir()
    (package / "db" / "ok.py").write_text("from sqlalchemy import select\n")
    (package / "db" / "errors_ok.py").write_text(
        "from service.domain.errors import NotFoundError\n"
    )
    for rule in RULES:
        assert violations(rule, tmp_path) == []


def test_dp_package_is_checked() -> None:
    """Guard against the rules silently checking nothing."""
    dp_files = [p for p in service_files() if in_package(module_name(p), "service.dp")]
    assert len(dp_files) >= 3


# --- no import circles ------------------------------------------------------------------------


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module → the ``service`` modules it imports anywhere in its source (lazy imports inside
    functions included: they hide a circle rather than remove it). ``from package import name``
    counts as importing ``package.name`` when that is a module, else ``package``. A package's
    modules importing the package's own ``__init__`` (which only hands names on) are not
    edges: Python runs a package's ``__init__`` before its modules anyway."""
    modules = {module_name(path, root): path for path in service_files(root)}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets: set[str] = set()
        for name, _line in imports_of(path, root):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and not in_package(module, name):
                targets.add(name)
        graph[module] = targets
    return graph


def import_circles(root: Path = ROOT) -> list[list[str]]:
    """Every import circle among ``service`` modules (strongly connected components of more
    than one module, or a module importing itself), each sorted; Tarjan's algorithm."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


def test_no_import_circles_in_service() -> None:
    assert import_circles() == []


def test_an_import_circle_is_caught_also_through_a_lazy_import(tmp_path: Path) -> None:
    package = tmp_path / "service" / "domain"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "jobs.py").write_text("def handlers():\n    from service.domain import fits\n")
    (package / "fits.py").write_text("from service.domain.jobs import handlers\n")
    (package / "other.py").write_text("from service.domain import fits\n")
    assert import_circles(tmp_path) == [["service.domain.fits", "service.domain.jobs"]]
    assert import_graph(tmp_path)["service.domain.other"] == {"service.domain.fits"}
