"""Who is calling: the admin, or a site (identified by its API key).

The one rule of tenancy lives here. Site data (datasets and their budgets, jobs, models and
their exports and predictions, evaluations, plans, studies, offers) belongs to sites: a site
reaches its own (and, for a study, what its members share); the admin key reaches none of it.
The admin runs the service: it creates, lists and deactivates sites, rotates their keys and reads
the audit log. So:

* an operation on one site resource asks :meth:`Principal.owns` or
  :meth:`Principal.site_or_not_found`: for the admin every site resource is a
  :class:`NotFoundError`, the same as an id that names nothing (its existence is not revealed);
* an operation on a collection of site data (a list, an upload) asks :meth:`Principal.require_site`:
  the admin, who owns no site data, gets a :class:`PermissionDeniedError` (403).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.domain.errors import NotFoundError, PermissionDeniedError

__all__ = ["Principal", "Role"]

Role = Literal["admin", "site"]


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    ``key_id`` is None for the admin key configured in settings (it has no row); ``site_id`` is
    None for the admin.
    """

    role: Role
    site_id: str | None = None
    key_id: str | None = None
    key_prefix: str | None = None

    @property
    def is_admin(self) -> bool:
        """True for the admin (who manages sites and keys, and owns no site data)."""
        return self.role == "admin"

    def require_admin(self) -> None:
        """Raise unless the caller is the admin."""
        if not self.is_admin:
            raise PermissionDeniedError("this operation needs the admin key")

    def require_site(self) -> str:
        """The caller's site id, for an operation on a collection of site data (a list, an
        upload); 403 for the admin, which owns no site data."""
        if self.role != "site" or self.site_id is None:
            raise PermissionDeniedError("this operation needs a site key, not the admin key")
        return self.site_id

    def owns(self, owner_site_id: str | None) -> bool:
        """True iff the caller is the site ``owner_site_id``; never for the admin."""
        return self.role == "site" and self.site_id is not None and self.site_id == owner_site_id

    def site_or_not_found(self, resource: str) -> str:
        """The caller's site id, for an operation on one ``resource`` of a site. The admin owns
        no site resource: for it the resource is NotFound, as an id that names nothing."""
        if self.role != "site" or self.site_id is None:
            raise NotFoundError(resource)
        return self.site_id
