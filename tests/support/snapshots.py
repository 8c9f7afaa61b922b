"""Databases copied instead of rebuilt: migrated schemas and whole test "worlds".

A test that needs a migrated database, or a world of sites, datasets, fitted models and queued
jobs made through the API, gets a *copy* of one built once: a SQLite file is copied with
SQLite's online backup (a consistent snapshot even while the app still holds connections), a
PostgreSQL schema is written out by ``pg_dump`` (structure and rows) and replayed into a fresh
schema. Building the world through the API once per module and backend, rather than once per
test, keeps what is tested (every test still starts from its own, untouched database) and
drops the repeated uploads and fits.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, make_url, text

__all__ = [
    "copy_sqlite",
    "dump_postgres_schema",
    "postgres_schema",
    "replay_postgres",
    "schema_url",
]


def copy_sqlite(source: Path, target: Path) -> None:
    """Copy the SQLite database ``source`` to ``target`` with the online backup API."""
    target.parent.mkdir(parents=True, exist_ok=True)
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def schema_url(base: str, schema: str) -> str:
    """``base`` with every connection's ``search_path`` set to ``schema``."""
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def dump_postgres_schema(base: str, schema: str) -> str | None:
    """SQL that recreates ``schema`` (structure and rows), with ``{schema}`` for its name;
    None when ``pg_dump`` is not installed or fails."""
    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        return None
    url = make_url(base)
    command = [pg_dump, "--no-owner", "--no-privileges", "--inserts", f"--schema={schema}"]
    command += ["--host", url.host or "127.0.0.1", "--port", str(url.port or 5432)]
    command += ["--username", url.username or "postgres", url.database or "postgres"]
    environment = {**os.environ, "PGPASSWORD": url.password or ""}
    dump = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if dump.returncode != 0:
        return None
    # psql meta-commands (recent pg_dump releases wrap the script in backslash restrict lines)
    # mean nothing to the server.
    lines = [line for line in dump.stdout.splitlines() if not line.startswith("\\")]
    return "\n".join(lines).replace(schema, "{schema}")


def replay_postgres(engine: Engine, script: str, schema: str) -> None:
    """Run a :func:`dump_postgres_schema` script for ``schema`` on its own connection
    (psycopg, no parameters, so ``%`` in a function body stays as it is), then undo the
    session settings the script changes."""
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        assert driver is not None
        with driver.cursor() as cursor:
            cursor.execute(script.replace("{schema}", schema))
            cursor.execute("RESET ALL")
        driver.commit()


@contextmanager
def postgres_schema(
    engine: Engine, base: str, *, script: str | None = None, prefix: str = "test"
) -> Iterator[tuple[str, str]]:
    """A fresh schema (empty, or replayed from ``script``) as ``(name, url)``; dropped after."""
    schema = f"{prefix}_{uuid.uuid4().hex[:16]}"
    if script is None:
        with engine.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    else:
        replay_postgres(engine, script, schema)
    try:
        yield schema, schema_url(base, schema)
    finally:
        with engine.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
