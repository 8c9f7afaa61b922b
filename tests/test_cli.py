"""The ``privfit`` command, run in-process against a temporary SQLite database."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service import cli
from service.main import create_app
from service.settings import Settings, get_settings


@pytest.fixture
def cli_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, empty_sqlite_url: str) -> Iterator[str]:
    monkeypatch.setenv("PRIVFIT_DATABASE_URL", empty_sqlite_url)
    monkeypatch.delenv("PRIVFIT_ADMIN_KEY", raising=False)
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)
    get_settings.cache_clear()
    yield empty_sqlite_url
    get_settings.cache_clear()


def test_migrate_then_create_site(cli_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["migrate"]) == 0
    assert "migrated to head" in capsys.readouterr().out

    assert cli.main(["create-site", "Research Site"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["site"]["name"] == "Research Site"

    with TestClient(create_app(Settings(database_url=cli_db, job_runner="thread"))) as client:
        capsys.readouterr()
        headers = {"Authorization": f"Bearer {created['api_key']}"}
        response = client.get("/v1/sites/me", headers=headers)
    assert response.status_code == 200
    assert response.json()["id"] == created["site"]["id"]


def test_create_site_refuses_duplicates(cli_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["migrate"])
    cli.main(["create-site", "twin"])
    with pytest.raises(SystemExit, match="already exists"):
        cli.main(["create-site", "twin"])


def test_commands_need_a_migrated_database(cli_db: str) -> None:
    with pytest.raises(SystemExit, match="privfit migrate"):
        cli.main(["create-site", "early"])


def test_reset_admin_key(cli_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["migrate"])
    capsys.readouterr()
    assert cli.main(["reset-admin-key"]) == 0
    (first,) = re.findall(r"pf_\S+", capsys.readouterr().out)
    cli.main(["reset-admin-key"])
    (second,) = re.findall(r"pf_\S+", capsys.readouterr().out)
    with TestClient(create_app(Settings(database_url=cli_db, job_runner="thread"))) as client:
        assert capsys.readouterr().out == ""  # a key exists: nothing generated at start
        old = client.get("/v1/sites", headers={"Authorization": f"Bearer {first}"})
        new = client.get("/v1/sites", headers={"Authorization": f"Bearer {second}"})
    assert old.status_code == 401
    assert new.status_code == 200


def test_invalid_configuration_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVFIT_DATABASE_URL", "mysql://nope")
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit, match="PRIVFIT_DATABASE_URL"):
            cli.main(["migrate"])
    finally:
        get_settings.cache_clear()


def test_an_unreadable_password_file_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PRIVFIT_DATABASE_URL", "postgresql://privfit@db/privfit")
    monkeypatch.setenv("PRIVFIT_DATABASE_PASSWORD_FILE", str(tmp_path / "missing"))
    get_settings.cache_clear()
    try:
        with pytest.raises(SystemExit, match=r"PRIVFIT_DATABASE_PASSWORD_FILE .* cannot be read"):
            cli.main(["migrate"])
    finally:
        get_settings.cache_clear()


def test_worker_needs_the_queue_runner(cli_db: str) -> None:
    with pytest.raises(SystemExit, match="PRIVFIT_JOB_RUNNER=queue"):
        cli.main(["worker"])


def test_queue_runner_with_sqlite_is_a_clear_start_up_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PRIVFIT_DATABASE_URL", "sqlite:///nowhere.db")
    monkeypatch.setenv("PRIVFIT_JOB_RUNNER", "queue")
    get_settings.cache_clear()
    try:
        for command in (["worker"], ["serve"]):
            with pytest.raises(SystemExit, match=r"PRIVFIT_JOB_RUNNER=queue needs .*PostgreSQL"):
                cli.main(command)
    finally:
        get_settings.cache_clear()


def test_openapi_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "openapi.json"
    assert cli.main(["openapi", str(target)]) == 0
    assert cli.main(["openapi", "--check", str(target)]) == 0
    target.write_text("{}\n")
    assert cli.main(["openapi", "--check", str(target)]) == 1
    assert "make openapi" in capsys.readouterr().err


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for command in ("serve", "worker", "migrate", "create-site", "reset-admin-key", "openapi"):
        assert command in out


@pytest.mark.parametrize(
    ("workers", "storage", "warned"),
    [
        ("2", "memory://", True),
        ("1", "memory://", False),
        ("2", "redis://127.0.0.1:6379", False),
    ],
)
def test_serve_warns_when_processes_would_each_count_their_own_limits(
    cli_db: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    workers: str,
    storage: str,
    warned: bool,
) -> None:
    import uvicorn

    served: list[dict[str, object]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.append(options))
    monkeypatch.setenv("PRIVFIT_WORKERS", workers)
    monkeypatch.setenv("PRIVFIT_RATE_LIMIT_STORAGE", storage)
    get_settings.cache_clear()
    assert cli.main(["serve"]) == 0
    assert served[0]["workers"] == int(workers)
    # X-Forwarded-For is the app's to judge (PRIVFIT_TRUSTED_PROXIES), never uvicorn's.
    assert served[0]["proxy_headers"] is False
    assert ("counts its own rate limits" in capsys.readouterr().err) is warned
