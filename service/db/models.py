"""ORM models: one class per table, singular snake_case table names.

Models hold data only; every query lives in :mod:`service.db.repositories`. Changing a model
needs a migration (see README, "Migrations"); ``tests/integration/db`` fails on any drift.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    ForeignKey,
    Index,
    Integer,
    String,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from service.db.base import Base, UTCDateTime, utcnow

__all__ = ["ApiKey", "AuditEvent", "KeyRole", "Site", "new_id"]

KeyRole = Literal["admin", "site"]

#: Auto-incrementing 64-bit key (SQLite only auto-increments an INTEGER PRIMARY KEY).
BigIntId = BigInteger().with_variant(Integer(), "sqlite")


def new_id() -> str:
    """A random 128-bit identifier as 32 lowercase hex digits."""
    return uuid.uuid4().hex


class Site(Base):
    """An organisation using the service (a hospital, a bank, a research site)."""

    __tablename__ = "site"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    api_keys: Mapped[list[ApiKey]] = relationship(back_populates="site", lazy="raise")


class ApiKey(Base):
    """An API key. Only its public prefix and the SHA-256 of the whole key are stored.

    ``role = 'admin'`` keys belong to no site; at most one admin key is active at a time (the
    partial unique index also settles two processes racing to create the first one).
    """

    __tablename__ = "api_key"
    __table_args__ = (
        CheckConstraint("role IN ('admin', 'site')", name="role_known"),
        CheckConstraint(
            "(role = 'admin' AND site_id IS NULL) OR (role = 'site' AND site_id IS NOT NULL)",
            name="site_matches_role",
        ),
        Index(
            "uq_api_key_one_active_admin",
            "role",
            unique=True,
            sqlite_where=text("role = 'admin' AND revoked_at IS NULL"),
            postgresql_where=text("role = 'admin' AND revoked_at IS NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    site_id: Mapped[str | None] = mapped_column(
        ForeignKey("site.id", ondelete="CASCADE"), index=True
    )
    role: Mapped[str] = mapped_column(String(16))
    prefix: Mapped[str] = mapped_column(String(16), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    site: Mapped[Site | None] = relationship(back_populates="api_keys", lazy="raise")

    @property
    def active(self) -> bool:
        """True until the key is revoked."""
        return self.revoked_at is None


class AuditEvent(Base):
    """An append-only record of a security-relevant event. Never holds a secret."""

    __tablename__ = "audit_event"
    __table_args__ = (
        CheckConstraint("outcome IN ('success', 'failure')", name="outcome_known"),
        Index("ix_audit_event_subject", "subject_type", "subject_id"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    action: Mapped[str] = mapped_column(String(64), index=True)
    outcome: Mapped[str] = mapped_column(String(16))
    actor_role: Mapped[str | None] = mapped_column(String(16))
    actor_site_id: Mapped[str | None] = mapped_column(String(32))
    key_prefix: Mapped[str | None] = mapped_column(String(16))
    subject_type: Mapped[str | None] = mapped_column(String(32))
    subject_id: Mapped[str | None] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(64))
    client_ip: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[dict[str, Any] | None] = mapped_column(JSON)
