"""Engines and sessions. SQLite gets the pragmas that make it a safe embedded database."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["InvalidDatabaseURLError", "make_engine", "make_sessionmaker", "ping", "safe_url"]


class InvalidDatabaseURLError(ValueError):
    """The configured database URL cannot be parsed."""


def _parse(url: str | URL) -> URL:
    try:
        return make_url(url)
    except ArgumentError as exc:
        raise InvalidDatabaseURLError("the database URL cannot be parsed") from exc


def safe_url(url: str | URL) -> str:
    """The URL with its password masked, for logs and messages."""
    return _parse(url).render_as_string(hide_password=True)


def make_engine(url: str | URL, *, busy_timeout_ms: int = 5000, pool_size: int = 5) -> Engine:
    """Build an engine for ``url``.

    SQLite: creates the file and its folder with owner-only permissions, allows use across
    threads (FastAPI runs sync handlers in a threadpool) and sets ``foreign_keys=ON``,
    ``journal_mode=WAL`` (readers do not block the writer) and ``busy_timeout`` on every
    connection. PostgreSQL: a pre-pinged pool and a
    10-second connect timeout.
    """
    parsed = _parse(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        in_memory = database in {"", ":memory:"} or database.startswith("file::memory:")
        if not in_memory:
            _create_private_file(Path(database).expanduser())
        kwargs["connect_args"] = {"check_same_thread": False}
        engine = create_engine(parsed, **kwargs)
        _install_sqlite_pragmas(engine, busy_timeout_ms=busy_timeout_ms, wal=not in_memory)
        return engine
    kwargs.update(pool_pre_ping=True, pool_size=pool_size, max_overflow=pool_size)
    if "connect_timeout" not in parsed.query:
        # A blackholed host must fail /readyz quickly, not hang it.
        kwargs["connect_args"] = {"connect_timeout": 10}
    return create_engine(parsed, **kwargs)


def _create_private_file(path: Path) -> None:
    """Create the SQLite file (and any missing folders) readable by the owner only: it holds
    raw rows. Folders created here get 0700 and a new file 0600; SQLite gives its ``-wal`` and
    ``-shm`` files the main file's permissions. Existing files and folders are left as they are.
    """
    missing = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


def _install_sqlite_pragmas(engine: Engine, *, busy_timeout_ms: int, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            if wal:
                cursor.execute("PRAGMA journal_mode=WAL")
        finally:
            cursor.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (results outlive the transaction)."""
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=True)


def ping(engine: Engine) -> None:
    """Round-trip ``SELECT 1``; raises when the database is unreachable."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
