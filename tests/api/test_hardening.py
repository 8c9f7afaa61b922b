"""What a security tester checks: response headers, rate limits (429 + Retry-After), a key for
/metrics when asked, owner-only SQLite files, and site names that cannot impersonate others."""

from __future__ import annotations

import importlib.util
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from limits._storage_scheme import SCHEMES as limits_schemes

from service.api.deps import count_expensive
from service.api.routes import audit, datasets, fits, jobs, models, ops, sites, studies
from service.db.models import site_name_key
from service.db.session import make_engine
from service.main import create_app
from service.settings import RATE_LIMIT_STORAGE_SCHEMES, Settings
from tests.api.test_datasets import base_spec, csv_bytes, upload
from tests.conftest import MakeSite, SiteHandle

PROBLEM = "application/problem+json"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def _client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def limited(settings: Settings) -> Iterator[TestClient]:
    """An app with small limits: 3 failed authentications and 4 expensive operations a minute."""
    limited_settings = settings.model_copy(
        update={"rate_limit_failed_auth": "3/minute", "rate_limit_expensive": "4/minute"}
    )
    yield from _client(create_app(limited_settings))


def test_every_response_says_nosniff_and_api_responses_are_not_stored(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    created = client.post("/v1/sites", json={"name": "Headers"}, headers=admin_headers)
    assert created.status_code == 201
    for response in (
        created,
        client.get("/v1/sites", headers=admin_headers),
        client.get("/v1/sites"),  # a 401 problem
        client.get("/healthz"),
        client.get("/openapi.json"),
    ):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"
    asset = client.get("/docs-assets/swagger-ui.css")
    assert asset.headers["x-content-type-options"] == "nosniff"
    assert asset.headers.get("cache-control") != "no-store"


def test_failed_authentication_is_limited_per_address(
    limited: TestClient, admin_headers: dict[str, str]
) -> None:
    wrong = {"Authorization": "Bearer pf_nosuchpr_wrongsecretwrongsecretwrongsecret"}
    statuses = [limited.get("/v1/datasets", headers=wrong).status_code for _ in range(3)]
    assert statuses == [401, 401, 401]
    refused = limited.get("/v1/datasets", headers=wrong)
    assert refused.status_code == 429
    assert refused.headers["content-type"] == PROBLEM
    assert refused.json()["type"].endswith("/rate-limited")
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    # Only failures are refused: a valid key from the same address (the other users behind a
    # hospital's proxy or Compose's network) still gets in, while the failures stay refused.
    assert limited.get("/v1/sites", headers=admin_headers).status_code == 200
    assert limited.get("/v1/datasets", headers=wrong).status_code == 429


def test_failures_past_the_limit_add_no_audit_rows(
    limited: TestClient, admin_headers: dict[str, str]
) -> None:
    wrong = {"Authorization": "Bearer pf_nosuchpr_wrongsecretwrongsecretwrongsecret"}
    statuses = [limited.get("/v1/datasets", headers=wrong).status_code for _ in range(10)]
    assert statuses == [401] * 3 + [429] * 7
    events = limited.get(
        "/v1/audit-events", params={"action": "auth.failed"}, headers=admin_headers
    ).json()
    assert len(events["items"]) == 3  # the three 401s; the refused guesses wrote nothing


def _limited_app(settings: Settings, *, failed_auth: str | None, expensive: str | None) -> FastAPI:
    return create_app(
        settings.model_copy(
            update={"rate_limit_failed_auth": failed_auth, "rate_limit_expensive": expensive}
        )
    )


def test_a_key_prefix_under_attack_still_lets_its_owner_in(
    settings: Settings, admin_headers: dict[str, str]
) -> None:
    """Failures with one prefix from many addresses become 429, but the prefix is public: its
    owner's correct key keeps working, so nobody can lock a site out by guessing."""
    app = _limited_app(settings, failed_auth="3/minute", expensive=None)
    with TestClient(app, client=("203.0.113.9", 5000)) as owner:
        created = owner.post("/v1/sites", json={"name": "Target"}, headers=admin_headers)
        key = created.json()["key"]["api_key"]
        prefix = key.split("_")[1]
        wrong = {"Authorization": f"Bearer pf_{prefix}_{'x' * 43}"}
        statuses = []
        for attacker in range(5):  # a new address each time: only the prefix counter grows
            with TestClient(app, client=(f"198.51.100.{attacker}", 5000)) as other:
                statuses.append(other.get("/v1/datasets", headers=wrong).status_code)
        assert statuses == [401, 401, 401, 429, 429]
        assert (
            owner.get("/v1/datasets", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        )
        # The owner's address was never blamed for the attackers' failures.
        assert owner.get("/v1/datasets", headers=wrong).status_code == 429
        assert owner.get("/v1/sites", headers=admin_headers).status_code == 200


def test_expensive_operations_are_limited_per_key(
    limited: TestClient, admin_headers: dict[str, str]
) -> None:
    response = limited.post("/v1/sites", json={"name": "Busy"}, headers=admin_headers)
    headers = {"Authorization": f"Bearer {response.json()['key']['api_key']}"}
    body = {"dataset_id": "0" * 32, "epsilon": 1.0}
    # Predicting with a model that does not exist is still an expensive request: counted.
    statuses = [
        limited.post(f"/v1/models/{'0' * 32}/predict", json=body, headers=headers).status_code
        for _ in range(5)
    ]
    assert 429 not in statuses[:4]
    assert statuses[4] == 429
    # Cheap reads are not counted.
    assert limited.get("/v1/datasets", headers=headers).status_code == 200


def test_expensive_operations_are_limited_per_address(
    settings: Settings, admin_headers: dict[str, str]
) -> None:
    """Two keys from one address share the address's allowance; another address has its own."""
    app = _limited_app(settings, failed_auth=None, expensive="2/minute")
    path = f"/v1/models/{'0' * 32}/predict"
    with TestClient(app) as here, TestClient(app, client=("192.0.2.7", 5000)) as there:
        keys = [
            here.post("/v1/sites", json={"name": name}, headers=admin_headers).json()["key"]
            for name in ("First", "Second", "Third")
        ]
        first, second, third = ({"Authorization": f"Bearer {k['api_key']}"} for k in keys)
        assert here.post(path, json={}, headers=first).status_code != 429
        assert here.post(path, json={}, headers=second).status_code != 429
        refused = here.post(path, json={}, headers=third)
        assert refused.status_code == 429
        assert "address" in refused.json()["detail"]
        # The refusal did not count against the third key: it has its whole allowance elsewhere.
        assert there.post(path, json={}, headers=third).status_code != 429
        assert there.post(path, json={}, headers=third).status_code != 429
        assert there.post(path, json={}, headers=third).status_code == 429


#: Every operation that queues numerical work or stores a file, counted by the expensive rule.
EXPENSIVE_OPERATIONS = {
    ("POST", "/v1/datasets"),
    ("POST", "/v1/datasets/{dataset_id}/fits"),
    ("POST", "/v1/models"),
    ("POST", "/v1/models/{model_id}/predict"),
    ("POST", "/v1/studies/{study_id}/contributions"),
    ("POST", "/v1/studies/{study_id}/aggregations"),
    ("POST", "/v1/studies/{study_id}/federated-fits"),
}


def test_exactly_the_expensive_operations_are_counted() -> None:
    counted = set()
    for module in (audit, datasets, fits, jobs, models, ops, sites, studies):
        for route in module.router.routes:
            if isinstance(route, APIRoute) and any(
                dependency.call is count_expensive for dependency in route.dependant.dependencies
            ):
                counted |= {(method, route.path) for method in route.methods or ()}
    assert counted == EXPENSIVE_OPERATIONS


@pytest.mark.parametrize(("method", "path"), sorted(EXPENSIVE_OPERATIONS))
def test_each_expensive_operation_answers_429_when_over(
    settings: Settings, admin_headers: dict[str, str], method: str, path: str
) -> None:
    app = _limited_app(settings, failed_auth=None, expensive="1/minute")
    url = path.format(dataset_id="0" * 32, model_id="0" * 32, study_id="0" * 32)
    with TestClient(app) as client:
        created = client.post("/v1/sites", json={"name": "Site"}, headers=admin_headers)
        headers = {"Authorization": f"Bearer {created.json()['key']['api_key']}"}
        assert client.request(method, url, json={}, headers=headers).status_code != 429
        refused = client.request(method, url, json={}, headers=headers)
        assert refused.status_code == 429
        assert refused.headers["content-type"] == PROBLEM
        assert int(refused.headers["retry-after"]) >= 1


def test_a_refused_fit_spends_no_budget_and_queues_nothing(
    settings: Settings, admin_headers: dict[str, str]
) -> None:
    app = _limited_app(settings, failed_auth=None, expensive="2/minute")
    with TestClient(app) as client:
        created = client.post("/v1/sites", json={"name": "Site"}, headers=admin_headers)
        site = SiteHandle(
            id=created.json()["site"]["id"], name="Site", key=created.json()["key"]["api_key"]
        )
        uploaded = upload(client, site, csv_bytes(), base_spec())
        assert uploaded.status_code == 201, uploaded.text
        dataset_id = uploaded.json()["id"]
        fit = {"mechanism": "output_perturbation", "epsilon": 0.1, "regularization": 0.1}
        fits = f"/v1/datasets/{dataset_id}/fits"
        assert client.post(fits, json=fit, headers=site.headers).status_code == 202
        before = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
        refused = client.post(fits, json=fit, headers=site.headers)
        assert refused.status_code == 429
        after = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
        assert after["epsilon_spent"] == before["epsilon_spent"] == pytest.approx(0.1)
        assert len(after["charges"]) == 1
        assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 1
        # A refused upload stores nothing either.
        assert upload(client, site, csv_bytes(), base_spec()).status_code == 429
        assert client.get("/v1/datasets", headers=site.headers).json()["total"] == 1


def test_limits_are_configurable_and_validated(settings: Settings) -> None:
    with pytest.raises(ValueError, match="30/minute"):
        Settings(database_url="sqlite://", rate_limit_expensive="lots")
    assert Settings(database_url="sqlite://", rate_limit_expensive="").rate_limit_expensive is None
    for storage in ("nonsense://x", "async+redis://127.0.0.1:6379", "127.0.0.1:6379"):
        with pytest.raises(ValueError, match="rate-limit storage"):
            Settings(database_url="sqlite://", rate_limit_storage=storage)
    shared = Settings(database_url="sqlite://", rate_limit_storage="redis://127.0.0.1:6379")
    assert shared.rate_limit_storage == "redis://127.0.0.1:6379"
    # Every scheme the settings accept is one the library knows.
    assert set(RATE_LIMIT_STORAGE_SCHEMES) <= set(limits_schemes)


def test_metrics_can_require_the_admin_key(
    settings: Settings, admin_headers: dict[str, str], make_site: MakeSite
) -> None:
    site = make_site()
    guarded = settings.model_copy(update={"metrics_require_key": True})
    for client in _client(create_app(guarded)):
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=site.headers).status_code == 403
        response = client.get("/metrics", headers=admin_headers)
        assert response.status_code == 200
        assert "privfit_http_requests_total" in response.text


def test_metrics_stay_public_by_default(client: TestClient) -> None:
    assert client.get("/metrics").status_code == 200


def test_the_sqlite_file_and_its_folder_are_owner_only(tmp_path: Path) -> None:
    database = tmp_path / "new-folder" / "privfit.db"
    engine = make_engine(f"sqlite:///{database}")
    with engine.connect():
        pass
    engine.dispose()
    assert stat.S_IMODE(database.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(database.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("St Mary", "ST MARY"),
        ("St Mary", "Ｓｔ Ｍａｒｙ"),  # fullwidth letters
        ("Straße Klinik", "STRASSE KLINIK"),
        ("ﬁrst site", "first site"),  # the fi ligature
        ("St Mary", "St Ma\u200bry"),  # a zero-width space
        ("Clinic", "Cli\u00adnic\ufe0f"),  # a soft hyphen and a variation selector
    ],
)
def test_site_names_are_unique_after_normalisation_and_case_folding(
    client: TestClient, admin_headers: dict[str, str], first: str, second: str
) -> None:
    assert client.post("/v1/sites", json={"name": first}, headers=admin_headers).status_code == 201
    again = client.post("/v1/sites", json={"name": second}, headers=admin_headers)
    assert again.status_code == 409
    assert again.headers["content-type"] == PROBLEM


@pytest.mark.parametrize("control", ["\u202e", "\u2066", "\u200f", "\u061c", "\u0007"])
def test_site_names_with_bidi_or_control_characters_are_refused(
    client: TestClient, admin_headers: dict[str, str], control: str
) -> None:
    response = client.post(
        "/v1/sites", json={"name": f"Clinic{control}cinilC"}, headers=admin_headers
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM
    assert client.get("/v1/sites", headers=admin_headers).json()["total"] == 0


def test_every_operation_with_a_key_documents_429_with_retry_after(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    operations = [
        (path, operation)
        for path, item in spec["paths"].items()
        for operation in item.values()
        if "security" in operation
    ]
    assert len(operations) > 20
    for path, operation in operations:
        documented = operation["responses"]["429"]
        assert "Retry-After" in documented["headers"], path
        example = documented["content"][PROBLEM]["example"]
        assert example["status"] == 429
        assert example["type"].endswith("/rate-limited")
        assert example["instance"] == path
    public = spec["paths"]["/healthz"]["get"]["responses"]
    assert "429" not in public


def test_a_name_that_normalises_past_the_stored_key_is_refused(
    client: TestClient, admin_headers: dict[str, str]
) -> None:
    """NFKC spells U+FDFA out as 18 characters: 60 of them (1080) would overflow the unique key
    column on PostgreSQL; 55 (990) fit."""
    too_long = client.post("/v1/sites", json={"name": "\ufdfa" * 60}, headers=admin_headers)
    assert too_long.status_code == 422
    assert too_long.headers["content-type"] == PROBLEM
    assert client.get("/v1/sites", headers=admin_headers).json()["total"] == 0
    fits = client.post("/v1/sites", json={"name": "\ufdfa" * 55}, headers=admin_headers)
    assert fits.status_code == 201, fits.text


@pytest.mark.parametrize("name", ["\u200b", " \u200b\u2060 ", "\ufeff\u00ad"])
def test_a_name_of_invisible_characters_only_is_refused(
    client: TestClient, admin_headers: dict[str, str], name: str
) -> None:
    response = client.post("/v1/sites", json={"name": name}, headers=admin_headers)
    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM


def test_the_migration_backfills_the_key_the_service_computes() -> None:
    """The migration carries its own copy of the key function (migrations never import the
    models they predate): both agree on every default-ignorable code point and some text."""
    path = ROOT / "migrations" / "versions" / "2026-11-25_site_name_key.py"
    spec = importlib.util.spec_from_file_location("site_name_key_migration", path)
    assert spec is not None
    assert spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    samples = [chr(point) for point in range(0x30000) if not 0xD800 <= point <= 0xDFFF]
    samples += ["St Mary", "ＳＴ ＭＡＲＹ", "Straße", "St Ma\u200bry", "\U000e0041x"]
    assert [migration._key(s) for s in samples] == [site_name_key(s) for s in samples]
    assert site_name_key("A\u200b\u00ad\ufe0f\U000e0041B") == "ab"
