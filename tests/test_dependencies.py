"""Every third-party module the service imports is installed by its declared dependencies.

The image installs exactly ``requirements.lock``, which ``make lock`` compiles from
``pyproject.toml``; a module that is only present in a developer's virtualenv (installed by hand
or pulled in by a dev tool) would pass every other test and fail at import in production.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent

# Imported lazily by one optional feature and documented as the caller's own installation.
OPTIONAL_IMPORTS = {
    "sklearn": "service.domain.models.export.to_sklearn converts an export for a scikit-learn user",
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _runtime_closure() -> set[str]:
    """Distributions installed by ``[project] dependencies``, transitively (markers honoured)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pending = [Requirement(text) for text in pyproject["project"]["dependencies"]]
    seen: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = _normalise(requirement.name)
        extras = set(requirement.extras)
        key = name + "[" + ",".join(sorted(extras)) + "]"
        if key in seen:
            continue
        seen.add(key)
        seen.add(name)
        for text in metadata.requires(requirement.name) or []:
            child = Requirement(text)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if child.marker is None or any(child.marker.evaluate(env) for env in environments):
                pending.append(child)
    return {key for key in seen if "[" not in key}


def _imported_top_level_modules() -> dict[str, str]:
    """Top-level module → one file under ``service/`` that imports it (absolute imports only)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "service").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_service_imports_only_declared_dependencies() -> None:
    closure = _runtime_closure()
    providers = metadata.packages_distributions()
    missing = []
    for module, where in sorted(_imported_top_level_modules().items()):
        if module in sys.stdlib_module_names or module in {"service", "__future__"}:
            continue
        if module in OPTIONAL_IMPORTS:
            continue
        distributions = {_normalise(d) for d in providers.get(module, [])}
        if not distributions & closure:
            missing.append(f"{module} (imported by {where}; provided by {sorted(distributions)})")
    assert not missing, "not installed by pyproject's dependencies: " + "; ".join(missing)


def test_optional_imports_are_really_imported() -> None:
    """The allowance above stays as small as the code needs."""
    assert set(OPTIONAL_IMPORTS) <= set(_imported_top_level_modules())


def test_closure_follows_extras_and_transitive_requirements() -> None:
    closure = _runtime_closure()
    assert "starlette" in closure  # via fastapi
    assert "psycopg-binary" in closure  # via psycopg[binary]
    assert "pytest" not in closure  # a dev dependency only
