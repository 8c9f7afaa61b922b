"""Authentication with API keys, and the admin key's first-start generation.

The admin key is either configured (``PRIVFIT_ADMIN_KEY``; only its hash is kept in memory) or
generated on the first start and stored as an ``api_key`` row with ``role = 'admin'``. While a
key is configured, stored admin keys are not accepted: the configured one is the admin key.
"""

from __future__ import annotations

from typing import NoReturn

from service.db.base import utcnow
from service.db.errors import IntegrityConflictError
from service.db.models import ApiKey
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.keys import generate_key, hash_key, key_matches, parse_prefix
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.errors import AuthenticationError

__all__ = ["authenticate", "configured_key_hash", "ensure_admin_key", "reset_admin_key"]

INVALID_KEY = "the API key is not valid"


def authenticate(
    uow: UnitOfWork,
    *,
    token: str,
    configured_admin_key_hash: str | None,
    context: AuditContext,
    audit_failure: bool = True,
) -> Principal:
    """The principal owning ``token``, or :class:`AuthenticationError` (audited unless
    ``audit_failure`` is false: a client already refused for its many failures)."""
    if configured_admin_key_hash is not None and key_matches(token, configured_admin_key_hash):
        return Principal(role="admin")
    quiet = not audit_failure
    prefix = parse_prefix(token)
    if prefix is None:
        _fail(uow, context=context, quiet=quiet, reason="malformed", prefix=None)
    with uow:
        row = uow.api_keys.get_by_prefix(prefix)
    if row is None:
        _fail(uow, context=context, quiet=quiet, reason="unknown_prefix", prefix=prefix)
    if not key_matches(token, row.key_hash):
        _fail(uow, context=context, quiet=quiet, reason="wrong_secret", prefix=prefix)
    if row.revoked_at is not None:
        _fail(uow, context=context, quiet=quiet, reason="revoked", prefix=prefix)
    if row.role == "admin":
        if configured_admin_key_hash is not None:
            _fail(
                uow,
                context=context,
                quiet=quiet,
                reason="stored_admin_key_overridden",
                prefix=prefix,
            )
        return Principal(role="admin", key_id=row.id, key_prefix=row.prefix)
    return Principal(role="site", site_id=row.site_id, key_id=row.id, key_prefix=row.prefix)


def _fail(
    uow: UnitOfWork, *, context: AuditContext, quiet: bool, reason: str, prefix: str | None
) -> NoReturn:
    if quiet:
        raise AuthenticationError(INVALID_KEY)
    with uow:
        audit.record(
            uow,
            action="auth.failed",
            outcome="failure",
            context=context,
            key_prefix=prefix,
            details={"reason": reason},
        )
        uow.commit()
    raise AuthenticationError(INVALID_KEY)


def ensure_admin_key(uow: UnitOfWork, *, context: AuditContext = audit.SYSTEM) -> str | None:
    """Generate and store an admin key when none is in force; returns it, else None.

    Safe when several processes start at once: a partial unique index allows one active admin
    key, so only one process creates it and the others return None.
    """
    with uow:
        if uow.api_keys.active_admin_key() is not None:
            return None
        key = generate_key()
        try:
            stored = uow.api_keys.add(
                ApiKey(role="admin", site_id=None, prefix=key.prefix, key_hash=key.key_hash)
            )
            audit.record(
                uow,
                action="admin_key.generated",
                context=context,
                key_prefix=key.prefix,
                subject_type="api_key",
                subject_id=stored.id,
            )
            uow.commit()
        except IntegrityConflictError:
            return None
        return key.token


def reset_admin_key(uow: UnitOfWork, *, context: AuditContext = audit.SYSTEM) -> str:
    """Revoke every stored admin key and generate a new one (``privfit reset-admin-key``)."""
    with uow:
        now = utcnow()
        revoked = uow.api_keys.revoke_admin_keys(at=now)
        key = generate_key()
        stored = uow.api_keys.add(
            ApiKey(role="admin", site_id=None, prefix=key.prefix, key_hash=key.key_hash)
        )
        audit.record(
            uow,
            action="admin_key.reset",
            context=context,
            key_prefix=key.prefix,
            subject_type="api_key",
            subject_id=stored.id,
            details={"revoked": revoked},
        )
        uow.commit()
        return key.token


def configured_key_hash(admin_key: str | None) -> str | None:
    """The hash kept in memory for a configured admin key."""
    return hash_key(admin_key) if admin_key else None
