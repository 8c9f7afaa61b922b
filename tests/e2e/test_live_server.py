"""The live-server and browser fixtures that client, CLI and page tests build on."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from tests.support.browser import watched_page
from tests.support.live_server import LiveServer

# The fixtures are exercised by every live-server and browser test of the default tier; their
# own checks (≈ 12 s of CPU: a server of their own and a browser) run in `make test-heavy`.
pytestmark = [pytest.mark.slow, pytest.mark.heavy]


def test_live_server_serves_with_the_known_admin_key(live_server: LiveServer) -> None:
    sites = httpx2.get(f"{live_server.base_url}/v1/sites", headers=live_server.admin_headers)
    assert sites.status_code == 200
    assert httpx2.get(f"{live_server.base_url}/v1/sites").status_code == 401


def test_browser_reports_requests_to_other_hosts(live_server: LiveServer, browser: Any) -> None:
    page, record = watched_page(browser, live_server.base_url)
    page.set_content('<img src="https://cdn.example.org/x.png">')
    page.wait_for_load_state("networkidle")
    assert record.foreign_requests == ["https://cdn.example.org/x.png"]
    page.goto(f"{live_server.base_url}/healthz")
    assert "ok" in page.content().lower()
