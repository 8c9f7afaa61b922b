"""Health, readiness, metrics, request ids and JSON logs."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from service.db.migrate import downgrade
from service.logs import JsonFormatter, request_id_var
from service.main import create_app
from service.settings import Settings
from tests.conftest import ADMIN_KEY, SiteHandle


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_when_migrated(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["status"] == "ready"


def test_readyz_is_503_when_not_migrated(client: TestClient, db_url: str) -> None:
    downgrade(db_url, "base")
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert "privfit migrate" in response.json()["detail"]
    assert client.get("/healthz").status_code == 200


def test_readyz_is_503_when_unreachable(tmp_path: Path) -> None:
    # A directory cannot be opened as a SQLite database: "unreachable".
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}",
        admin_key=SecretStr(ADMIN_KEY),
        environment="test",
        job_runner="thread",
    )
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["detail"] == "the database is not reachable"
        assert str(tmp_path) not in response.text
        assert client.get("/healthz").status_code == 200


def _samples(client: TestClient) -> dict[tuple[str, str, str], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    counts = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "privfit_http_requests_total":
                labels = sample.labels
                counts[(labels["method"], labels["route"], labels["status"])] = sample.value
    return counts


def test_metrics_count_by_route_template_and_status(client: TestClient, site: SiteHandle) -> None:
    client.get(f"/v1/sites/{site.id}", headers=site.headers)
    client.get(f"/v1/sites/{'0' * 32}", headers=site.headers)
    client.get("/v1/sites/me")
    client.get("/no/such/path/123")
    client.get("/openapi.json")
    counts = _samples(client)
    assert counts[("GET", "/v1/sites/{site_id}", "200")] == 1
    assert counts[("GET", "/v1/sites/{site_id}", "404")] == 1
    assert counts[("GET", "/v1/sites/me", "401")] == 1
    assert counts[("POST", "/v1/sites", "201")] == 1
    assert counts[("GET", "<unmatched>", "404")] == 1
    assert counts[("GET", "/openapi.json", "200")] == 1
    assert not any(site.id in route for _, route, _ in counts)
    text = client.get("/metrics").text
    assert 'privfit_http_request_duration_seconds_bucket{le="0.005",method="GET"' in text


def test_each_app_has_its_own_registry(settings: Settings) -> None:
    first, second = create_app(settings), create_app(settings)
    with TestClient(first) as a, TestClient(second) as b:
        a.get("/healthz")
        assert ("GET", "/healthz", "200") in _samples(a)
        assert ("GET", "/healthz", "200") not in _samples(b)


def test_request_id_is_generated_and_returned(client: TestClient) -> None:
    one = client.get("/healthz").headers["x-request-id"]
    two = client.get("/healthz").headers["x-request-id"]
    assert one != two
    assert len(one) == 32


def test_client_request_id_is_echoed_when_plain(client: TestClient) -> None:
    response = client.get("/healthz", headers={"X-Request-ID": "abc-123.x_Y"})
    assert response.headers["x-request-id"] == "abc-123.x_Y"
    hostile = client.get("/healthz", headers={"X-Request-ID": "a\tb" + "x" * 100})
    assert hostile.headers["x-request-id"] != "a\tb" + "x" * 100


def test_access_log_is_json_with_request_id(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="privfit.access"):
        response = client.get("/healthz", headers={"X-Request-ID": "req-42"})
    assert response.headers["x-request-id"] == "req-42"
    (record,) = [r for r in caplog.records if r.name == "privfit.access"]
    line = json.loads(JsonFormatter().format(record))
    assert line["request_id"] == "req-42"
    assert line["route"] == "/healthz"
    assert line["path"] == "/healthz"
    assert line["status"] == 200
    assert line["method"] == "GET"
    assert line["level"] == "INFO"
    assert line["logger"] == "privfit.access"
    assert isinstance(line["duration_ms"], float)


def test_json_formatter_uses_the_context_request_id_and_formats_exceptions() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s", ("here",), exc_info)
    token = request_id_var.set("ctx-1")
    try:
        line = json.loads(JsonFormatter().format(record))
    finally:
        request_id_var.reset(token)
    assert line["message"] == "failed here"
    assert line["request_id"] == "ctx-1"
    assert "ValueError: boom" in line["exc_info"]
    assert "request_id" not in json.loads(JsonFormatter().format(record))


def test_metrics_report_jobs_by_kind_status_and_mechanism(
    client: TestClient, site: SiteHandle
) -> None:
    from tests.unit.jobs._flow import fit_body, upload

    dataset = upload(client, site.headers)
    prefer = {**site.headers, "Prefer": "wait=30"}
    for epsilon in (0.25, 0.5):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits", json=fit_body(epsilon=epsilon), headers=prefer
        )
        assert response.status_code == 201, response.text
    third = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=fit_body(epsilon=0.125), headers=site.headers
    ).json()
    client.post(f"/v1/jobs/{third['id']}/cancel", headers=site.headers)
    third = client.get(f"/v1/jobs/{third['id']}?wait=30", headers=site.headers).json()
    # Refunded when the cancel came while it was queued; else it ran (or stopped) charged.
    refunded_epsilon = 0.125 if third["charges"][0]["state"] == "refunded" else 0.0

    families = {
        family.name: family
        for family in text_string_to_metric_families(client.get("/metrics").text)
    }
    finished = {
        (s.labels["kind"], s.labels["status"]): s.value
        for s in families["privfit_jobs_finished"].samples
    }
    assert finished[("fit", "succeeded")] == 2 + (third["status"] == "succeeded")
    assert sum(finished.values()) == 3
    durations = {
        (s.labels["kind"], s.labels["mechanism"]): s.value
        for s in families["privfit_job_duration_seconds"].samples
        if s.name.endswith("_count")
    }
    # Durations are of jobs that ran: a job cancelled while queued never started.
    assert durations == {("fit", "objective_perturbation"): 3 - (refunded_epsilon > 0)}
    (charged,) = families["privfit_epsilon_charged"].samples
    assert charged.value == pytest.approx(0.875)
    (refunded,) = families["privfit_epsilon_refunded"].samples
    assert refunded.value == pytest.approx(refunded_epsilon)
    assert "privfit_jobs_queued" in families
    # Nothing per dataset or per site.
    text = client.get("/metrics").text
    assert dataset["id"] not in text
    assert site.id not in text
