"""Problem documents become typed exceptions, and retries never charge a budget twice."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from privfit_client import (
    BudgetExhausted,
    Client,
    Forbidden,
    NotFound,
    ProblemError,
    RateLimited,
    RetryPolicy,
    Unauthenticated,
    ValidationFailed,
)
from privfit_client._http import KEYED_POSTS, retry_after_seconds

from tests.client.conftest import NO_WAIT, SPEC_PATH, SiteAccount, small_csv
from tests.support.live_server import LiveServer

ROOT = Path(__file__).resolve().parents[2]


def test_models_match_the_openapi_document() -> None:
    """privfit_client/models.py is what the generator makes of openapi/openapi.json today."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "client" / "generate_models.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_the_client_repeats_exactly_the_posts_the_api_makes_idempotent() -> None:
    """A POST is retried after a lost answer only where the API honours Idempotency-Key."""
    document = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    keyed = {
        path
        for path, operations in document["paths"].items()
        if any(
            p["in"] == "header" and p["name"].lower() == "idempotency-key"
            for p in operations.get("post", {}).get("parameters", [])
        )
    }
    assert keyed == KEYED_POSTS


def test_problems_are_typed_exceptions(
    server: LiveServer, site_client: Client, adult_train_csv: Path
) -> None:
    stranger = Client(server.base_url, "pf_not_a_key_0123456789abcdef", retry=NO_WAIT)
    with stranger, pytest.raises(Unauthenticated) as unauthenticated:
        stranger.me()
    assert unauthenticated.value.status == 401
    assert unauthenticated.value.type == "https://privfit.dev/problems/unauthenticated"
    assert unauthenticated.value.request_id

    with pytest.raises(Forbidden):
        site_client.create_site("not allowed")
    with pytest.raises(NotFound) as missing:
        site_client.model("no-such-model")
    assert missing.value.status == 404

    dataset = site_client.upload(small_csv(adult_train_csv, 500), SPEC_PATH)
    with pytest.raises(ValidationFailed) as invalid:
        site_client.fit(dataset.id, "no_such_mechanism", epsilon=1.0, regularization=1e-3)
    assert invalid.value.status == 422
    assert invalid.value.detail

    with pytest.raises(BudgetExhausted) as exhausted:
        site_client.fit(dataset.id, epsilon=dataset.budget.epsilon + 1, regularization=1e-3)
    assert exhausted.value.status == 409
    assert exhausted.value.remaining_epsilon == dataset.budget.epsilon
    assert exhausted.value.dataset_id == dataset.id
    assert site_client.budget(dataset.id).charges == []

    bad_spec = {"label": {"column": "income", "positive": ">50K"}, "features": []}
    with pytest.raises(ValidationFailed) as bad_upload:
        site_client.upload(small_csv(adult_train_csv, 10), bad_spec)
    assert bad_upload.value.errors, bad_upload.value.problem
    assert isinstance(bad_upload.value, ProblemError)


class DropFirstResponse(httpx.HTTPTransport):
    """Sends every request, but loses the server's answer to the first POST on ``path_end``:
    the server acted on it, the client sees a broken connection."""

    def __init__(self, path_end: str) -> None:
        super().__init__()
        self.path_end = path_end
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path.endswith(self.path_end):
            self.keys.append(request.headers.get("idempotency-key"))
            if len(self.keys) == 1:
                response.read()
                response.close()
                raise httpx.ReadError("connection lost", request=request)
        return response


def test_a_fit_whose_answer_is_lost_is_retried_and_charged_once(
    server: LiveServer, site: SiteAccount, adult_train_csv: Path
) -> None:
    transport = DropFirstResponse("/fits")
    with Client(server.base_url, site.key, retry=NO_WAIT, transport=transport) as pf:
        dataset = pf.upload(small_csv(adult_train_csv, 1000), SPEC_PATH)
        job = pf.fit(dataset.id, epsilon=1.0, regularization=1e-2).wait()
        budget = pf.budget(dataset.id)
    assert len(transport.keys) == 2
    assert transport.keys[0] is not None
    assert transport.keys[0] == transport.keys[1]  # the retry reused the key
    assert [(c.job_id, c.epsilon) for c in budget.charges] == [(job.id, 1.0)]
    assert budget.epsilon_spent == 1.0


def test_a_post_that_may_have_been_acted_on_is_not_repeated(
    server: LiveServer, site: SiteAccount, adult_train_csv: Path
) -> None:
    """An upload is not idempotent: a lost answer is an error, not a second dataset."""
    transport = DropFirstResponse("/v1/datasets")
    with Client(server.base_url, site.key, retry=NO_WAIT, transport=transport) as pf:
        with pytest.raises(httpx.ReadError):
            pf.upload(small_csv(adult_train_csv, 100), SPEC_PATH)
        assert len(transport.keys) == 1
        assert len(pf.datasets()) == 1


class RateLimitFirst(httpx.HTTPTransport):
    """Answers the first ``times`` requests with 429 and a Retry-After, then forwards."""

    def __init__(self, times: int, retry_after: str = "0") -> None:
        super().__init__()
        self.times = times
        self.retry_after = retry_after
        self.seen = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1
        if self.seen <= self.times:
            return httpx.Response(
                429,
                headers={"Retry-After": self.retry_after},
                json={"type": "about:blank", "title": "Too Many Requests", "status": 429},
                request=request,
            )
        return super().handle_request(request)


def test_429_is_retried_after_the_wait_it_asks_for(server: LiveServer, site: SiteAccount) -> None:
    transport = RateLimitFirst(times=2)
    with Client(server.base_url, site.key, retry=NO_WAIT, transport=transport) as pf:
        assert pf.me().id == site.id
    assert transport.seen == 3

    always = RateLimitFirst(times=10)
    patient = Client(server.base_url, site.key, retry=RetryPolicy(attempts=2), transport=always)
    with patient, pytest.raises(RateLimited) as limited:
        patient.me()
    assert limited.value.status == 429
    assert always.seen == 2


def test_retry_after_is_read_as_seconds_or_as_a_date() -> None:
    request = httpx.Request("GET", "http://x/")
    now = datetime(2026, 11, 25, 7, 0, 0, tzinfo=UTC)
    in_seconds = httpx.Response(429, headers={"Retry-After": "7"}, request=request)
    as_date = httpx.Response(
        503, headers={"Retry-After": "Wed, 25 Nov 2026 07:00:12 GMT"}, request=request
    )
    assert retry_after_seconds(in_seconds, now=now) == 7.0
    assert retry_after_seconds(as_date, now=now) == 12.0
    assert retry_after_seconds(httpx.Response(503, request=request)) is None


def test_the_client_imports_none_of_the_server_nor_its_extras() -> None:
    """Site software installs privfit-client alone: importing it (and its command line) pulls
    in neither the service nor pandas, pyarrow or matplotlib."""
    code = (
        "import sys, privfit_client, privfit_client.cli\n"
        "heavy = {'service', 'fastapi', 'sqlalchemy', 'numpy', 'pandas', 'pyarrow', 'matplotlib'}\n"
        "print(sorted(heavy & {name.split('.')[0] for name in sys.modules}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True
    )
    assert result.stdout.strip() == "[]"


def test_a_wait_that_runs_out_raises_timeout_and_a_later_wait_finishes(
    site_client: Client, adult_train_csv: Path
) -> None:
    dataset = site_client.upload(small_csv(adult_train_csv, 500), SPEC_PATH)
    job = site_client.fit(dataset.id, epsilon=0.5, regularization=1e-2)
    assert not job.done  # as answered when it was queued, without Prefer: wait
    with pytest.raises(TimeoutError):
        job.wait(timeout=0)
    assert job.wait(timeout=120).status == "succeeded"
