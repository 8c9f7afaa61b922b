"""Sites and their API keys: creation, lookup, key rotation, deactivation (all admin work but
a site's own rotation; none of it reads or changes a site's data)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from service.db.base import utcnow
from service.db.errors import IntegrityConflictError
from service.db.models import SITE_NAME_KEY_LENGTH, ApiKey, Site, site_name_key
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.keys import generate_key
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.errors import ConflictError, InvalidInputError, NotFoundError
from service.domain.ids import looks_like_id

__all__ = [
    "IssuedKey",
    "SitePage",
    "create_site",
    "deactivate_site",
    "get_site",
    "list_sites",
    "rotate_site_key",
]

MAX_NAME_LENGTH = 100


@dataclass(frozen=True, slots=True)
class IssuedKey:
    """A key just issued: ``token`` is shown once; ``key`` is its stored row."""

    site: Site
    key: ApiKey
    token: str

    def __repr__(self) -> str:
        return f"IssuedKey(site={self.site.id!r}, prefix={self.key.prefix!r}, token=<hidden>)"


@dataclass(frozen=True, slots=True)
class SitePage:
    """One page of sites."""

    items: Sequence[Site]
    total: int


#: Characters that reorder how text is displayed (Unicode bidi embeddings, overrides, isolates
#: and marks): a name holding one can look like another site's name ("Trojan Source").
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def normalise_name(name: str) -> str:
    """Trim surrounding whitespace; reject names that end up empty or too long, or that hold
    bidirectional or other control characters."""
    if any(ch in BIDI_CONTROLS or unicodedata.category(ch) == "Cc" for ch in name):
        raise InvalidInputError(
            "the site name must not contain control or bidirectional formatting characters",
            errors=[{"loc": ["body", "name"], "msg": "control character in name"}],
        )
    cleaned = name.strip()
    if not site_name_key(cleaned).strip():  # empty, or only spaces and invisible characters
        raise InvalidInputError(
            "the site name must contain a visible character",
            errors=[{"loc": ["body", "name"], "msg": "blank name"}],
        )
    if len(cleaned) > MAX_NAME_LENGTH:
        raise InvalidInputError(
            f"the site name must be at most {MAX_NAME_LENGTH} characters",
            errors=[{"loc": ["body", "name"], "msg": "name too long"}],
        )
    if len(site_name_key(cleaned)) > SITE_NAME_KEY_LENGTH:
        # Only names made mostly of ligature-like characters that NFKC spells out at length.
        raise InvalidInputError(
            f"the site name must be at most {SITE_NAME_KEY_LENGTH} characters once "
            "Unicode compatibility forms are spelled out",
            errors=[{"loc": ["body", "name"], "msg": "name too long once normalised"}],
        )
    return cleaned


def _issue_key(uow: UnitOfWork, site: Site) -> tuple[ApiKey, str]:
    key = generate_key()
    row = uow.api_keys.add(
        ApiKey(role="site", site_id=site.id, prefix=key.prefix, key_hash=key.key_hash)
    )
    return row, key.token


def create_site(
    uow: UnitOfWork, *, name: str, actor: Principal, context: AuditContext
) -> IssuedKey:
    """Create a site and its first API key (admin only)."""
    actor.require_admin()
    name = normalise_name(name)
    with uow:
        if uow.sites.get_by_name_key(site_name_key(name)) is not None:
            raise ConflictError(
                "a site with this name already exists "
                "(names are compared ignoring case and Unicode compatibility forms)"
            )
        try:
            site = uow.sites.add(Site(name=name, name_key=site_name_key(name)))
            key, token = _issue_key(uow, site)
            audit.record(
                uow,
                action="site.created",
                actor=actor,
                context=context,
                subject_type="site",
                subject_id=site.id,
                details={"key_prefix": key.prefix},
            )
            uow.commit()
        except IntegrityConflictError as exc:
            # Another request created the same name between our check and our insert.
            raise ConflictError(
                "a site with this name already exists "
                "(names are compared ignoring case and Unicode compatibility forms)"
            ) from exc
        return IssuedKey(site=site, key=key, token=token)


def get_site(uow: UnitOfWork, *, site_id: str, actor: Principal) -> Site:
    """A site, visible to the admin and to the site itself (others get NotFound)."""
    if not looks_like_id(site_id) or (not actor.is_admin and actor.site_id != site_id):
        raise NotFoundError("site")
    with uow:
        site = uow.sites.get(site_id)
    if site is None:
        raise NotFoundError("site")
    return site


def list_sites(uow: UnitOfWork, *, actor: Principal, limit: int, offset: int) -> SitePage:
    """Sites in creation order (admin only)."""
    actor.require_admin()
    with uow:
        return SitePage(
            items=uow.sites.list_page(limit=limit, offset=offset), total=uow.sites.count()
        )


def rotate_site_key(
    uow: UnitOfWork, *, site_id: str, actor: Principal, context: AuditContext
) -> IssuedKey:
    """Issue a new key for a site and revoke all its others, in one transaction.

    A site rotates its own key (the key it called with must still be in force, so two racing
    rotations cannot both succeed); the admin can rotate any site's key, for a site that lost it.
    A deactivated site gets no key again (409).
    """
    if not looks_like_id(site_id) or (not actor.is_admin and actor.site_id != site_id):
        raise NotFoundError("site")
    with uow:
        site = uow.sites.get(site_id)
        if site is None:
            raise NotFoundError("site")
        # Checked by a write that holds the site's row: a deactivation racing this rotation
        # either came first (409 here) or waits and then revokes the key issued here.
        if not uow.sites.hold_active(site.id):
            raise ConflictError("this site was deactivated: no key is issued for it again")
        now = utcnow()
        revoked: list[str] = []
        if not actor.is_admin:
            # The calling key must still be in force: of two racing rotations, one wins.
            if actor.key_id is None or not uow.api_keys.revoke(actor.key_id, at=now):
                raise ConflictError("this key was already rotated by another request")
            revoked.append(actor.key_prefix or "")
        for old in uow.api_keys.active_for_site(site.id):
            uow.api_keys.revoke(old.id, at=now)
            revoked.append(old.prefix)
        key, token = _issue_key(uow, site)
        audit.record(
            uow,
            action="api_key.rotated",
            actor=actor,
            context=context,
            subject_type="site",
            subject_id=site.id,
            details={"new_key_prefix": key.prefix, "revoked_key_prefixes": revoked},
        )
        uow.commit()
        return IssuedKey(site=site, key=key, token=token)


def deactivate_site(
    uow: UnitOfWork, *, site_id: str, actor: Principal, context: AuditContext
) -> Site:
    """Deactivate a site (admin only): every key of the site is revoked and none is issued
    again, in one audited transaction. Its data (datasets, ledger, jobs, models, evaluations,
    studies, offers) is kept unchanged, and stays out of the admin's reach. Idempotent: a second
    call changes nothing and records nothing."""
    actor.require_admin()
    if not looks_like_id(site_id):
        raise NotFoundError("site")
    with uow:
        site = uow.sites.get(site_id)
        if site is None:
            raise NotFoundError("site")
        now = utcnow()
        if not uow.sites.deactivate(site.id, at=now):
            uow.rollback()
            return uow.sites.get_fresh(site.id) or site
        # After the write above: keys a racing rotation committed are seen and revoked too.
        revoked: list[str] = []
        for key in uow.api_keys.active_for_site(site.id):
            uow.api_keys.revoke(key.id, at=now)
            revoked.append(key.prefix)
        audit.record(
            uow,
            action="site.deactivated",
            actor=actor,
            context=context,
            subject_type="site",
            subject_id=site.id,
            details={"revoked_key_prefixes": revoked, "data": "kept"},
        )
        uow.commit()
        return site
