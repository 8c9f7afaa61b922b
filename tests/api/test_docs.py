"""The documentation pages name no other host and keep no key unless the operator opts in."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi.testclient import TestClient

from service.main import create_app
from service.settings import Settings

_FOREIGN_URL = re.compile(r"""(?:src|href|url)\s*[=:(]\s*["']?(?:https?:)?//""", re.IGNORECASE)


def test_docs_pages_load_every_asset_from_the_service(client: TestClient) -> None:
    for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        response = client.get(page)
        assert response.status_code == 200, page
        assert not _FOREIGN_URL.search(response.text), page
        assert "default-src 'self'" in response.headers["content-security-policy"]
        assert "fonts.googleapis" not in response.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png"):
        assert client.get(f"/docs-assets/{asset}").status_code == 200, asset


def test_swagger_ui_keeps_the_key_only_when_the_operator_opts_in(settings: Settings) -> None:
    default = TestClient(create_app(settings)).get("/docs").text
    assert '"persistAuthorization": false' in default
    opted_in = settings.model_copy(update={"docs_persist_authorization": True})
    assert '"persistAuthorization": true' in TestClient(create_app(opted_in)).get("/docs").text


def _directives(policy: str) -> dict[str, list[str]]:
    out = {}
    for directive in policy.split(";"):
        name, *values = directive.split()
        out[name] = values
    return out


def test_inline_scripts_run_only_by_their_hash(client: TestClient) -> None:
    """No ``'unsafe-inline'`` for scripts: each page allows exactly its own bootstrap block, so
    markup injected into the page (say, a crafted title) could not run."""
    for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        response = client.get(page)
        directives = _directives(response.headers["content-security-policy"])
        scripts = directives["script-src"]
        assert "'unsafe-inline'" not in scripts, page
        assert "'unsafe-eval'" not in scripts, page
        inline = re.findall(r"<script>(.*?)</script>", response.text, re.DOTALL)
        expected = [
            "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
            for body in inline
        ]
        assert scripts == ["'self'", *expected], page
        assert directives["object-src"] == ["'none'"]
    assert (
        len(_directives(client.get("/docs").headers["content-security-policy"])["script-src"]) == 2
    )
