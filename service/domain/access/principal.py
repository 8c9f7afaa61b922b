"""Who is calling: the admin, or a site (identified by its API key)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.domain.errors import PermissionDeniedError

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
        """True for the admin."""
        return self.role == "admin"

    def require_admin(self) -> None:
        """Raise unless the caller is the admin."""
        if not self.is_admin:
            raise PermissionDeniedError("this operation needs the admin key")

    def require_site(self) -> str:
        """The caller's site id; raise unless the caller is a site."""
        if self.role != "site" or self.site_id is None:
            raise PermissionDeniedError("this operation needs a site key, not the admin key")
        return self.site_id
