"""Service configuration, read from ``PRIVFIT_*`` environment variables (or a ``.env`` file).

There is no module-level settings object: the app, the CLI and the migrations call
:func:`get_settings` (cached), and tests build :class:`Settings` directly and pass it to
``create_app``.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import limits
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = [
    "MIN_ADMIN_KEY_LENGTH",
    "RATE_LIMIT_STORAGE_SCHEMES",
    "Environment",
    "IPNetwork",
    "LogLevel",
    "Settings",
    "default_database_url",
    "get_settings",
    "parse_networks",
    "project_root",
    "with_password",
]

Environment = Literal["dev", "test", "prod"]
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

#: A configured admin key must be at least this long (a short key can be guessed).
MIN_ADMIN_KEY_LENGTH = 24

_URL_SCHEME = re.compile(r"^(?P<dialect>[a-z0-9]+)(?:\+(?P<driver>[a-z0-9_]+))?://", re.IGNORECASE)


def project_root() -> Path:
    """The repository checkout when running from source, else the working directory.

    From a checkout (editable install, ``make run``) this is the folder holding ``migrations/``
    next to the ``service`` package. An installed wheel (the container) has no such folder, so
    the working directory is used: the image's ``WORKDIR`` holds ``migrations/``.
    """
    source_root = Path(__file__).resolve().parent.parent
    if (source_root / "migrations" / "env.py").is_file():
        return source_root
    return Path.cwd()


def default_database_url() -> str:
    """The embedded database: ``<project root>/data/privfit.db``."""
    return f"sqlite:///{project_root() / 'data' / 'privfit.db'}"


#: The ``limits`` library's synchronous counter stores (redis and valkey need the ``redis``
#: extra, memcached and mongodb their own client).
RATE_LIMIT_STORAGE_SCHEMES = (
    "memory",
    "redis",
    "rediss",
    "redis+unix",
    "redis+cluster",
    "redis+sentinel",
    "valkey",
    "valkeys",
    "valkey+unix",
    "valkey+cluster",
    "valkey+sentinel",
    "memcached",
    "mongodb",
    "mongodb+srv",
)


class Settings(BaseSettings):
    """Every knob of the service. Field ``x`` is read from ``PRIVFIT_X``."""

    model_config = SettingsConfigDict(
        env_prefix="PRIVFIT_", env_file=".env", extra="ignore", frozen=True
    )

    environment: Environment = Field(
        default="dev", description="dev, test or prod; prod refuses SQLite."
    )
    database_url: str = Field(
        default_factory=default_database_url,
        description=(
            "SQLAlchemy URL: sqlite:///path/to.db or postgresql+psycopg://user@host/db "
            "(postgresql:// and postgres:// are read as psycopg)."
        ),
    )
    database_password_file: Path | None = Field(
        default=None,
        description=(
            "A file holding the database password (e.g. a Compose or Kubernetes secret); it "
            "replaces any password in PRIVFIT_DATABASE_URL, which then need not hold one."
        ),
    )
    admin_key: SecretStr | None = Field(
        default=None,
        description=(
            "The admin API key. When unset, the first start generates one, prints it once and "
            "stores only its hash."
        ),
    )
    max_request_bytes: int = Field(
        default=256 * 1024 * 1024,
        gt=0,
        description=(
            "Largest streamed upload (`POST /v1/datasets`) accepted; larger ones get 413."
        ),
    )
    max_json_bytes: int = Field(
        default=4 * 1024 * 1024,
        gt=0,
        description=(
            "Largest body of every other request (JSON): refused with 413 by its "
            "Content-Length before anything is read, else when the bytes read pass it."
        ),
    )
    trusted_proxies: str = Field(
        default="",
        description=(
            "Comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-For "
            "(and X-Forwarded-Proto) is believed; empty: none, the connection's address is "
            "the client's."
        ),
    )
    log_level: LogLevel = "INFO"
    host: str = Field(default="127.0.0.1", description="Address `privfit serve` binds.")
    port: int = Field(default=8000, ge=1, le=65535, description="Port `privfit serve` binds.")
    workers: int = Field(default=1, ge=1, le=64, description="Processes `privfit serve` runs.")
    sqlite_busy_timeout_ms: int = Field(default=5000, ge=0)
    db_pool_size: int = Field(default=5, ge=1, description="Connections per process (PostgreSQL).")
    max_budget_epsilon: float = Field(
        default=10.0,
        gt=0,
        allow_inf_nan=False,
        description="Largest ε cap a dataset may be uploaded with.",
    )
    max_budget_delta: float = Field(
        default=1e-3,
        ge=0,
        lt=1,
        description="Largest δ cap a dataset may be uploaded with.",
    )
    max_classes: int = Field(
        default=100,
        ge=3,
        le=1000,
        description="Most classes a multi-class label spec may declare (`classes`; at most "
        "1000, the DP core's limit).",
    )
    job_runner: Literal["process", "thread", "queue"] = Field(
        default="process",
        description=(
            "Where fit jobs run: a pool of worker processes of the API process (default; keeps "
            "the API responsive), threads (debugging; always used for in-memory SQLite), or "
            "`queue`: a PostgreSQL-backed distributed task queue (procrastinate) whose jobs "
            "`privfit worker` processes run, on any number of machines (PostgreSQL only). "
            "With `process` or `thread`, a federated fit over site nodes runs on a thread of "
            "the API process the nodes poll; `queue` refuses such a fit (422)."
        ),
    )
    job_workers: int = Field(default=1, ge=1, le=64, description="Jobs run at the same time.")
    max_job_work: float | None = Field(
        default=5e10,
        gt=0,
        allow_inf_nan=False,
        description=(
            "Largest estimated work of one job, in row-feature passes (rows × features "
            "touched; DP-SGD: epochs × (rows + 64 × updates per epoch) × features; a federated "
            "fit: rounds over every hosted dataset). A bigger job is refused at submission "
            "(422 `job-too-large`, nothing charged). The default is about 10–40 minutes of "
            "one core; empty: no limit."
        ),
    )
    max_site_worker_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description=(
            "Largest share of the job slots (PRIVFIT_JOB_WORKERS, or the live `privfit "
            "worker` processes of the queue) one site's jobs may hold at once: at least one "
            "slot, at most ⌊share × slots⌋, so the others stay free for other sites' jobs. "
            "Queued jobs start round-robin between sites. 1: no reservation."
        ),
    )
    job_progress_interval: float = Field(
        default=0.2,
        gt=0,
        le=60,
        description="Seconds between two progress writes of a running job (each also "
        "notices a cancel request).",
    )
    queue_heartbeat_seconds: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="With the queue runner: seconds between two heartbeats of a worker (and "
        "between two searches for the jobs of dead workers).",
    )
    queue_stalled_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="With the queue runner: a worker silent for this long is dead; its running "
        "job fails `job-interrupted` (budget kept spent) and /readyz no longer counts it.",
    )
    job_recovery: bool = Field(
        default=True,
        description=(
            "On start, mark jobs left running by a crash failed (budget kept spent) and run the "
            "queued ones again. Turn off when several API processes with in-process runners "
            "share one database and another may still be running those jobs. The queue runner "
            "never does this: it only settles the jobs of workers whose heartbeats stopped."
        ),
    )
    rate_limit_failed_auth: str | None = Field(
        default="30/minute",
        description=(
            "Failed authentications allowed per client address and per key prefix (`limits` "
            "notation, e.g. `30/minute`; empty: no limit). Over it, further failures get 429; "
            "a valid key is never refused by it."
        ),
    )
    rate_limit_expensive: str | None = Field(
        default="120/minute",
        description=(
            "Expensive operations (uploads, fits, aggregations, federated fits, predictions, "
            "model uploads) allowed per key and per client address; empty: no limit."
        ),
    )
    rate_limit_storage: str = Field(
        default="memory://",
        description=(
            "Where rate-limit counters live: `memory://` (per process) or a shared store such "
            "as `redis://127.0.0.1:6379` for several API replicas (the `redis` extra, which "
            "the image includes)."
        ),
    )
    metrics_require_key: bool = Field(
        default=False,
        description="Require the admin key (`Authorization: Bearer`) for `/metrics`.",
    )
    docs_persist_authorization: bool = Field(
        default=False,
        description=(
            "Let Swagger UI keep the pasted API key in the browser's localStorage across "
            "restarts. Off by default: a raw key left in a shared browser is a leaked key."
        ),
    )
    test_seed: int | None = Field(
        default=None,
        ge=0,
        description=(
            "A fixed noise seed, honoured only with PRIVFIT_ENVIRONMENT=test; models record it. "
            "Never set it in production: anyone who knows it can remove the noise."
        ),
    )
    coordinator_url: str | None = Field(
        default=None,
        description=(
            "Site nodes (issue 15): the URL of the coordinator PrivFit this node offers datasets "
            "to and takes protocol tasks from (outbound connections only)."
        ),
    )
    coordinator_key: SecretStr | None = Field(
        default=None,
        description="This site's API key on the coordinator (with PRIVFIT_COORDINATOR_URL).",
    )
    node_task_deadline: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description=(
            "Coordinator: seconds a node may take to answer one task of a federated fit before "
            "the job fails (no model; every node keeps its charge)."
        ),
    )
    agent_poll_seconds: float = Field(
        default=20.0,
        gt=0,
        le=300,
        description="Node agent: how long one long poll for the next task waits.",
    )

    @field_validator("max_job_work", mode="before")
    @classmethod
    def _empty_is_no_limit(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("rate_limit_failed_auth", "rate_limit_expensive")
    @classmethod
    def _check_rate(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        try:
            limits.parse(value)
        except ValueError as exc:
            raise ValueError(f"not a rate such as '30/minute': {value!r}") from exc
        return value.strip()

    @field_validator("rate_limit_storage")
    @classmethod
    def _check_rate_limit_storage(cls, value: str) -> str:
        scheme, sep, _ = value.partition("://")
        if not sep or scheme not in RATE_LIMIT_STORAGE_SCHEMES:
            raise ValueError(
                "not a rate-limit storage URL; the scheme is one of "
                + ", ".join(RATE_LIMIT_STORAGE_SCHEMES)
            )
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: str) -> str:
        parse_networks(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _password_from_file(cls, data: Any) -> Any:
        """Put the password of ``database_password_file`` into the database URL."""
        if not isinstance(data, dict) or not data.get("database_password_file"):
            return data
        path = Path(data["database_password_file"])
        try:
            password = path.read_text(encoding="utf-8").strip("\r\n")
        except OSError as exc:
            raise ValueError(f"PRIVFIT_DATABASE_PASSWORD_FILE {path} cannot be read") from exc
        if not password:
            raise ValueError(f"PRIVFIT_DATABASE_PASSWORD_FILE {path} is empty")
        url = str(data.get("database_url") or default_database_url())
        return {**data, "database_url": with_password(url, password)}

    @property
    def trusted_proxy_networks(self) -> tuple[IPNetwork, ...]:
        """The networks of :attr:`trusted_proxies`."""
        return parse_networks(self.trusted_proxies)

    @field_validator("database_url")
    @classmethod
    def _normalise_database_url(cls, value: str) -> str:
        value = value.strip()
        match = _URL_SCHEME.match(value)
        if match is None:
            raise ValueError(
                "must be an SQLAlchemy URL such as sqlite:///data/privfit.db or "
                "postgresql+psycopg://user@host/db"
            )
        dialect = match["dialect"].lower()
        if dialect in {"postgres", "postgresql"}:
            if match["driver"] not in {None, "psycopg"}:
                raise ValueError("PostgreSQL URLs must use the psycopg driver (postgresql+psycopg)")
            return "postgresql+psycopg://" + value[match.end() :]
        if dialect != "sqlite":
            raise ValueError("only sqlite and postgresql databases are supported")
        return value

    @field_validator("admin_key")
    @classmethod
    def _check_admin_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or value.get_secret_value() == "":
            return None
        if len(value.get_secret_value()) < MIN_ADMIN_KEY_LENGTH:
            raise ValueError(f"must be at least {MIN_ADMIN_KEY_LENGTH} characters long")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _production_needs_postgres(self) -> Settings:
        if self.environment == "prod" and self.is_sqlite:
            raise ValueError(
                "PRIVFIT_DATABASE_URL must point at PostgreSQL when PRIVFIT_ENVIRONMENT=prod"
            )
        return self

    @model_validator(mode="after")
    def _queue_needs_postgres(self) -> Settings:
        if self.job_runner == "queue" and self.is_sqlite:
            raise ValueError(
                "PRIVFIT_JOB_RUNNER=queue needs PRIVFIT_DATABASE_URL to point at PostgreSQL "
                "(the queue lives in the database); SQLite runs jobs in the API process "
                "(PRIVFIT_JOB_RUNNER=process)"
            )
        if self.job_runner == "queue" and self.queue_stalled_seconds <= (
            2 * self.queue_heartbeat_seconds
        ):
            raise ValueError(
                "PRIVFIT_QUEUE_STALLED_SECONDS must exceed twice PRIVFIT_QUEUE_HEARTBEAT_SECONDS"
            )
        return self

    @property
    def is_sqlite(self) -> bool:
        """True when the database is SQLite (embedded mode)."""
        return self.database_url.lower().startswith("sqlite")


def with_password(url: str, password: str) -> str:
    """``url`` (``scheme://user[:old]@host/...``) with ``password`` (percent-encoded) as its
    password. ValueError when the URL names no user."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, hostinfo = parts.netloc.rpartition("@")
    if not at or not userinfo:
        raise ValueError(
            "PRIVFIT_DATABASE_PASSWORD_FILE needs PRIVFIT_DATABASE_URL to name a user "
            "(postgresql+psycopg://user@host/db)"
        )
    user = userinfo.partition(":")[0]
    secret = urllib.parse.quote(password, safe="")
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:{secret}@{hostinfo}"))


def parse_networks(text: str) -> tuple[IPNetwork, ...]:
    """``"10.0.0.0/8, 192.0.2.7"`` → networks (a bare address is a /32 or /128 network).
    ValueError when an entry is neither."""
    networks = []
    for entry in text.split(","):
        if entry.strip():
            try:
                networks.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                raise ValueError(f"not an IP address or CIDR: {entry.strip()[:64]!r}") from None
    return tuple(networks)


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once from the environment."""
    return Settings()
