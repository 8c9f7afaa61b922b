"""First start without PRIVFIT_ADMIN_KEY: an admin key is generated, printed once, hashed."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from service.db.uow import UnitOfWorkFactory
from service.domain.access.keys import hash_key
from service.main import create_app
from service.settings import Settings
from tests.conftest import ADMIN_KEY

KEY_LINE = re.compile(r"^\s+(pf_[a-z0-9]{8}_[A-Za-z0-9_-]{43})$", re.MULTILINE)


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def start(db_url: str, admin_key: str | None = None) -> TestClient:
    settings = Settings(
        database_url=db_url,
        admin_key=SecretStr(admin_key) if admin_key else None,
        environment="test",
        job_runner="thread",  # no job runs here: no process pool to start and stop
    )
    return TestClient(create_app(settings))


def test_first_start_prints_a_key_once_and_stores_only_its_hash(
    db_url: str, capsys: pytest.CaptureFixture[str], uow_factory: UnitOfWorkFactory
) -> None:
    with start(db_url) as client:
        printed = capsys.readouterr().out
        keys = KEY_LINE.findall(printed)
        assert len(keys) == 1
        token = keys[0]
        headers = {"Authorization": f"Bearer {token}"}
        assert client.post("/v1/sites", json={"name": "a"}, headers=headers).status_code == 201

    with uow_factory() as uow:
        stored = uow.api_keys.active_admin_key()
        assert stored is not None
        assert stored.key_hash == hash_key(token)
        assert stored.site_id is None
        events = [e.action for e in uow.audit.list_page()]
    assert "admin_key.generated" in events
    if db_url.startswith("sqlite:///"):
        assert token.encode() not in Path(db_url.removeprefix("sqlite:///")).read_bytes()

    with start(db_url) as client:
        assert KEY_LINE.findall(capsys.readouterr().out) == []
        assert client.get("/v1/sites", headers=headers).status_code == 200


def test_configured_key_replaces_the_stored_one(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with start(db_url):
        (generated,) = KEY_LINE.findall(capsys.readouterr().out)
    with start(db_url, admin_key=ADMIN_KEY) as client:
        assert capsys.readouterr().out == ""
        configured = {"Authorization": f"Bearer {ADMIN_KEY}"}
        stored = {"Authorization": f"Bearer {generated}"}
        assert client.get("/v1/sites", headers=configured).status_code == 200
        assert client.get("/v1/sites", headers=stored).status_code == 401


def test_configured_key_means_nothing_is_generated(
    db_url: str, capsys: pytest.CaptureFixture[str], uow_factory: UnitOfWorkFactory
) -> None:
    with start(db_url, admin_key=ADMIN_KEY):
        pass
    assert capsys.readouterr().out == ""
    with uow_factory() as uow:
        assert uow.api_keys.active_admin_key() is None


def test_unmigrated_database_starts_without_a_key(
    empty_sqlite_url: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING), start(empty_sqlite_url) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 503
    assert capsys.readouterr().out == ""
    assert any("privfit migrate" in record.getMessage() for record in caplog.records)
