"""Authentication: bearer keys, 401/403 problems, audit of failures, no secrets in logs."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from service.db.uow import UnitOfWorkFactory
from tests.conftest import ADMIN_KEY, SiteHandle

PROBLEM = "application/problem+json"


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer "},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Token abc"},
    ],
)
def test_missing_key_is_401(client: TestClient, headers: dict[str, str]) -> None:
    response = client.get("/v1/sites/me", headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == PROBLEM
    assert response.headers["www-authenticate"] == "Bearer"
    problem = response.json()
    assert problem["type"] == "https://privfit.dev/problems/unauthenticated"
    assert problem["instance"] == "/v1/sites/me"
    assert problem["request_id"] == response.headers["x-request-id"]


@pytest.mark.parametrize(
    "token",
    [
        "nonsense",
        "pf_abcdefgh_short",
        "pf_ABCDEFGH_" + "x" * 43,
        "pf_zz00zz00_" + "A" * 43,  # well-formed, unknown prefix
        ADMIN_KEY + "x",
        "x" * 5000,
    ],
    ids=["nonsense", "short", "uppercase-prefix", "unknown-prefix", "admin-plus-one", "huge"],
)
def test_wrong_key_is_401_and_audited(
    client: TestClient, uow_factory: UnitOfWorkFactory, token: str
) -> None:
    response = client.get("/v1/sites/me", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401
    assert response.headers["content-type"] == PROBLEM
    with uow_factory() as uow:
        events = uow.audit.list_page(action="auth.failed")
    assert len(events) == 1
    event = events[0]
    assert event.outcome == "failure"
    assert event.request_id == response.headers["x-request-id"]
    assert token not in str(
        [event.key_prefix, event.details, event.subject_id, event.actor_site_id]
    )


def test_right_prefix_wrong_secret_is_401(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    forged = site.key[:12] + ("A" if site.key[12] != "A" else "B") + site.key[13:]
    response = client.get("/v1/sites/me", headers={"Authorization": f"Bearer {forged}"})
    assert response.status_code == 401
    with uow_factory() as uow:
        (event,) = uow.audit.list_page(action="auth.failed")
    assert event.details == {"reason": "wrong_secret"}
    assert event.key_prefix == site.key.split("_")[1]


def test_keys_never_reach_the_logs(
    client: TestClient, site: SiteHandle, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        client.get("/v1/sites/me", headers=site.headers)
        client.get("/v1/sites/me", headers={"Authorization": "Bearer pf_aaaaaaaa_" + "s" * 43})
        rotated = client.post("/v1/sites/me/keys/rotate", headers=site.headers).json()
    logged = "\n".join(f"{record.getMessage()} {record.__dict__}" for record in caplog.records)
    assert "privfit.access" in {record.name for record in caplog.records}
    for secret in (site.key, rotated["api_key"], "s" * 43, ADMIN_KEY):
        assert secret not in logged
    assert "authorization" not in logged.lower()


def test_admin_key_from_settings_works(client: TestClient, admin_headers: dict[str, str]) -> None:
    assert client.get("/v1/sites", headers=admin_headers).status_code == 200
    lower = {"Authorization": f"bearer {ADMIN_KEY}"}
    assert client.get("/v1/sites", headers=lower).status_code == 200
