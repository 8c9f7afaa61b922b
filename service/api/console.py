"""The console: a small read-only page where a site's steward sees its datasets with budget
gauges and spend over time, jobs with live progress, models with their privacy receipts, their
private evaluations, and studies. Datasets and models show their task (binary, multi-class with
its classes in declared order, regression with its bounds), models their weights (per class;
for regression also in label units), evaluations of every task their release (docs/design.md).
Every ε and δ is shown as it is (scientific notation below 0.001), and every name chosen by a
site is shown inert (text only, isolated in ``<bdi>``, bidi controls shown as their code
points). With the admin key, which reaches no site's data, it shows the list of sites only.

Three files shipped in the package (``service/api/console/``: HTML, vanilla JavaScript, CSS;
no CDN, no build step) are served at ``/console``. The page reads the same ``/v1`` API with the
key the steward pastes, which it keeps in ``sessionStorage`` only (gone when the tab closes).
Every response carries a Content-Security-Policy allowing nothing but this origin: no inline
script or style, no other host. Acting (uploads, fits) stays with the API.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import Response

__all__ = ["CONSOLE_CSP", "install_console"]

#: Only this origin, no inline code: the page's own script, style sheet and API calls.
CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
_HEADERS = {
    "Content-Security-Policy": CONSOLE_CSP,
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_FILES = {
    "/console": ("index.html", "text/html; charset=utf-8"),
    "/console/console.js": ("console.js", "text/javascript; charset=utf-8"),
    "/console/console.css": ("console.css", "text/css; charset=utf-8"),
}


def _read(name: str) -> bytes:
    return files("service.api").joinpath("console", name).read_bytes()


def _endpoint(body: bytes, media_type: str) -> Callable[[], Response]:
    def serve() -> Response:
        return Response(body, media_type=media_type, headers=_HEADERS)

    return serve


def install_console(app: FastAPI) -> None:
    """Add ``GET /console`` and its two assets (kept out of the OpenAPI document)."""
    for path, (name, media_type) in _FILES.items():
        endpoint = _endpoint(_read(name), media_type)
        app.add_api_route(path, endpoint, methods=["GET"], include_in_schema=False)
