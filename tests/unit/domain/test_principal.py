"""The one rule of tenancy (issue 26 §1): a site reaches its own resources, the admin key none.

``Principal`` decides it for every use case; no other module asks whether the caller is the
admin, so no use case can hand the admin a site's data by its own exception."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import service
from service.domain.access.principal import Principal
from service.domain.errors import NotFoundError, PermissionDeniedError

ADMIN = Principal(role="admin")
SITE = Principal(role="site", site_id="a" * 32)


def test_a_site_owns_only_its_own_resources() -> None:
    assert SITE.owns("a" * 32)
    assert not SITE.owns("b" * 32)
    assert not SITE.owns(None)
    assert SITE.site_or_not_found("dataset") == "a" * 32
    assert SITE.require_site() == "a" * 32


@pytest.mark.parametrize("owner", ["a" * 32, None, ""])
def test_the_admin_owns_nothing(owner: str | None) -> None:
    assert not ADMIN.owns(owner)
    assert not Principal(role="admin", site_id=owner).owns(owner)


def test_a_site_resource_is_not_found_for_the_admin_as_an_unknown_id() -> None:
    with pytest.raises(NotFoundError) as found:
        ADMIN.site_or_not_found("model")
    assert str(found.value) == str(NotFoundError("model")) == "model not found"
    with pytest.raises(PermissionDeniedError):  # lists and uploads of site data
        ADMIN.require_site()


#: The modules that may ask whether the caller is the admin: sites, keys and the audit log.
ADMIN_WORK = {"service/domain/access/sites.py", "service/domain/audit.py"}


def test_only_the_admins_own_work_asks_for_the_admin() -> None:
    root = Path(service.__file__).parent
    asking = set()
    for path in root.rglob("*.py"):
        relative = path.relative_to(root.parent).as_posix()
        if relative.startswith("service/domain/access/principal.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "is_admin":
                asking.add(relative)
    assert asking <= ADMIN_WORK, sorted(asking - ADMIN_WORK)
