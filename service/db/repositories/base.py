"""Repositories: the only place that builds SQL.

Each repository wraps the unit of work's session. Repositories never commit; they ``flush``
when the caller needs generated values. Add a repository per aggregate and expose it on
:class:`service.db.uow.UnitOfWork`.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from sqlalchemy.orm import Session

from service.db.base import Base
from service.db.errors import translate_integrity_errors

ModelT = TypeVar("ModelT", bound=Base)


class Repository(Generic[ModelT]):
    """Common operations on one model keyed by a single primary key."""

    model: type[ModelT]

    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, id_: Any) -> ModelT | None:
        """The row with primary key ``id_``, or None."""
        return self.session.get(self.model, id_)

    def get_fresh(self, id_: Any) -> ModelT | None:
        """Like :meth:`get`, but re-read from the database even if the session holds it."""
        return self.session.get(self.model, id_, populate_existing=True)

    def add(self, obj: ModelT) -> ModelT:
        """Stage ``obj`` for insertion and flush, so defaults and ids are filled in."""
        self.session.add(obj)
        with translate_integrity_errors():
            self.session.flush()
        return obj

    def stage(self, obj: ModelT) -> ModelT:
        """Stage ``obj`` for insertion with the unit of work's next flush (its commit at the
        latest), together with the other rows of the transaction: one round of the ORM's
        flush instead of one per row. Its defaults are filled in by that flush."""
        self.session.add(obj)
        return obj


def rowcount(result: Any) -> int:
    """The rows an UPDATE or DELETE touched (0 when the driver does not say)."""
    return int(getattr(result, "rowcount", 0))
