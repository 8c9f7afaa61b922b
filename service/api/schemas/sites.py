"""Sites and API keys."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict

from service.api.schemas.base import RequestModel, ResponseModel
from service.db.models import Site
from service.domain.access.sites import IssuedKey

__all__ = ["CallerRead", "IssuedKeyRead", "SiteCreate", "SiteList", "SiteRead", "SiteWithKey"]

SiteName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=100,
        pattern=r"^[^\x00-\x1f\x7f]*\S[^\x00-\x1f\x7f]*$",
        description="Unique display name: 1–100 characters, no control characters.",
        examples=["St. Mary's Hospital"],
    ),
]

_SITE_EXAMPLE: JsonDict = {
    "id": "0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f6",
    "name": "St. Mary's Hospital",
    "created_at": "2026-11-23T09:30:00Z",
    "deactivated_at": None,
}
_KEY_EXAMPLE: JsonDict = {
    "api_key": "pf_k3x9q2ma_6r1T0dVd3bQk9m1xJz8yP4sWc7uE2nGh5aLfKoYiRtB",
    "key_prefix": "k3x9q2ma",
    "created_at": "2026-11-23T09:30:00Z",
}


class SiteCreate(RequestModel):
    """A new site."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"name": "St. Mary's Hospital"}]})

    name: SiteName


class SiteRead(ResponseModel):
    """A site."""

    model_config = ConfigDict(json_schema_extra={"examples": [_SITE_EXAMPLE]})

    id: str = Field(description="The site's id (32 hex digits).")
    name: str
    created_at: datetime
    deactivated_at: datetime | None = Field(
        default=None,
        description="When the admin deactivated the site (its keys revoked, its data kept); "
        "null while it is active.",
    )

    @classmethod
    def from_row(cls, row: Site) -> SiteRead:
        return cls.model_validate(row)


class CallerRead(ResponseModel):
    """Who the API key of a request belongs to."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"role": "site", "site": _SITE_EXAMPLE}, {"role": "admin", "site": None}]
        }
    )

    role: Literal["admin", "site"] = Field(
        description="`admin`: manages sites, their keys and the audit log, and reaches no "
        "site's data; `site`: acts for `site`."
    )
    site: SiteRead | None = Field(description="The calling site; null for the admin key.")


class IssuedKeyRead(ResponseModel):
    """A freshly issued API key. `api_key` is shown only in this response: store it now."""

    model_config = ConfigDict(json_schema_extra={"examples": [_KEY_EXAMPLE]})

    api_key: str = Field(description="Send as `Authorization: Bearer <api_key>`. Shown once.")
    key_prefix: str = Field(description="Public part of the key, shown in audit events.")
    created_at: datetime


class SiteWithKey(ResponseModel):
    """A site with a key issued in this response."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"site": _SITE_EXAMPLE, "key": _KEY_EXAMPLE}]}
    )

    site: SiteRead
    key: IssuedKeyRead

    @classmethod
    def from_issued(cls, issued: IssuedKey) -> SiteWithKey:
        return cls(
            site=SiteRead.from_row(issued.site),
            key=IssuedKeyRead(
                api_key=issued.token,
                key_prefix=issued.key.prefix,
                created_at=issued.key.created_at,
            ),
        )


class SiteList(ResponseModel):
    """One page of sites."""

    items: list[SiteRead]
    total: int = Field(ge=0, description="Number of sites in all pages.")
    limit: int
    offset: int
