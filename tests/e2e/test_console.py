"""The console (GET /console) in headless Chromium: a steward pastes a site key and sees the
site's dataset with its budget (ε spent and remaining, a gauge and the spend over time), the
fit job's status and progress, the model with its privacy receipt, and the study, with no
request to another host, no console error, and a strict Content-Security-Policy. With the
admin key the page shows the site list only, and asks for no site's data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from benchmarks.adult import csv_bytes, load_spec
from tests.support.browser import watched_page
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.slow

ROWS = 2_000


def _post(server: LiveServer, path: str, headers: dict[str, str], **kwargs: Any) -> Any:
    response = httpx2.post(f"{server.base_url}{path}", headers=headers, timeout=120, **kwargs)
    assert response.status_code in (200, 201), response.text
    return response.json()


def test_the_console_shows_a_sites_datasets_jobs_models_and_studies(
    live_server: LiveServer, browser: Any, tmp_path: Path
) -> None:
    created = _post(live_server, "/v1/sites", live_server.admin_headers, json={"name": "Console"})
    key = created["key"]["api_key"]
    other = _post(live_server, "/v1/sites", live_server.admin_headers, json={"name": "Partner"})
    site = {"Authorization": f"Bearer {key}"}

    lines = csv_bytes("train").decode().splitlines(keepends=True)
    spec = load_spec()
    dataset = _post(
        live_server,
        "/v1/datasets",
        site,
        files={
            "file": ("adult.csv", "".join(lines[: ROWS + 1]).encode(), "text/csv"),
            "spec": (None, json.dumps({**spec, "name": "Adult sample"})),
        },
    )
    job = _post(
        live_server,
        f"/v1/datasets/{dataset['id']}/fits",
        {**site, "Prefer": "wait=60"},
        json={
            "mechanism": "objective_perturbation",
            "epsilon": 0.75,
            "delta": 0.0,
            "regularization": 1e-3,
        },
    )
    assert job["status"] == "succeeded", job
    study_spec = {"label": spec["label"], "features": spec["features"]}
    study = _post(
        live_server,
        "/v1/studies",
        site,
        json={"name": "Console study", "members": [other["site"]["id"]], "spec": study_spec},
    )

    page, record = watched_page(browser, live_server.base_url)
    response = page.goto(f"{live_server.base_url}/console")
    assert response is not None
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    page.fill("#key", key)
    page.click("#login button[type=submit]")
    card = page.locator(f".dataset[data-id='{dataset['id']}']")
    card.wait_for(timeout=30_000)
    page.locator(".model-id").first.wait_for(timeout=30_000)
    page.get_by_text("Console study").wait_for(timeout=30_000)

    total = spec["budget"]["epsilon"]
    assert card.locator(".name").inner_text() == "Adult sample"
    assert float(card.locator(".eps-spent").inner_text()) == pytest.approx(0.75)
    assert float(card.locator(".eps-total").inner_text()) == pytest.approx(total)
    assert float(card.locator(".eps-remaining").inner_text()) == pytest.approx(total - 0.75)
    assert card.locator("svg.gauge rect.used").count() == 1
    assert card.locator("svg.spend polyline").count() == 1
    assert page.locator(".job-status").all_inner_texts() == ["succeeded"]
    assert page.locator(".model-id").all_inner_texts() == [job["model_id"]]
    receipt = page.locator("pre.receipt").first.text_content() or ""
    assert json.loads(receipt)["epsilon"] == pytest.approx(0.75)
    assert study["id"] in page.locator("#studies").inner_text()
    # the key is kept for this tab only
    assert page.evaluate("() => sessionStorage.getItem('privfit.key')") == key
    assert page.evaluate("() => localStorage.length") == 0
    page.screenshot(path=str(tmp_path / "console.png"), full_page=True)
    assert (tmp_path / "console.png").stat().st_size > 0

    assert record.foreign_requests == []
    assert record.page_errors == []
    assert record.console_errors == []


def test_the_console_shows_the_admin_only_the_site_list(
    live_server: LiveServer, browser: Any
) -> None:
    created = _post(live_server, "/v1/sites", live_server.admin_headers, json={"name": "Clinic"})
    site = {"Authorization": f"Bearer {created['key']['api_key']}"}
    model = _post(
        live_server,
        "/v1/models",
        site,
        json={
            "label": {"column": "outcome", "positive": "yes"},
            "features": [{"column": "age", "type": "numeric", "lower": 18, "upper": 90}],
            "weights": [0.5, -1.0],
        },
    )
    retired = _post(live_server, "/v1/sites", live_server.admin_headers, json={"name": "Gone"})
    _post(live_server, f"/v1/sites/{retired['site']['id']}/deactivate", live_server.admin_headers)

    page, record = watched_page(browser, live_server.base_url)
    api_paths: list[str] = []
    page.on(
        "request",
        lambda request: (
            api_paths.append(request.url.removeprefix(live_server.base_url))
            if "/v1/" in request.url
            else None
        ),
    )
    page.goto(f"{live_server.base_url}/console")
    page.fill("#key", live_server.admin_headers["Authorization"].removeprefix("Bearer "))
    page.click("#login button[type=submit]")
    page.locator(".site-name").first.wait_for(timeout=30_000)

    assert page.locator(".site-name").all_inner_texts() == ["Clinic", "Gone"]
    sites_text = page.locator("#sites").inner_text()
    assert created["site"]["id"] in sites_text
    assert "deactivated" in sites_text
    assert page.locator("#sites-section").is_visible()
    for section in page.locator("section.site-data").all():
        assert not section.is_visible()
    # the page asked for nothing but who the key is and the sites: no site's data
    assert api_paths == ["/v1/sites/whoami", "/v1/sites?limit=200"]
    assert model["id"] not in page.locator("body").inner_text()
    assert record.foreign_requests == []
    assert record.page_errors == []
    assert record.console_errors == []
