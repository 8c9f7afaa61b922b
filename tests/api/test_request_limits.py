"""What an unauthenticated or oversized request may cost (issue 26 §2, §3, §5): the key is
checked before any byte of the body is read, JSON bodies have their own limit and depth limit,
uploads keep their streamed limit, the failed-authentication limit refuses failures only, and
``X-Forwarded-For`` counts only from a configured proxy. Timing on a real server is in
``test_request_limits_live.py``."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from starlette.types import Message, Receive, Scope, Send

from service.api.json_body import MAX_JSON_DEPTH, JsonRoute, exceeds_depth, parse_json
from service.api.rate_limits import RateLimits
from service.main import create_app
from service.settings import Settings
from tests.api.test_datasets import ROWS, base_spec, csv_bytes, upload
from tests.conftest import ADMIN_HEADERS, SiteHandle, create_site

PROBLEM = "application/problem+json"
FITS = f"/v1/datasets/{'0' * 32}/fits"
WRONG = {"Authorization": "Bearer pf_nosuchpr_wrongsecretwrongsecretwrongsecret"}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


class BodyReads:
    """Wraps an ASGI app and counts the body messages the app received."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.reads = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counting() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self.reads += 1
            return message

        await self.app(scope, counting if scope["type"] == "http" else receive, send)


@pytest.fixture
def recorded(settings: Settings) -> Iterator[tuple[TestClient, BodyReads]]:
    recorder = BodyReads(create_app(settings))
    with TestClient(recorder) as client:
        yield client, recorder


# --- authentication before the body -----------------------------------------------------


@pytest.mark.parametrize("headers", [{}, WRONG, {"Authorization": "Basic abc"}])
def test_an_unauthenticated_body_is_never_read(
    recorded: tuple[TestClient, BodyReads], headers: dict[str, str]
) -> None:
    """Before: FastAPI read and parsed the body, then the dependency answered 401 (and a
    malformed body got 422, telling an anonymous caller how its body was judged)."""
    client, recorder = recorded
    body = b'{"mechanism": "objective_perturbation", "params": {"x": [' + b"1," * 40_000 + b"1"
    response = client.post(
        FITS, content=body, headers={**headers, "Content-Type": "application/json"}
    )
    assert response.status_code == 401
    assert response.headers["content-type"] == PROBLEM
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["connection"] == "close"  # not drained: the connection is dropped
    assert recorder.reads == 0


def test_an_unauthenticated_chunked_body_over_the_limit_is_401_unread(
    recorded: tuple[TestClient, BodyReads],
) -> None:
    client, recorder = recorded

    def chunks() -> Iterator[bytes]:
        yield b'{"params": ['
        for _ in range(40):
            yield b"1," * 32_768

    response = client.post(FITS, content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 401
    assert recorder.reads == 0


def test_an_authenticated_body_is_read(recorded: tuple[TestClient, BodyReads]) -> None:
    client, recorder = recorded
    response = client.post("/v1/sites", json={"name": "Reader"}, headers=ADMIN_HEADERS)
    assert response.status_code == 201
    assert recorder.reads == 1


def test_public_routes_and_unknown_paths_need_no_key(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/v1/no-such-thing").status_code == 404
    assert client.put("/v1/sites").status_code == 405


def test_every_router_parses_json_off_the_event_loop() -> None:
    """Every API route is a :class:`JsonRoute` (its body is parsed on a worker thread)."""
    from service.main import ROUTERS

    routes = [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]
    assert len(routes) > 40
    assert [r.path for r in routes if not isinstance(r, JsonRoute)] == []


# --- body size ----------------------------------------------------------------------------


@pytest.fixture
def small_json(settings: Settings) -> Settings:
    """JSON bodies up to 4 KiB; uploads up to the usual 1 MiB."""
    return settings.model_copy(update={"max_json_bytes": 4096})


def test_a_declared_json_body_over_its_limit_is_413_unread(small_json: Settings) -> None:
    recorder = BodyReads(create_app(small_json))
    with TestClient(recorder) as client:
        body = json.dumps({"name": "x" * 5000}).encode()
        response = client.post(
            "/v1/sites", content=body, headers={**ADMIN_HEADERS, "Content-Type": "application/json"}
        )
        assert response.status_code == 413
        assert response.headers["content-type"] == PROBLEM
        assert "4096" in response.json()["detail"]
        assert recorder.reads == 0
        # Whatever the media type: only the upload route streams large bodies.
        files = {"file": ("a.csv", b"x" * 5000, "text/csv")}
        assert client.post(FITS, files=files, headers=ADMIN_HEADERS).status_code == 413


def test_uploads_keep_their_streamed_limit(small_json: Settings) -> None:
    """A dataset far larger than the JSON limit is still accepted (and one over
    ``PRIVFIT_MAX_REQUEST_BYTES`` is still 413)."""
    with TestClient(create_app(small_json)) as client:
        site = create_site(client, "Uploader")
        data = csv_bytes([*ROWS] * 200)
        assert len(data) > 4 * small_json.max_json_bytes
        stored = upload(client, site, data, base_spec())
        assert stored.status_code == 201, stored.text
        huge = b"x" * (small_json.max_request_bytes + 1)
        assert upload(client, site, huge, base_spec()).status_code == 413


# --- depth --------------------------------------------------------------------------------


def _nested(depth: int, kinds: list[bool]) -> str:
    """A JSON value nested ``depth`` levels deep, arrays or objects as ``kinds`` says."""
    opening = "".join('{"k":' if kinds[i % len(kinds)] else "[" for i in range(depth))
    closing = "".join("}" if kinds[i % len(kinds)] else "]" for i in reversed(range(depth)))
    return opening + "1" + closing


@given(depth=st.integers(0, 3000), kinds=st.lists(st.booleans(), min_size=1, max_size=5))
def test_parse_json_refuses_exactly_the_documents_deeper_than_the_limit(
    depth: int, kinds: list[bool]
) -> None:
    text = _nested(depth, kinds)
    if depth > MAX_JSON_DEPTH:
        with pytest.raises(ValueError, match="nested deeper"):
            parse_json(text)
    else:
        assert parse_json(text) == json.loads(text)
        assert not exceeds_depth(json.loads(text), MAX_JSON_DEPTH)


def test_depth_counting_needs_no_recursion() -> None:
    value: list[object] = []
    for _ in range(100_000):
        value = [value]
    assert exceeds_depth(value, MAX_JSON_DEPTH)
    assert not exceeds_depth({"a": [1, {"b": 2}], "c": "[[[["}, 3)  # strings do not count
    assert exceeds_depth({"a": [1, {"b": []}]}, 3)
    assert not exceeds_depth("[[[[", 0)


@hypothesis_settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(depth=st.one_of(st.integers(0, 200), st.sampled_from([1_000, 100_000])))
def test_a_body_or_spec_of_any_depth_is_a_4xx_problem_never_a_500(
    client: TestClient, site: SiteHandle, depth: int
) -> None:
    """Before: a spec nested 100,000 levels deep was a 500 (RecursionError)."""
    deep = _nested(depth, [True, False])
    body = '{"mechanism": "objective_perturbation", "epsilon": 1, "params": {"x": ' + deep + "}}"
    response = client.post(
        FITS, content=body, headers={**site.headers, "Content-Type": "application/json"}
    )
    assert 400 <= response.status_code < 500
    assert response.headers["content-type"] == PROBLEM
    if depth + 2 > MAX_JSON_DEPTH:
        assert response.status_code == 422
        assert response.json()["errors"][0]["type"] == "json_too_deep"
    spec = json.dumps(base_spec())[:-1] + ', "extra": ' + deep + "}"
    uploaded = upload(client, site, csv_bytes(), spec)
    assert 400 <= uploaded.status_code < 500
    assert uploaded.headers["content-type"] == PROBLEM
    if depth + 1 > MAX_JSON_DEPTH:
        assert uploaded.json()["type"].endswith("/invalid-dataset-spec")
        assert "nested deeper" in uploaded.json()["detail"]
    assert client.get("/v1/datasets", headers=site.headers).json()["total"] == 0


# --- failed authentication: failures only, per address the proxy vouches for ---------------


def _app(settings: Settings, **updates: object) -> FastAPI:
    return create_app(
        settings.model_copy(
            update={"rate_limit_failed_auth": "3/minute", "rate_limit_expensive": None, **updates}
        )
    )


def test_a_broken_script_does_not_lock_out_its_neighbours(settings: Settings) -> None:
    """Everyone behind one address (a hospital's proxy, Compose's network) shares it: 80 bad
    keys from it are refused, but the good keys from it keep working throughout."""
    app = _app(settings)
    with TestClient(app, client=("192.0.2.10", 4000)) as shared:
        good = create_site(shared, "Neighbour").headers
        statuses = []
        for _ in range(80):
            statuses.append(shared.get("/v1/datasets", headers=WRONG).status_code)
            assert shared.get("/v1/datasets", headers=good).status_code == 200
        assert statuses[:3] == [401] * 3
        assert set(statuses[3:]) == {429}


def test_forwarded_for_from_an_untrusted_peer_is_ignored(settings: Settings) -> None:
    """Before: rotating X-Forwarded-For gave every bad key a fresh allowance (0 x 429 in 80)."""
    app = _app(settings)
    with TestClient(app, client=("198.51.100.7", 4000)) as client:
        statuses = [
            client.get(
                "/v1/datasets", headers={**WRONG, "X-Forwarded-For": f"203.0.113.{i}"}
            ).status_code
            for i in range(80)
        ]
    assert statuses.count(429) == 77


def test_a_trusted_proxy_names_its_clients(settings: Settings) -> None:
    """From a configured proxy, each client behind it has its own allowance, and the audit log
    records the client's address (the right-most one the proxy did not add itself)."""
    app = _app(settings, trusted_proxies="10.0.0.0/8")
    with TestClient(app, client=("10.1.2.3", 4000)) as proxy:
        for client_ip in ("203.0.113.1", "203.0.113.2"):
            # The client may prepend anything; the proxy appends what it saw.
            headers = {**WRONG, "X-Forwarded-For": f"1.2.3.4, {client_ip}, 10.9.9.9"}
            statuses = [proxy.get("/v1/datasets", headers=headers).status_code for _ in range(4)]
            assert statuses == [401, 401, 401, 429]
        events = proxy.get(
            "/v1/audit-events", params={"action": "auth.failed"}, headers=ADMIN_HEADERS
        ).json()["items"]
        assert {event["client_ip"] for event in events} == {"203.0.113.1", "203.0.113.2"}


def test_trusted_proxies_are_validated() -> None:
    assert Settings(database_url="sqlite://").trusted_proxy_networks == ()
    parsed = Settings(database_url="sqlite://", trusted_proxies="10.0.0.0/8, 192.0.2.7, ::1")
    assert [str(n) for n in parsed.trusted_proxy_networks] == [
        "10.0.0.0/8",
        "192.0.2.7/32",
        "::1/128",
    ]
    with pytest.raises(ValueError, match="not an IP address or CIDR"):
        Settings(database_url="sqlite://", trusted_proxies="proxy.example")


def test_failed_authentications_are_shared_across_replicas_through_redis() -> None:
    """Two API processes with ``redis://`` counters enforce one limit, as Compose runs them."""
    import redis

    try:
        redis.Redis.from_url("redis://127.0.0.1:6379", socket_timeout=1).ping()
    except redis.exceptions.RedisError:
        if os.environ.get("PRIVFIT_REQUIRE_REDIS") == "1":
            pytest.fail("Redis not reachable at 127.0.0.1:6379 and PRIVFIT_REQUIRE_REDIS=1")
        pytest.skip("Redis not reachable at 127.0.0.1:6379")
    replicas = [
        RateLimits(failed_auth="3/minute", expensive=None, storage_url="redis://127.0.0.1:6379")
        for _ in range(2)
    ]
    address = f"test-{uuid.uuid4().hex}"  # fresh counters for this run
    replicas[0].record_failed_authentication(address, None)
    replicas[1].record_failed_authentication(address, None)
    replicas[0].record_failed_authentication(address, None)
    assert replicas[1].address_over_limit(address)
    with pytest.raises(Exception, match="too many failed authentications"):
        replicas[1].record_failed_authentication(address, None)
