"""Settings from PRIVFIT_* variables, with validation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from service.settings import Settings, default_database_url, get_settings, project_root


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in ("DATABASE_URL", "ADMIN_KEY", "ENVIRONMENT", "MAX_REQUEST_BYTES", "LOG_LEVEL"):
        monkeypatch.delenv(f"PRIVFIT_{name}", raising=False)
    monkeypatch.chdir(tmp_path)  # no stray .env file
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_defaults() -> None:
    settings = Settings()
    assert settings.environment == "dev"
    assert settings.admin_key is None
    assert settings.database_url == default_database_url()
    assert settings.database_url == f"sqlite:///{project_root() / 'data' / 'privfit.db'}"
    assert (project_root() / "migrations" / "env.py").is_file()
    assert settings.max_request_bytes == 256 * 1024 * 1024
    assert settings.is_sqlite


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVFIT_DATABASE_URL", "postgresql+psycopg://u@db/privfit")
    monkeypatch.setenv("PRIVFIT_ADMIN_KEY", "k" * 32)
    monkeypatch.setenv("PRIVFIT_MAX_REQUEST_BYTES", "1024")
    monkeypatch.setenv("PRIVFIT_ENVIRONMENT", "prod")
    monkeypatch.setenv("PRIVFIT_LOG_LEVEL", "debug")
    settings = get_settings()
    assert settings.database_url == "postgresql+psycopg://u@db/privfit"
    assert settings.admin_key is not None
    assert settings.admin_key.get_secret_value() == "k" * 32
    assert "k" * 32 not in repr(settings)
    assert settings.max_request_bytes == 1024
    assert settings.log_level == "DEBUG"
    assert get_settings() is settings  # cached


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgres://u:p@h:5433/db", "postgresql+psycopg://u:p@h:5433/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("sqlite:///relative.db", "sqlite:///relative.db"),
        ("sqlite://", "sqlite://"),
    ],
)
def test_database_urls_are_normalised(given: str, expected: str) -> None:
    assert Settings(database_url=given).database_url == expected


@pytest.mark.parametrize(
    "url", ["mysql://u@h/db", "postgresql+psycopg2://u@h/db", "not a url", "", "/tmp/x.db"]
)
def test_unsupported_database_urls_are_refused(url: str) -> None:
    with pytest.raises(ValidationError):
        Settings(database_url=url)


def test_production_refuses_sqlite() -> None:
    with pytest.raises(ValidationError, match="PostgreSQL"):
        Settings(environment="prod", database_url="sqlite:///x.db")


def test_the_queue_runner_refuses_sqlite() -> None:
    with pytest.raises(ValidationError, match="PRIVFIT_JOB_RUNNER=queue needs"):
        Settings(job_runner="queue", database_url="sqlite:///x.db")
    queue = Settings(job_runner="queue", database_url="postgresql://u@h/db")
    assert queue.job_runner == "queue"
    assert Settings(database_url="sqlite:///x.db").job_runner == "process"  # the default


def test_a_dead_worker_is_noticed_only_after_missed_heartbeats() -> None:
    with pytest.raises(ValidationError, match="twice"):
        Settings(
            job_runner="queue",
            database_url="postgresql://u@h/db",
            queue_heartbeat_seconds=10,
            queue_stalled_seconds=15,
        )


def test_short_admin_keys_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVFIT_ADMIN_KEY", "short")
    with pytest.raises(ValidationError, match="at least"):
        Settings()


def test_empty_admin_key_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRIVFIT_ADMIN_KEY", "")
    assert Settings().admin_key is None


@pytest.mark.parametrize("size", ["0", "-1", "lots"])
def test_body_limit_must_be_positive(monkeypatch: pytest.MonkeyPatch, size: str) -> None:
    monkeypatch.setenv("PRIVFIT_MAX_REQUEST_BYTES", size)
    with pytest.raises(ValidationError):
        Settings()
