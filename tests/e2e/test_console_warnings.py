"""The console shows a fit's warnings (issue 28 item 4): a site with public reference rows of
Adult's spec fits at a budget far too small to beat the majority class; the job's row and the
model's row show ``below_majority_baseline`` with its message, and the job's expected accuracy
band next to the baseline. Headless Chromium, as tests/e2e/test_console.py."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from benchmarks.adult import csv_bytes, load_spec
from tests.support.browser import watched_page
from tests.support.live_server import LiveServer

# A console page in Chromium (a live server and a browser, ≈ 9 s of CPU): the default tier's
# browser smoke is tests/e2e/test_console.py's first test; CI runs this in `make test-heavy`.
pytestmark = [pytest.mark.slow, pytest.mark.heavy]

ROWS = 1_000


def _post(server: LiveServer, path: str, headers: dict[str, str], **kwargs: Any) -> Any:
    response = httpx2.post(f"{server.base_url}{path}", headers=headers, timeout=120, **kwargs)
    assert response.status_code in (200, 201, 202), response.text
    return response.json()


def _upload(server: LiveServer, site: dict[str, str], rows: list[str], spec: dict[str, Any]) -> Any:
    header = csv_bytes("train").decode().splitlines(keepends=True)[0]
    return _post(
        server,
        "/v1/datasets",
        site,
        files={
            "file": ("adult.csv", (header + "".join(rows)).encode(), "text/csv"),
            "spec": (None, json.dumps(spec)),
        },
    )


def test_the_console_shows_the_below_majority_warning(
    live_server: LiveServer, browser: Any
) -> None:
    created = _post(live_server, "/v1/sites", live_server.admin_headers, json={"name": "Warned"})
    key = created["key"]["api_key"]
    site = {"Authorization": f"Bearer {key}"}
    lines = csv_bytes("train").decode().splitlines(keepends=True)[1:]
    _upload(live_server, site, lines[:ROWS], {**load_spec(non_private=True), "name": "public"})
    dataset = _upload(live_server, site, lines[ROWS : 2 * ROWS], {**load_spec(), "name": "own"})
    # output perturbation, E‖b‖ = 2d/(nλε) ≈ 2·106/(1000·1e-4·0.01) ≈ 2e5: a random direction
    job = _post(
        live_server,
        f"/v1/datasets/{dataset['id']}/fits",
        {**site, "Prefer": "wait=60"},
        json={
            "mechanism": "output_perturbation",
            "epsilon": 0.01,
            "regularization": 1e-4,
        },
    )
    assert job["status"] == "succeeded", job
    assert [w["code"] for w in job["warnings"]] == ["below_majority_baseline"]

    page, record = watched_page(browser, live_server.base_url)
    page.goto(f"{live_server.base_url}/console")
    page.fill("#key", key)
    page.click("#login button[type=submit]")
    page.locator(".model-id").first.wait_for(timeout=30_000)

    job_warnings = page.locator(".job-warnings .warning-code").all_inner_texts()
    assert job_warnings == ["below_majority_baseline"]
    assert "majority-class" in page.locator(".job-warnings .warning-message").inner_text()
    model_warnings = page.locator(".model-warnings .warning-code").all_inner_texts()
    assert model_warnings == ["below_majority_baseline"]
    baseline = float(page.locator(".majority-baseline").inner_text())
    expected = float(page.locator(".expected-accuracy").inner_text().split(" ")[0])
    assert expected < baseline
    assert record.page_errors == []
    assert record.console_errors == []
