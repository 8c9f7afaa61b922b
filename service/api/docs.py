"""Swagger UI and ReDoc served entirely by PrivFit: no CDN, no third-party fonts or favicons.

The JavaScript and CSS come from the ``fastapi-offline`` distribution (which bundles
``swagger-ui-dist`` and ReDoc's standalone build) and are mounted under :data:`ASSETS_URL`, so the
pages work on a site network without internet and tell no third party who reads them. Each page
carries a Content-Security-Policy that forbids any other origin. Swagger UI keeps the pasted key
in ``localStorage`` across browser restarts only when ``PRIVFIT_DOCS_PERSIST_AUTHORIZATION`` is
set (off by default: a raw key left in a shared browser is a leaked key).
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_URL", "DOCS_CSP", "content_security_policy", "install_docs"]

#: Where the bundled Swagger UI / ReDoc files are served.
ASSETS_URL = "/docs-assets"
_ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"

#: Only this origin: styles may be inline (Swagger UI and ReDoc style elements at run time),
#: icons are data: URIs, ReDoc's web worker is a blob:. Scripts come from this origin or are the
#: page's own inline bootstrap, allowed by its SHA-256 (``{scripts}``), never any inline script.
DOCS_CSP = (
    "default-src 'self'; script-src 'self'{scripts}; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; "
    "object-src 'none'"
)
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def content_security_policy(html: str) -> str:
    """:data:`DOCS_CSP` allowing exactly the inline ``<script>`` blocks of ``html``."""
    hashes = "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
        for body in _INLINE_SCRIPT.findall(html)
    )
    return DOCS_CSP.format(scripts=hashes)


def _page(response: HTMLResponse) -> HTMLResponse:
    html = bytes(response.body).decode("utf-8")
    response.headers["Content-Security-Policy"] = content_security_policy(html)
    response.headers["Cache-Control"] = "no-store"
    return response


def install_docs(app: FastAPI, *, persist_authorization: bool = False) -> None:
    """Add ``/docs``, ``/docs/oauth2-redirect`` and ``/redoc`` backed by local assets.

    The app must be created with ``docs_url=None, redoc_url=None``."""
    openapi_url = app.openapi_url or "/openapi.json"
    app.mount(ASSETS_URL, StaticFiles(directory=_ASSETS_DIR), name="docs-assets")
    parameters = {
        "persistAuthorization": persist_authorization,
        "displayRequestDuration": True,
        "tryItOutEnabled": False,
    }

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return _page(
            get_swagger_ui_html(
                openapi_url=openapi_url,
                title=f"{app.title} - Swagger UI",
                oauth2_redirect_url="/docs/oauth2-redirect",
                swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
                swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
                swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
                swagger_ui_parameters=parameters,
            )
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return _page(get_swagger_ui_oauth2_redirect_html())

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return _page(
            get_redoc_html(
                openapi_url=openapi_url,
                title=f"{app.title} - ReDoc",
                redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
                with_google_fonts=False,
            )
        )
