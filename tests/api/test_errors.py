"""Every error is RFC 9457 problem+json: 404, 405, 413, 422, 500."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from httpx2 import Response

from service.api.routes import API_V1
from service.settings import Settings


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


PROBLEM = "application/problem+json"
PROBLEM_KEYS = {"type", "title", "status", "detail", "instance", "request_id"}


def assert_problem(response: Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert set(body) >= PROBLEM_KEYS
    assert body["type"] == f"https://privfit.dev/problems/{slug}"
    assert body["status"] == status
    assert body["request_id"] == response.headers["x-request-id"]
    return body


def test_unknown_route_is_404(client: TestClient) -> None:
    body = assert_problem(client.get("/v1/nothing-here"), 404, "not-found")
    assert body["instance"] == "/v1/nothing-here"


def test_wrong_method_is_405_with_allow(client: TestClient) -> None:
    response = client.put("/v1/sites/me")
    assert_problem(response, 405, "method-not-allowed")
    assert "GET" in response.headers["allow"]


def test_validation_error_is_422_with_errors(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    response = client.get("/v1/sites", params={"limit": "many"}, headers=admin_headers)
    body = assert_problem(response, 422, "validation-failed")
    assert body["errors"] == [
        {
            "loc": ["query", "limit"],
            "msg": "Input should be a valid integer, unable to parse string as an integer",
            "type": "int_parsing",
        }
    ]


def test_malformed_json_is_422(client: TestClient, admin_headers: dict[str, str]) -> None:
    response = client.post(
        "/v1/sites",
        content=b'{"name": ',
        headers={**admin_headers, "Content-Type": "application/json"},
    )
    assert_problem(response, 422, "validation-failed")


@pytest.mark.parametrize(
    "body",
    [b"\xff\xfe{}", b'{"name": "\xe9"}', b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"],
    ids=["bom", "latin-1", "nested-too-deep"],
)
def test_undecodable_body_is_422(
    client: TestClient, admin_headers: dict[str, str], body: bytes
) -> None:
    response = client.post(
        "/v1/sites", content=body, headers={**admin_headers, "Content-Type": "application/json"}
    )
    assert_problem(response, 422, "validation-failed")


def test_huge_integers_are_422(client: TestClient, admin_headers: dict[str, str]) -> None:
    response = client.get("/v1/sites", params={"offset": str(10**30)}, headers=admin_headers)
    assert_problem(response, 422, "validation-failed")


def test_declared_body_over_the_limit_is_413(
    client: TestClient, admin_headers: dict[str, str], settings: Settings
) -> None:
    body = b'{"name": "' + b"x" * settings.max_json_bytes + b'"}'
    response = client.post(
        "/v1/sites", content=body, headers={**admin_headers, "Content-Type": "application/json"}
    )
    detail = assert_problem(response, 413, "payload-too-large")["detail"]
    assert str(settings.max_json_bytes) in str(detail)


def test_streamed_body_over_the_limit_is_413(
    client: TestClient, admin_headers: dict[str, str], settings: Settings
) -> None:
    """Chunked upload without Content-Length: the middleware counts the bytes as they arrive."""
    chunk = b"x" * 65536
    chunks = settings.max_json_bytes // len(chunk) + 2

    def stream() -> Iterator[bytes]:
        yield b'{"name": "'
        for _ in range(chunks):
            yield chunk
        yield b'"}'

    response = client.post(
        "/v1/sites",
        content=stream(),
        headers={**admin_headers, "Content-Type": "application/json"},
    )
    assert "content-length" not in response.request.headers
    assert_problem(response, 413, "payload-too-large")


def test_body_under_the_limit_passes(client: TestClient, admin_headers: dict[str, str]) -> None:
    response = client.post("/v1/sites", json={"name": "small"}, headers=admin_headers)
    assert response.status_code == 201


@pytest.fixture
def crashing_app(app: FastAPI) -> FastAPI:
    @app.get(f"{API_V1}/boom", include_in_schema=False)
    def boom() -> None:
        raise RuntimeError("secret internals: password=hunter2")

    return app


def test_unexpected_failure_is_500_without_internals(
    crashing_app: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    with TestClient(crashing_app) as client:
        response = client.get(f"{API_V1}/boom")
    body = assert_problem(response, 500, "internal-error")
    assert "hunter2" not in response.text
    assert "RuntimeError" not in response.text
    assert "Traceback" not in response.text
    assert body["detail"] == "An unexpected error occurred. Quote the request id when reporting it."
    # The details are in the server log, under the same request id.
    errors = [r for r in caplog.records if r.name == "privfit.error"]
    assert errors
    assert errors[0].exc_info is not None
