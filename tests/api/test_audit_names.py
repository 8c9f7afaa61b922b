"""Names in the audit log are inert, on SQLite and PostgreSQL: a dataset or study name holding
Unicode bidirectional controls is stored and returned as given, but the audit log's JSON text
carries each control as its ``\\uXXXX`` escape, so it cannot reorder what a reader sees. Site
names refuse them outright (422), as before."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from service.api.inert_json import escape_bidi_controls
from service.domain.access.sites import BIDI_CONTROLS
from tests.api.test_datasets import base_spec, csv_bytes, upload
from tests.conftest import SiteHandle

CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def test_the_audit_log_escapes_bidi_controls_in_names(
    client: TestClient, site: SiteHandle, admin_headers: dict[str, str]
) -> None:
    name = f"Lab {CONTROLS}fdp.exe"
    response = upload(client, site, csv_bytes(), base_spec(name=name))
    assert response.status_code == 201, response.text
    assert response.json()["name"] == name  # stored as given

    log = client.get(
        "/v1/audit-events", params={"action": "dataset.created"}, headers=admin_headers
    )
    assert log.status_code == 200
    assert log.headers["content-type"] == "application/json"
    text = log.content.decode("utf-8")
    assert not any(ch in text for ch in CONTROLS), "a raw bidi control in the audit log"
    assert "Lab \\u202a\\u202b\\u202c\\u202d\\u202e\\u2066" in text
    # the escapes are exact: a JSON reader gets the very name back
    assert [e["details"]["name"] for e in json.loads(text)["items"]] == [name]


def test_site_names_with_bidi_controls_are_refused(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    for ch in CONTROLS:
        response = client.post("/v1/sites", json={"name": f"St{ch} Mary"}, headers=admin_headers)
        assert response.status_code == 422, repr(ch)
        assert ch not in response.text


def test_escaping_covers_every_control_the_site_names_refuse() -> None:
    assert set(CONTROLS) == set(BIDI_CONTROLS)
    text = json.dumps({"n": CONTROLS + " plain ü"}, ensure_ascii=False)
    escaped = escape_bidi_controls(text)
    assert not set(escaped) & BIDI_CONTROLS
    assert "ü" in escaped
    assert json.loads(escaped) == json.loads(text)
