"""Database errors the domain may react to, without importing SQLAlchemy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import IntegrityError

__all__ = ["IntegrityConflictError", "translate_integrity_errors"]


class IntegrityConflictError(Exception):
    """A write broke a UNIQUE, CHECK or FOREIGN KEY constraint (for example, a racing insert).

    ``constraint`` is the constraint's name when the driver reports it (PostgreSQL does; SQLite
    reports the columns instead, kept in ``message``). The message never contains row values.
    """

    def __init__(self, constraint: str | None, message: str) -> None:
        super().__init__(message)
        self.constraint = constraint


@contextmanager
def translate_integrity_errors() -> Iterator[None]:
    """Turn SQLAlchemy's ``IntegrityError`` into :class:`IntegrityConflictError`."""
    try:
        yield
    except IntegrityError as exc:
        diag = getattr(exc.orig, "diag", None)
        constraint = getattr(diag, "constraint_name", None)
        # psycopg's message includes the offending values ("Key (name)=(x)"): keep only its
        # first line, which names the constraint, never the data.
        first_line = str(exc.orig).splitlines()[0] if exc.orig is not None else "integrity error"
        raise IntegrityConflictError(constraint, first_line) from exc
