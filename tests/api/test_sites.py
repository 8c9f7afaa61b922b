"""Sites and keys over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from service.db.uow import UnitOfWorkFactory
from service.domain.access.keys import hash_key, parse_prefix
from tests.conftest import MakeSite, SiteHandle

PROBLEM = "application/problem+json"


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def test_admin_creates_a_site_and_gets_its_key_once(
    client: TestClient, admin_headers: dict[str, str], uow_factory: UnitOfWorkFactory
) -> None:
    response = client.post("/v1/sites", json={"name": "St. Mary's"}, headers=admin_headers)
    assert response.status_code == 201
    body = response.json()
    assert body["site"]["name"] == "St. Mary's"
    token = body["key"]["api_key"]
    prefix = parse_prefix(token)
    assert prefix is not None
    assert prefix == body["key"]["key_prefix"]
    # ≥ 128 bits of secret: token_urlsafe(32) is 43 characters of 6 bits.
    assert len(token.split("_", 2)[2]) >= 43

    with uow_factory() as uow:
        row = uow.api_keys.get_by_prefix(prefix)
        assert row is not None
        assert row.key_hash == hash_key(token)
        assert token not in (row.key_hash, row.prefix)
        events = uow.audit.list_page(action="site.created")
        assert [e.subject_id for e in events] == [body["site"]["id"]]

    # The key is never shown again.
    listing = client.get("/v1/sites", headers=admin_headers).json()
    assert token not in str(listing)


def test_site_reads_itself(client: TestClient, site: SiteHandle) -> None:
    response = client.get("/v1/sites/me", headers=site.headers)
    assert response.status_code == 200
    assert response.json()["id"] == site.id
    assert response.json()["name"] == site.name
    assert response.json()["created_at"].endswith(("Z", "+00:00"))


def test_rotation_revokes_the_old_key(client: TestClient, site: SiteHandle) -> None:
    response = client.post("/v1/sites/me/keys/rotate", headers=site.headers)
    assert response.status_code == 200
    new_key = response.json()["api_key"]
    assert new_key != site.key

    old = client.get("/v1/sites/me", headers=site.headers)
    assert old.status_code == 401
    assert old.headers["content-type"] == PROBLEM
    new = client.get("/v1/sites/me", headers={"Authorization": f"Bearer {new_key}"})
    assert new.status_code == 200
    assert new.json()["id"] == site.id

    # The revoked key cannot rotate again either.
    assert client.post("/v1/sites/me/keys/rotate", headers=site.headers).status_code == 401


def test_admin_rotates_a_site_key(
    client: TestClient, admin_headers: dict[str, str], site: SiteHandle
) -> None:
    response = client.post(f"/v1/sites/{site.id}/keys/rotate", headers=admin_headers)
    assert response.status_code == 200
    assert client.get("/v1/sites/me", headers=site.headers).status_code == 401
    new_headers = {"Authorization": f"Bearer {response.json()['api_key']}"}
    assert client.get("/v1/sites/me", headers=new_headers).status_code == 200


def test_duplicate_name_is_409(
    client: TestClient, admin_headers: dict[str, str], make_site: MakeSite
) -> None:
    make_site(name="Bank A")
    response = client.post("/v1/sites", json={"name": " Bank A "}, headers=admin_headers)
    assert response.status_code == 409
    assert response.headers["content-type"] == PROBLEM
    assert response.json()["type"] == "https://privfit.dev/problems/conflict"


def test_admin_lists_sites_in_pages(
    client: TestClient, admin_headers: dict[str, str], make_site: MakeSite
) -> None:
    names = [make_site(name=f"site {i}").name for i in range(3)]
    page = client.get("/v1/sites", params={"limit": 2}, headers=admin_headers).json()
    assert page["total"] == 3
    assert [s["name"] for s in page["items"]] == names[:2]
    rest = client.get("/v1/sites", params={"limit": 2, "offset": 2}, headers=admin_headers)
    assert [s["name"] for s in rest.json()["items"]] == names[2:]


def test_site_sees_only_itself(client: TestClient, make_site: MakeSite) -> None:
    one, two = make_site(), make_site()
    assert client.get(f"/v1/sites/{one.id}", headers=one.headers).status_code == 200
    other = client.get(f"/v1/sites/{two.id}", headers=one.headers)
    assert other.status_code == 404
    assert client.post(f"/v1/sites/{two.id}/keys/rotate", headers=one.headers).status_code == 403


def test_admin_only_routes_refuse_sites(client: TestClient, site: SiteHandle) -> None:
    for method, path, body in [
        ("POST", "/v1/sites", {"name": "x"}),
        ("GET", "/v1/sites", None),
        ("GET", "/v1/audit-events", None),
    ]:
        response = client.request(method, path, json=body, headers=site.headers)
        assert response.status_code == 403, path
        assert response.headers["content-type"] == PROBLEM
        assert response.json()["type"] == "https://privfit.dev/problems/permission-denied"


def test_site_only_routes_refuse_the_admin(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    assert client.get("/v1/sites/me", headers=admin_headers).status_code == 403
    assert client.post("/v1/sites/me/keys/rotate", headers=admin_headers).status_code == 403


@pytest.mark.parametrize("site_id", ["0" * 32, "not-an-id", "%00", "A" * 32])
def test_unknown_site_is_404(
    client: TestClient, admin_headers: dict[str, str], site_id: str
) -> None:
    response = client.get(f"/v1/sites/{site_id}", headers=admin_headers)
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "   "},
        {"name": "x" * 101},
        {"name": "tab\there"},
        {"name": "nul\u0000"},
        {"name": 7},
        {"name": "ok", "extra": 1},
        [],
        "name",
    ],
)
def test_bad_site_bodies_are_422(
    client: TestClient, admin_headers: dict[str, str], body: object
) -> None:
    response = client.post("/v1/sites", json=body, headers=admin_headers)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert problem["status"] == 422
    assert problem["errors"]
    for issue in problem["errors"]:
        assert set(issue) <= {"loc", "msg", "type"}


def test_unpaired_surrogate_is_422_not_500(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    response = client.post(
        "/v1/sites",
        content=b'{"name": "\\ud800"}',
        headers={**admin_headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 422


def test_audit_log_records_rotation_without_secrets(
    client: TestClient, admin_headers: dict[str, str], site: SiteHandle
) -> None:
    new_key = client.post("/v1/sites/me/keys/rotate", headers=site.headers).json()["api_key"]
    events = client.get(
        "/v1/audit-events", params={"action": "api_key.rotated"}, headers=admin_headers
    ).json()["items"]
    assert len(events) == 1
    event = events[0]
    assert event["actor_role"] == "site"
    assert event["actor_site_id"] == site.id
    assert event["request_id"]
    text = str(event)
    assert site.key not in text
    assert new_key not in text
    assert event["details"]["revoked_key_prefixes"] == [parse_prefix(site.key)]


UPLOAD = {
    "label": {"column": "outcome", "positive": "yes"},
    "features": [{"column": "age", "type": "numeric", "lower": 18, "upper": 90}],
    "weights": [0.5, -1.0],
}


def test_admin_deactivates_a_site_revoking_its_keys_and_keeping_its_data(
    client: TestClient,
    admin_headers: dict[str, str],
    make_site: MakeSite,
    uow_factory: UnitOfWorkFactory,
) -> None:
    site, bystander = make_site(), make_site()
    model = client.post("/v1/models", json=UPLOAD, headers=site.headers)
    assert model.status_code == 201, model.text

    response = client.post(f"/v1/sites/{site.id}/deactivate", headers=admin_headers)
    assert response.status_code == 200, response.text
    deactivated_at = response.json()["deactivated_at"]
    assert deactivated_at is not None
    assert response.json()["id"] == site.id

    # every key of the site is revoked at once; another site is untouched
    assert client.get("/v1/sites/me", headers=site.headers).status_code == 401
    assert client.get("/v1/sites/me", headers=bystander.headers).status_code == 200
    # the admin sees the site as deactivated, and still none of its data
    shown = client.get(f"/v1/sites/{site.id}", headers=admin_headers).json()
    assert shown["deactivated_at"] == deactivated_at
    listed = client.get("/v1/sites", headers=admin_headers).json()["items"]
    assert {s["id"]: s["deactivated_at"] for s in listed} == {
        site.id: deactivated_at,
        bystander.id: None,
    }
    model_id = model.json()["id"]
    assert client.get(f"/v1/models/{model_id}", headers=admin_headers).status_code == 404
    # no key is ever issued again: the admin's rotation is a 409 that issues nothing
    rotated = client.post(f"/v1/sites/{site.id}/keys/rotate", headers=admin_headers)
    assert rotated.status_code == 409
    assert rotated.headers["content-type"] == PROBLEM
    # deactivating again changes nothing
    again = client.post(f"/v1/sites/{site.id}/deactivate", headers=admin_headers)
    assert again.status_code == 200
    assert again.json()["deactivated_at"] == deactivated_at

    with uow_factory() as uow:
        # the data is kept as it was
        assert [m.id for m in uow.models.list_page(owner_site_id=site.id, limit=10, offset=0)] == [
            model_id
        ]
        assert uow.api_keys.active_for_site(site.id) == []
        # one audited event, naming the revoked key by its prefix only
        events = uow.audit.list_page(action="site.deactivated")
        assert [(e.subject_id, e.actor_role) for e in events] == [(site.id, "admin")]
        assert events[0].details is not None
        assert events[0].details["revoked_key_prefixes"] == [parse_prefix(site.key)]
        assert site.key not in str(events[0].details)
        assert uow.audit.list_page(action="api_key.rotated") == []


def test_only_the_admin_deactivates_and_only_sites_that_exist(
    client: TestClient, admin_headers: dict[str, str], make_site: MakeSite
) -> None:
    site = make_site()
    own = client.post(f"/v1/sites/{site.id}/deactivate", headers=site.headers)
    assert own.status_code == 403
    assert own.json()["type"] == "https://privfit.dev/problems/permission-denied"
    assert client.post(f"/v1/sites/{site.id}/deactivate").status_code == 401
    for unknown in ("0" * 32, "not-an-id"):
        response = client.post(f"/v1/sites/{unknown}/deactivate", headers=admin_headers)
        assert response.status_code == 404
        assert response.json()["detail"] == "site not found"
    assert client.get("/v1/sites/me", headers=site.headers).status_code == 200


def test_whoami_names_the_role_of_any_key(
    client: TestClient, admin_headers: dict[str, str], site: SiteHandle
) -> None:
    admin = client.get("/v1/sites/whoami", headers=admin_headers)
    assert admin.status_code == 200
    assert admin.json() == {"role": "admin", "site": None}
    own = client.get("/v1/sites/whoami", headers=site.headers)
    assert own.status_code == 200
    assert (own.json()["role"], own.json()["site"]["id"]) == ("site", site.id)
    assert client.get("/v1/sites/whoami").status_code == 401
