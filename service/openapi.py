"""Write the app's OpenAPI document to ``openapi/openapi.json`` (``make openapi``).

``python -m service.openapi [--check] [PATH]``; ``--check`` exits 1 when the file differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from service.settings import Settings, project_root

__all__ = ["DEFAULT_PATH", "live_spec", "main", "render", "write"]

DEFAULT_PATH = project_root() / "openapi" / "openapi.json"


def live_spec() -> dict[str, Any]:
    """The OpenAPI document of an app built with default settings (no database is opened)."""
    from service.main import create_app

    app = create_app(Settings(database_url="sqlite://", admin_key=None, environment="dev"))
    return app.openapi()


def render(spec: dict[str, Any]) -> str:
    """Canonical text: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(spec, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write(path: Path = DEFAULT_PATH) -> bool:
    """Write the spec to ``path``; True when the file changed."""
    text = render(live_spec())
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m service.openapi", description=__doc__)
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    args = parser.parse_args(argv)
    path: Path = args.path
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else ""
        if current != render(live_spec()):
            sys.stderr.write(f"{path} is out of date: run `make openapi`\n")
            return 1
        return 0
    changed = write(path)
    sys.stdout.write(f"{'wrote' if changed else 'unchanged'} {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
