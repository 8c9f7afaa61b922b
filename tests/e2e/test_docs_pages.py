"""Swagger UI and ReDoc work offline: opened in headless Chromium with every request to another
host aborted, both pages render the operations from assets PrivFit serves itself, and in Swagger
UI "Authorize" with a site key and one "Try it out" call succeed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.conftest import ADMIN_KEY, NO_JOB_PROCESSES
from tests.support.browser import watched_page
from tests.support.live_server import LiveServer, start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def live_server(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[LiveServer]:
    """One server for both pages (each page reads only the operations, and what the site it
    creates owns): a second interpreter importing the service would add nothing checked. The
    pages run no job: the thread runner, without the process pool's warm worker."""
    workdir = tmp_path_factory.mktemp("docs-pages")
    with start_server(
        f"sqlite:///{workdir / 'privfit.db'}",
        admin_key=ADMIN_KEY,
        workdir=workdir,
        extra_env=NO_JOB_PROCESSES,
        migrated=sqlite_template,
    ) as server:
        yield server


def _site_key(server: LiveServer) -> str:
    created = httpx2.post(
        f"{server.base_url}/v1/sites", json={"name": "Docs Hospital"}, headers=server.admin_headers
    )
    assert created.status_code == 201, created.text
    key: str = created.json()["key"]["api_key"]
    return key


def test_swagger_ui_renders_authorizes_and_tries_a_call_offline(
    live_server: LiveServer, browser: Any
) -> None:
    key = _site_key(live_server)
    page, record = watched_page(browser, live_server.base_url)
    response = page.goto(f"{live_server.base_url}/docs")
    assert response is not None
    assert "default-src 'self'" in response.headers["content-security-policy"]
    page.wait_for_selector(".opblock-summary", timeout=30_000)
    summaries = page.locator(".opblock-summary-path").all_inner_texts()
    assert "/v1/datasets" in [s.replace("\u200b", "") for s in summaries]

    page.get_by_role("button", name="Authorize").first.click()
    page.locator(".modal-ux input[type=text], .modal-ux input[type=password]").first.fill(key)
    page.locator(".modal-ux .auth-btn-wrapper button.authorize").first.click()
    page.locator(".modal-ux button.btn-done").first.click()

    operation = page.locator("#operations-datasets-datasets-list_datasets")
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    operation.get_by_role("button", name="Execute").click()
    status = operation.locator(".live-responses-table .response .response-col_status").first
    status.wait_for(timeout=30_000)
    assert status.inner_text().strip() == "200"
    body = operation.locator(".live-responses-table .response-col_description pre").first
    assert re.search(r'"items"\s*:', body.inner_text())

    # The key is not kept across browser restarts unless the operator opts in.
    assert page.evaluate("() => window.localStorage.getItem('authorized')") is None
    assert record.foreign_requests == []
    assert record.page_errors == []
    assert record.console_errors == []


def test_redoc_renders_the_operations_offline(live_server: LiveServer, browser: Any) -> None:
    page, record = watched_page(browser, live_server.base_url)
    page.goto(f"{live_server.base_url}/redoc")
    page.wait_for_selector("[data-section-id^='tag/datasets']", timeout=30_000)
    text = page.locator("body").inner_text()
    assert "Upload a dataset" in text or "POST" in text
    # ReDoc has no Authorize button: its text says how to send a key from a shell instead
    assert "Authorize above" not in text
    assert 'curl -H "Authorization: Bearer $KEY"' in text
    assert page.locator("[data-section-id^='operation/']").count() > 10
    assert record.foreign_requests == []
    assert record.page_errors == []
    # ReDoc's bundle always tries to show Redocly's logo from cdn.redoc.ly; the page's CSP
    # blocks it in the browser (so no request leaves, as foreign_requests shows) and ReDoc
    # then hides the image. That block is the only message allowed.
    unexpected = [
        message
        for message in record.console_errors
        if not ("cdn.redoc.ly" in message and "Content Security Policy" in message)
    ]
    assert unexpected == []
