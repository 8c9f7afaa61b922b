"""docker-compose.yml as an operator runs it, checked by parsing it (no Docker engine here):
every image pinned by digest, the database password only in a secret file, a memory limit on
every service, Redis shared by the API replicas for their rate limits, no forwarded header
believed, and the API's health check present whatever format the image was built in."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped, unused-ignore]

from service.settings import Settings, parse_networks

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DIGEST = re.compile(r"^[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}$")
SIZE = re.compile(r"^\d+(\.\d+)?[kmg]b?$", re.IGNORECASE)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document


def _environment(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    assert isinstance(environment, dict), "environment as a mapping"
    return {key: str(value) for key, value in environment.items()}


def test_every_pulled_image_is_pinned_by_digest(compose: dict[str, Any]) -> None:
    images = {name: s["image"] for name, s in compose["services"].items() if "image" in s}
    assert set(images) == {"postgres", "redis"}
    for name, image in images.items():
        assert DIGEST.match(image), f"{name}: {image} is not pinned by digest"
    assert images["postgres"].startswith("postgres:16@")
    # The others are built from the Dockerfile, whose base image is pinned the same way.
    for name, service in compose["services"].items():
        assert "image" in service or service.get("build") == ".", name


def test_every_service_has_a_memory_limit(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        memory = service.get("deploy", {}).get("resources", {}).get("limits", {}).get("memory")
        assert memory is not None, f"{name} has no memory limit"
        assert SIZE.match(str(memory)), f"{name}: {memory}"


def test_the_database_password_comes_from_a_secret_file(compose: dict[str, Any]) -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    assert "POSTGRES_PASSWORD:" not in text  # not as an environment variable, anywhere
    assert compose["secrets"]["postgres_password"] == {"file": "./secrets/postgres_password"}
    postgres = compose["services"]["postgres"]
    assert _environment(postgres)["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert "postgres_password" in postgres["secrets"]
    for name in ("api", "worker"):
        service = compose["services"][name]
        environment = _environment(service)
        assert "postgres_password" in service["secrets"], name
        assert environment["PRIVFIT_DATABASE_PASSWORD_FILE"] == "/run/secrets/postgres_password"
        url = environment["PRIVFIT_DATABASE_URL"]
        assert re.fullmatch(r"postgresql\+psycopg://privfit@postgres:5432/privfit", url), url
    assert "/secrets/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_privfit_reads_the_password_file_into_its_database_url(tmp_path: Path) -> None:
    secret = tmp_path / "postgres_password"
    secret.write_text("s3cr/et:@pw\n", encoding="utf-8")
    settings = Settings(
        database_url="postgresql+psycopg://privfit@postgres:5432/privfit",
        database_password_file=secret,
    )
    assert (
        settings.database_url
        == "postgresql+psycopg://privfit:s3cr%2Fet%3A%40pw@postgres:5432/privfit"
    )
    assert "s3cr" not in repr(settings.model_dump(exclude={"database_url"}))
    with pytest.raises(ValueError, match="cannot be read"):
        Settings(database_url="postgresql://u@h/db", database_password_file=tmp_path / "none")
    with pytest.raises(ValueError, match="name a user"):
        Settings(database_url="postgresql://h/db", database_password_file=secret)


def test_the_api_replicas_share_rate_limits_through_redis(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    environment = _environment(api)
    assert int(environment["PRIVFIT_WORKERS"]) > 1
    storage = environment["PRIVFIT_RATE_LIMIT_STORAGE"]
    assert storage.startswith("redis://redis:")
    assert Settings(database_url="sqlite://", rate_limit_storage=storage)
    assert api["depends_on"]["redis"] == {"condition": "service_healthy"}
    redis = compose["services"]["redis"]
    assert "ports" not in redis  # reachable from the services only
    assert "redis-cli" in " ".join(redis["healthcheck"]["test"])


def test_no_forwarded_header_is_believed(compose: dict[str, Any]) -> None:
    environment = _environment(compose["services"]["api"])
    assert parse_networks(environment["PRIVFIT_TRUSTED_PROXIES"]) == ()


def test_the_api_health_check_does_not_depend_on_the_image_format(
    compose: dict[str, Any],
) -> None:
    check = compose["services"]["api"]["healthcheck"]
    assert check["test"][0] == "CMD"
    assert "/healthz" in " ".join(check["test"])
    assert "curl" not in " ".join(check["test"])
    compile(check["test"][-1], "<healthcheck>", "exec")
    worker = compose["services"]["worker"]
    assert worker["depends_on"]["api"] == {"condition": "service_healthy"}
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "HEALTHCHECK" in dockerfile
    assert "--format docker" in dockerfile  # the documented image format keeps it
