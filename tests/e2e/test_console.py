"""The console (GET /console) in headless Chromium: a steward pastes a site key and sees the
site's dataset with its budget (ε spent and remaining, a gauge and the spend over time), the
fit job's status and progress, the model with its privacy receipt, and the study, with no
request to another host, no console error, and a strict Content-Security-Policy. With the
admin key the page shows the site list only, and asks for no site's data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from benchmarks.adult import csv_bytes, load_spec
from tests.conftest import ADMIN_KEY
from tests.support.browser import watched_page
from tests.support.live_server import LiveServer, start_server

pytestmark = pytest.mark.slow

ROWS = 2_000


@pytest.fixture
def live_server(tmp_path: Path, sqlite_template: Path) -> Iterator[LiveServer]:
    """A server of the test's own (the admin's page lists every site) on the thread runner:
    the page shows a job's status, progress and model the same whichever runner ran it, and
    the process pool's warm worker is an interpreter importing the service (≈ 2.5 s of CPU)
    that adds no check here (the live servers of tests/client run their jobs on it)."""
    with start_server(
        f"sqlite:///{tmp_path / 'live' / 'privfit.db'}",
        admin_key=ADMIN_KEY,
        workdir=tmp_path,
        extra_env={"PRIVFIT_JOB_RUNNER": "thread"},
        migrated=sqlite_template,
    ) as server:
        yield server


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


RLO, RLI, PDI = "\u202e", "\u2067", "\u2069"


# The console's browser smoke is the test above; this page in Chromium (a live server and a
# browser, ≈ 9 s of CPU) runs in `make test-heavy` (issue 27 §5).
@pytest.mark.heavy
def test_the_console_shows_small_privacy_parameters_evaluations_and_inert_names(
    live_server: LiveServer, browser: Any
) -> None:
    """A (1, 1e-7) model reads "ε = 1, δ = 1e-7" (not "δ = 0"), the dataset's δ reads "1e-7
    of 1e-6", an evaluation at ε = 1e-6 is listed with its ε; the spend chart's axes are
    labelled. Names holding bidi controls neither reorder the text around them nor hide the
    controls."""
    created = _post(live_server, "/v1/sites", live_server.admin_headers, json={"name": "Ward 9"})
    key = created["key"]["api_key"]
    other = _post(live_server, "/v1/sites", live_server.admin_headers, json={"name": "Ward 10"})
    site = {"Authorization": f"Bearer {key}"}
    lines = csv_bytes("train").decode().splitlines(keepends=True)
    spec = load_spec()
    assert spec["budget"]["delta"] == pytest.approx(1e-6)
    dataset_name = f"Lab {RLO}fdp.exe"  # would read "Lab exe.pdf" if its override acted
    dataset = _post(
        live_server,
        "/v1/datasets",
        site,
        files={
            "file": ("adult.csv", "".join(lines[: ROWS + 1]).encode(), "text/csv"),
            "spec": (None, json.dumps({**spec, "name": dataset_name})),
        },
    )
    job = _post(
        live_server,
        f"/v1/datasets/{dataset['id']}/fits",
        {**site, "Prefer": "wait=30"},
        json={
            "mechanism": "gaussian_objective_perturbation",
            "epsilon": 1.0,
            "delta": 1e-7,
            "regularization": 1e-2,
        },
    )
    assert job["status"] == "succeeded", job
    evaluation = _post(
        live_server,
        f"/v1/models/{job['model_id']}/evaluations",
        {**site, "Prefer": "wait=30"},
        json={"dataset_id": dataset["id"], "epsilon": 1e-6},
    )
    assert evaluation["status"] == "succeeded", evaluation
    study_spec = {"label": spec["label"], "features": spec["features"]}
    _post(
        live_server,
        "/v1/studies",
        site,
        json={
            "name": f"{RLI}wards{PDI} study",
            "members": [other["site"]["id"]],
            "spec": study_spec,
        },
    )

    page, record = watched_page(browser, live_server.base_url)
    page.goto(f"{live_server.base_url}/console")
    page.fill("#key", key)
    page.click("#login button[type=submit]")
    card = page.locator(f".dataset[data-id='{dataset['id']}']")
    card.wait_for(timeout=30_000)
    page.locator(".evaluation-id").first.wait_for(timeout=30_000)
    page.locator(".study-name").first.wait_for(timeout=30_000)
    text = page.locator("main").inner_text()

    # every ε and δ as it is
    assert "1e-7" in text
    assert page.locator(".model-delta").all_inner_texts() == ["1e-7"]
    assert page.locator(".model-eps").all_inner_texts() == ["1"]
    assert "ε = 1, δ = 1e-7" in text
    assert card.locator(".delta-spent").inner_text() == "1e-7"
    assert card.locator(".delta-total").inner_text() == "1e-6"
    assert card.locator(".delta-remaining").inner_text() == "9e-7"
    assert card.locator(".eps-spent").inner_text() == "1.000001"  # 1 + the evaluation's 1e-6
    assert page.locator(".evaluation-eps").all_inner_texts() == ["1e-6"]
    accuracy = page.locator(".evaluation-accuracy").inner_text()
    assert accuracy.count("[") == 1, accuracy  # an estimate with its interval
    assert "δ spent 1e-7 of 1e-6" in card.inner_text()
    # the spend chart says what its axes are
    chart = card.locator("svg.spend")
    assert chart.locator("text.x-label").text_content() == "charges, oldest first"
    assert chart.locator("text.y-label").text_content() == "ε spent (cumulative)"
    assert chart.locator("text.x-tick").all_text_contents() == ["0", "2"]

    # names are inert: the controls are shown, not obeyed, and what follows stays in place
    name = card.locator(".name")
    assert name.inner_text() == "Lab [U+202E]fdp.exe"
    assert name.evaluate("n => n.tagName") == "BDI"
    assert name.get_attribute("dir") == "auto"
    name_box, id_box = name.bounding_box(), card.locator(".dataset-id").bounding_box()
    assert name_box is not None
    assert id_box is not None
    assert id_box["x"] >= name_box["x"] + name_box["width"] - 1  # the id still follows the name
    study_name = page.locator(".study-name").first
    assert study_name.inner_text() == "[U+2067]wards[U+2069] study"
    assert page.locator("#site .site-name").inner_text() == "Ward 9"
    assert RLO not in page.locator("body").inner_text()
    assert record.page_errors == []
    assert record.console_errors == []


# The console's browser smoke is the test above; this page in Chromium (a live server and a
# browser, ≈ 9 s of CPU) runs in `make test-heavy` (issue 27 §5).
@pytest.mark.heavy
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
