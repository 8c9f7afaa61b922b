"""Alembic, driven from code: the CLI, ``/readyz`` and the tests use these helpers.

The configuration lives in ``pyproject.toml`` (``[tool.alembic]``); there is no ``alembic.ini``.
A database URL or an open connection reaches ``migrations/env.py`` through
``Config.attributes`` (keys ``"url"`` and ``"connection"``); without either, ``env.py`` reads
:class:`service.settings.Settings`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

from service.settings import project_root

logger = logging.getLogger(__name__)

__all__ = [
    "DatabaseProbe",
    "DatabaseState",
    "alembic_config",
    "current_revisions",
    "downgrade",
    "head_revisions",
    "include_name",
    "upgrade",
]

#: Tables of the job queue's engine (procrastinate), installed by a migration from the
#: engine's own SQL script; they are not PrivFit models.
QUEUE_TABLE_PREFIX = "procrastinate_"


def include_name(name: str | None, type_: str, _parent_names: object) -> bool:
    """Alembic's ``include_name`` hook: leave the job queue's tables out of autogenerate and
    ``alembic check``."""
    return not (type_ == "table" and name is not None and name.startswith(QUEUE_TABLE_PREFIX))


def alembic_config(url: str | None = None, *, connection: Connection | None = None) -> Config:
    """An Alembic ``Config`` for this project, optionally bound to ``url`` or ``connection``."""
    root = project_root()
    pyproject = root / "pyproject.toml"
    config = Config(toml_file=pyproject) if pyproject.is_file() else Config()
    if config.get_main_option("script_location") is None:
        config.set_main_option("script_location", str(root / "migrations"))
    if url is not None:
        config.attributes["url"] = url
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@cache
def head_revisions() -> tuple[str, ...]:
    """The head revision(s) of the project's migration scripts (one, unless history has
    forked); read once per process: the scripts do not change while it runs, and reading them
    (Alembic loads every script) costs milliseconds on each app start."""
    script = ScriptDirectory.from_config(alembic_config())
    return tuple(sorted(script.get_heads()))


def current_revisions(engine: Engine) -> tuple[str, ...]:
    """The revision(s) the database is at; empty when it was never migrated."""
    with engine.connect() as connection:
        context = MigrationContext.configure(connection)
        return tuple(sorted(context.get_current_heads()))


def upgrade(url: str, revision: str = "head") -> None:
    """Apply migrations up to ``revision``."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Revert migrations down to ``revision`` (``"base"`` empties the database)."""
    command.downgrade(alembic_config(url), revision)


@dataclass(frozen=True, slots=True)
class DatabaseState:
    """What ``/readyz`` reports."""

    reachable: bool
    current: tuple[str, ...]
    heads: tuple[str, ...]

    @property
    def ready(self) -> bool:
        """Reachable and migrated to the head."""
        return self.reachable and self.current == self.heads


class DatabaseProbe:
    """Checks that a database is reachable and at the migrations' head."""

    def __init__(self, engine: Engine, heads: tuple[str, ...]) -> None:
        self.engine = engine
        self.heads = heads

    def check(self) -> DatabaseState:
        """Never raises for connection problems: they mean "not reachable" (and are logged)."""
        try:
            current = current_revisions(self.engine)
        except Exception:  # any driver or network error
            logger.warning("database not reachable", exc_info=True)
            return DatabaseState(reachable=False, current=(), heads=self.heads)
        return DatabaseState(reachable=True, current=current, heads=self.heads)
