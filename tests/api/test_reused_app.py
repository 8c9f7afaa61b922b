"""The API tests share one app per test process (tests/conftest.py ``reused_app``): the next
test must find it in the state of a new app, whatever the last one left behind."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.api.deps import get_settings_from_app
from tests.conftest import ADMIN_HEADERS, make_test_settings, reused_app


def test_a_reused_app_keeps_nothing_of_the_test_before(
    sqlite_url: str, empty_sqlite_url: str
) -> None:
    first = reused_app(make_test_settings(sqlite_url))
    with TestClient(first) as client:
        assert client.get("/v1/sites", headers=ADMIN_HEADERS).status_code == 200
    rate_limits = first.state.rate_limits
    first.state.job_runner_factory = object()
    first.dependency_overrides[get_settings_from_app] = lambda: None
    assert b'route="/v1/sites"' in first.state.metrics.render()

    second = reused_app(make_test_settings(empty_sqlite_url))
    assert second is first
    assert second.state.settings.database_url == empty_sqlite_url
    assert b'route="/v1/sites"' not in second.state.metrics.render()
    assert second.state.rate_limits is not rate_limits
    assert not hasattr(second.state, "job_runner_factory")
    assert not hasattr(second.state, "engine")
    assert second.dependency_overrides == {}
