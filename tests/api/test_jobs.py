"""Jobs over HTTP: status and progress, failures, cancellation and its ledger effects,
idempotent retries, listing and tenancy.

Timing is controlled, not slept on: a *gated* fit (:class:`Gate`) reports progress 0.5 and
then waits for the test to let it finish, so every intermediate state is observed for sure;
a :class:`~tests.unit.jobs._flow.HoldingRunner` keeps jobs queued; an
:class:`~tests.unit.jobs._flow.InlineRunner` runs them synchronously with an injected fit.
The runner is swapped through ``app.state.job_runner``, the app's one seam to the runner.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2 as httpx
import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from numpy.typing import NDArray

from service.domain.jobs import lifecycle as domain_jobs
from service.domain.jobs.lifecycle import recover_jobs, settle_lost_job
from service.dp import ConvergenceError, FitResult, PreparedDesign
from service.dp import fit as dp_fit
from service.main import create_app
from service.runtime.runner import JobRunner, PoolJobRunner
from service.runtime.worker import run_job
from service.settings import Settings
from tests.api.conftest import HeldRunner
from tests.conftest import ADMIN_KEY, MakeSite, SiteHandle
from tests.unit.jobs._flow import (
    TIMEOUT,
    HoldingRunner,
    InlineRunner,
    budget,
    fit_body,
    get_job,
    toy_spec,
    upload,
    wait_for,
    wait_job,
)


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


PROBLEM_JSON = "application/problem+json"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}
#: Appears in every injected failure's message, next to a real data value: neither may leak.
SECRET = "SECRET-ROW-VALUE"


class Gate:
    """A fit that reports progress 0.5, then waits for a permit before really fitting."""

    def __init__(self) -> None:
        self._permits = threading.Semaphore(0)
        self.entered = 0

    def fit(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        mechanism: str,
        *,
        progress: Callable[[float], None] | None = None,
        **kwargs: Any,
    ) -> FitResult:
        assert progress is not None
        progress(0.5)
        self.entered += 1
        if not self._permits.acquire(timeout=TIMEOUT):
            raise RuntimeError("the test never opened the gate")
        return dp_fit(X, y, mechanism, **kwargs)

    def open(self, permits: int = 1) -> None:
        for _ in range(permits):
            self._permits.release()


@pytest.fixture
def gate(app: FastAPI, client: TestClient) -> Iterator[Gate]:
    """Jobs run on a one-thread pool whose fits wait at the gate."""
    gate = Gate()
    uow_factory = app.state.uow_factory
    runner = PoolJobRunner(
        # progress_interval=0: every report is written, so the gate's 0.5 is seen at once
        worker=lambda: functools.partial(run_job, uow_factory, fit=gate.fit, progress_interval=0.0),
        recover_jobs=functools.partial(recover_jobs, uow_factory),
        on_lost=functools.partial(settle_lost_job, uow_factory),
        workers=1,
        kind="thread",
    )
    runner.start()
    app.state.job_runner = runner
    yield gate
    gate.open(100)
    runner.shutdown(wait=True)


def _post_fit(
    client: TestClient,
    site: SiteHandle,
    dataset_id: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    response = client.post(
        f"/v1/datasets/{dataset_id}/fits",
        json=fit_body() if body is None else body,
        headers={**site.headers, **(headers or {})},
    )
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    return job


def _models_total(client: TestClient, site: SiteHandle) -> int:
    response = client.get("/v1/models", headers=site.headers)
    assert response.status_code == 200, response.text
    total: int = response.json()["total"]
    return total


def _cancel(client: TestClient, site: SiteHandle, job_id: str) -> dict[str, Any]:
    response = client.post(f"/v1/jobs/{job_id}/cancel", headers=site.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# --- status and progress -------------------------------------------------------------------


def test_a_job_goes_queued_running_succeeded(
    client: TestClient, site: SiteHandle, gate: Gate
) -> None:
    dataset = upload(client, site.headers)
    first = _post_fit(client, site, dataset["id"])
    wait_for(lambda: gate.entered == 1, what="first job at the gate")
    # The only worker is busy with the first job: the second one waits in the queue.
    second = _post_fit(client, site, dataset["id"])

    queued = get_job(client, site.headers, second["id"])
    assert queued["status"] == "queued"
    assert queued["progress"] == 0.0
    assert (queued["started_at"], queued["finished_at"], queued["model_id"]) == (None, None, None)
    assert queued["attempt"] == 0
    running = get_job(client, site.headers, first["id"])
    assert running["status"] == "running"
    assert running["progress"] == 0.5
    assert running["started_at"] is not None
    assert running["finished_at"] is None
    assert running["attempt"] == 1
    assert running["model_id"] is None
    assert running["error"] is None

    gate.open()
    wait_for(lambda: gate.entered == 2, what="second job at the gate")
    running = get_job(client, site.headers, second["id"])
    assert (running["status"], running["progress"]) == ("running", 0.5)
    assert get_job(client, site.headers, first["id"])["status"] == "succeeded"

    gate.open()
    done = wait_job(client, site.headers, second["id"])
    assert done["status"] == "succeeded"
    assert done["progress"] == 1.0
    assert done["model_id"] is not None
    assert done["finished_at"] is not None
    assert done["charges"][0]["state"] == "charged"
    assert _models_total(client, site) == 2


def test_dp_sgd_reports_progress_while_it_runs_and_stops_when_cancelled(
    client: TestClient, site: SiteHandle
) -> None:
    """The real mechanism on the default runner: progress strictly between 0 and 1 is seen
    over HTTP; a cancel then stops it at its next report, budget kept spent, no model."""
    dataset = upload(client, site.headers)
    body = fit_body("dp_sgd", epsilon=1.0, params={"epochs": 2000, "batch_size": 1})
    job = _post_fit(client, site, dataset["id"], body)
    seen: list[float] = []

    def midway() -> bool:
        current = get_job(client, site.headers, job["id"])
        assert current["status"] in {"queued", "running"}, current
        progress = float(current["progress"])
        seen.append(progress)
        return 0.0 < progress < 1.0

    wait_for(midway, what="progress strictly between 0 and 1")
    cancelling = _cancel(client, site, job["id"])
    assert cancelling["status"] == "running"
    assert cancelling["cancel_requested"] is True

    done = wait_job(client, site.headers, job["id"])
    assert done["status"] == "cancelled"
    assert done["model_id"] is None
    assert done["error"] is None
    assert done["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 1.0, "delta": 0.0, "state": "charged"}
    ]
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 1.0
    assert _models_total(client, site) == 0
    assert all(0.0 <= p <= 1.0 for p in seen)
    assert seen == sorted(seen)


# --- failures ------------------------------------------------------------------------------


def _failing_fit(make_error: Callable[[str], Exception]) -> Callable[..., FitResult]:
    def fit(design: PreparedDesign, y: None, mechanism: str, **_: Any) -> FitResult:
        # The worker fits the stored dataset as a prepared design (its labels inside).
        X, labels = design.X, design.y
        raise make_error(f"{SECRET}: row 3 has x = {float(X[3, 0])!r}, label {float(labels[3])!r}")

    return fit


@pytest.mark.parametrize(
    ("make_error", "slug"),
    [
        (ConvergenceError, "did-not-converge"),
        (ValueError, "invalid-data"),
        (RuntimeError, "job-failed"),
        (MemoryError, "job-failed"),
    ],
    ids=["convergence", "value", "runtime", "memory"],
)
def test_a_failed_job_carries_a_problem_without_data_and_keeps_its_budget_spent(
    app: FastAPI,
    client: TestClient,
    site: SiteHandle,
    make_error: Callable[[str], Exception],
    slug: str,
) -> None:
    dataset = upload(client, site.headers)
    app.state.job_runner = InlineRunner(app.state.uow_factory, fit=_failing_fit(make_error))

    job = _post_fit(client, site, dataset["id"])

    failed = get_job(client, site.headers, job["id"])
    assert failed["status"] == "failed"
    assert failed["model_id"] is None
    assert set(failed["error"]) == {"type", "title", "detail"}
    assert failed["error"]["type"].endswith("/" + slug)
    assert failed["error"]["title"]
    assert failed["error"]["detail"]
    listing = client.get("/v1/jobs", headers=site.headers).text
    for text in (str(failed), listing):
        assert SECRET not in text
        assert "row 3" not in text
    assert failed["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 0.5, "delta": 0.0, "state": "charged"}
    ]
    state = budget(client, site.headers, dataset["id"])
    assert state["epsilon_spent"] == 0.5
    assert [c["state"] for c in state["charges"]] == ["charged"]
    assert _models_total(client, site) == 0


def test_a_dataset_deleted_before_its_job_runs_fails_the_job_budget_kept(
    app: FastAPI, client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    app.state.job_runner = HoldingRunner()
    job = _post_fit(client, site, dataset["id"])
    assert client.delete(f"/v1/datasets/{dataset['id']}", headers=site.headers).status_code in {
        200,
        204,
    }

    assert run_job(app.state.uow_factory, job["id"]).status == "failed"

    failed = get_job(client, site.headers, job["id"])
    assert failed["error"]["type"].endswith("/dataset-unavailable")
    assert failed["charges"][0]["state"] == "charged"
    assert _models_total(client, site) == 0


# --- cancellation --------------------------------------------------------------------------


def test_cancelling_a_queued_job_refunds_its_charge(
    app: FastAPI, client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, spec=toy_spec(epsilon=0.5))
    holding = HoldingRunner()
    app.state.job_runner = holding
    job = _post_fit(client, site, dataset["id"], fit_body(epsilon=0.5))
    assert holding.submitted == [job["id"]]
    assert job["status"] == "queued"
    assert budget(client, site.headers, dataset["id"])["epsilon_remaining"] == 0.0

    cancelled = _cancel(client, site, job["id"])

    assert cancelled["status"] == "cancelled"
    assert cancelled["finished_at"] is not None
    assert cancelled["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 0.5, "delta": 0.0, "state": "refunded"}
    ]
    state = budget(client, site.headers, dataset["id"])
    assert (state["epsilon_spent"], state["epsilon_remaining"]) == (0.0, 0.5)
    assert state["charges"][0]["state"] == "refunded"
    assert state["charges"][0]["refunded_at"] is not None

    # The runner may still hand the job to a worker: it is not claimed and never fits.
    def must_not_fit(*_: Any, **__: Any) -> FitResult:
        raise AssertionError("a cancelled job was fitted")

    assert run_job(app.state.uow_factory, job["id"], fit=must_not_fit).status == "cancelled"
    assert get_job(client, site.headers, job["id"])["attempt"] == 0
    # The whole budget is back: a fit of the full ε is accepted again.
    app.state.job_runner = InlineRunner(app.state.uow_factory)
    again = _post_fit(client, site, dataset["id"], fit_body(epsilon=0.5))
    assert get_job(client, site.headers, again["id"])["status"] == "succeeded"
    assert budget(client, site.headers, dataset["id"])["epsilon_remaining"] == 0.0


def test_cancelling_a_running_job_keeps_the_budget_spent_and_releases_no_model(
    client: TestClient, site: SiteHandle, gate: Gate
) -> None:
    dataset = upload(client, site.headers)
    job = _post_fit(client, site, dataset["id"])
    wait_for(lambda: gate.entered == 1, what="job at the gate")

    cancelling = _cancel(client, site, job["id"])
    assert (cancelling["status"], cancelling["cancel_requested"]) == ("running", True)
    assert cancelling["charges"][0]["state"] == "charged"
    # A second cancel while it winds down is harmless.
    assert _cancel(client, site, job["id"])["cancel_requested"] is True

    gate.open()  # the fit itself completes; its result must still be dropped
    done = wait_job(client, site.headers, job["id"])

    assert done["status"] == "cancelled"
    assert done["model_id"] is None
    assert done["charges"][0]["state"] == "charged"
    state = budget(client, site.headers, dataset["id"])
    assert state["epsilon_spent"] == 0.5
    assert [c["state"] for c in state["charges"]] == ["charged"]
    assert _models_total(client, site) == 0


def test_cancelling_a_finished_job_is_409(
    app: FastAPI, client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    app.state.job_runner = InlineRunner(app.state.uow_factory)
    succeeded = _post_fit(client, site, dataset["id"])
    app.state.job_runner = InlineRunner(app.state.uow_factory, fit=_failing_fit(ConvergenceError))
    failed = _post_fit(client, site, dataset["id"])
    app.state.job_runner = HoldingRunner()
    cancelled = _post_fit(client, site, dataset["id"])
    _cancel(client, site, cancelled["id"])
    expected = {succeeded["id"]: "succeeded", failed["id"]: "failed", cancelled["id"]: "cancelled"}
    spent_before = budget(client, site.headers, dataset["id"])

    for job_id, status in expected.items():
        response = client.post(f"/v1/jobs/{job_id}/cancel", headers=site.headers)
        assert response.status_code == 409, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
        assert status in response.json()["detail"]
        assert get_job(client, site.headers, job_id)["status"] == status
    assert budget(client, site.headers, dataset["id"]) == spent_before
    assert spent_before["epsilon_spent"] == 1.0  # succeeded + failed; the cancelled one refunded


# --- idempotency ---------------------------------------------------------------------------


def test_an_idempotent_retry_returns_the_same_job_charged_once(
    client: TestClient, make_site: MakeSite
) -> None:
    site, other = make_site(), make_site()
    dataset = upload(client, site.headers)
    key = {"Idempotency-Key": "fit-2024-06-01-a"}
    url = f"/v1/datasets/{dataset['id']}/fits"

    first = client.post(url, json=fit_body(), headers={**site.headers, **key})
    assert first.status_code == 202, first.text
    assert "Idempotent-Replayed" not in first.headers
    wait_job(client, site.headers, first.json()["id"])
    retries = [client.post(url, json=fit_body(), headers={**site.headers, **key}) for _ in range(3)]

    for retry in retries:
        assert retry.status_code == 202, retry.text
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert retry.headers["Location"] == first.headers["Location"]
        assert retry.json()["id"] == first.json()["id"]
        assert retry.json()["status"] == "succeeded"
    state = budget(client, site.headers, dataset["id"])
    assert state["epsilon_spent"] == 0.5
    assert [c["job_id"] for c in state["charges"]] == [first.json()["id"]]
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 1

    # The same key with a different request is refused, nothing charged.
    changed = client.post(url, json=fit_body(epsilon=0.25), headers={**site.headers, **key})
    assert changed.status_code == 422, changed.text
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 0.5

    # Keys are per site: another site's identical key is its own request.
    other_dataset = upload(client, other.headers)
    mine = client.post(
        f"/v1/datasets/{other_dataset['id']}/fits",
        json=fit_body(),
        headers={**other.headers, **key},
    )
    assert mine.status_code == 202, mine.text
    assert "Idempotent-Replayed" not in mine.headers
    assert mine.json()["id"] != first.json()["id"]


def test_an_idempotency_key_that_is_too_long_is_422(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits",
        json=fit_body(),
        headers={**site.headers, "Idempotency-Key": "k" * 201},
    )
    assert response.status_code == 422, response.text
    assert budget(client, site.headers, dataset["id"])["charges"] == []


class TestConcurrentRetries:
    """Identical requests racing with one key: one job, one charge (on both backends)."""

    def test_racing_retries_share_one_job_and_one_charge(
        self, app: FastAPI, client: TestClient, site: SiteHandle
    ) -> None:
        dataset = upload(client, site.headers)
        app.state.job_runner = HoldingRunner()
        headers = {**site.headers, "Idempotency-Key": "racing-key"}
        url = f"/v1/datasets/{dataset['id']}/fits"

        with ThreadPoolExecutor(max_workers=8) as pool:
            responses = list(
                pool.map(lambda _: client.post(url, json=fit_body(), headers=headers), range(8))
            )

        assert [r.status_code for r in responses] == [202] * 8, [r.text for r in responses]
        assert len({r.json()["id"] for r in responses}) == 1
        assert sum("Idempotent-Replayed" not in r.headers for r in responses) == 1
        state = budget(client, site.headers, dataset["id"])
        assert state["epsilon_spent"] == 0.5
        assert len(state["charges"]) == 1


# --- listing and tenancy -------------------------------------------------------------------


def test_jobs_are_listed_newest_first_per_site(
    app: FastAPI, client: TestClient, make_site: MakeSite, admin_headers: dict[str, str]
) -> None:
    site, other = make_site(), make_site()
    app.state.job_runner = HoldingRunner()
    dataset = upload(client, site.headers)
    ids = [_post_fit(client, site, dataset["id"])["id"] for _ in range(3)]
    other_id = _post_fit(client, other, upload(client, other.headers)["id"])["id"]

    page = client.get("/v1/jobs", headers=site.headers).json()
    assert [j["id"] for j in page["items"]] == ids[::-1]
    assert (page["total"], page["limit"], page["offset"]) == (3, 50, 0)
    second = client.get("/v1/jobs?limit=1&offset=1", headers=site.headers).json()
    assert [j["id"] for j in second["items"]] == [ids[1]]
    assert second["total"] == 3
    assert [j["id"] for j in client.get("/v1/jobs", headers=other.headers).json()["items"]] == [
        other_id
    ]
    # the admin key owns no jobs and lists none of the sites'
    assert client.get("/v1/jobs", headers=admin_headers).status_code == 403
    assert client.get("/v1/jobs").status_code == 401
    assert client.get("/v1/jobs?limit=0", headers=site.headers).status_code == 422


def test_another_sites_job_is_404_for_every_verb(
    app: FastAPI, client: TestClient, make_site: MakeSite, admin_headers: dict[str, str]
) -> None:
    owner, other = make_site(), make_site()
    app.state.job_runner = HoldingRunner()
    dataset = upload(client, owner.headers)
    job = _post_fit(client, owner, dataset["id"])

    def problem(path: str, method: str) -> tuple[int, str]:
        response = client.request(method, path, headers=other.headers)
        return response.status_code, response.json()["detail"]

    for suffix, method in (("", "GET"), ("/cancel", "POST")):
        assert problem(f"/v1/jobs/{job['id']}{suffix}", method) == problem(
            f"/v1/jobs/{'0' * 32}{suffix}", method
        )
        assert problem(f"/v1/jobs/{job['id']}{suffix}", method)[0] == 404
        assert (
            client.request(method, f"/v1/jobs/not-an-id{suffix}", headers=owner.headers).status_code
            == 404
        )
        assert client.request(method, f"/v1/jobs/{job['id']}{suffix}").status_code == 401

    untouched = get_job(client, owner.headers, job["id"])
    assert untouched["status"] == "queued"
    assert untouched["charges"][0]["state"] == "charged"
    # To the admin key a site's job is a 404, the same as an unknown id, and it cancels none.
    for suffix, method in (("", "GET"), ("/cancel", "POST")):
        as_admin = client.request(method, f"/v1/jobs/{job['id']}{suffix}", headers=admin_headers)
        ghost = client.request(method, f"/v1/jobs/{'0' * 32}{suffix}", headers=admin_headers)
        assert as_admin.status_code == ghost.status_code == 404
        assert as_admin.json()["detail"] == ghost.json()["detail"]
    assert get_job(client, owner.headers, job["id"])["status"] == "queued"


# --- the runner seam -----------------------------------------------------------------------


def test_another_runner_plugs_in_without_touching_the_domain(settings: Settings) -> None:
    """Any object with the JobRunner methods can run the app's jobs: here a synchronous
    inline runner, installed through ``app.state.job_runner_factory`` and driven by the
    lifespan (start, recover, shutdown) exactly like the default pool."""
    app = create_app(settings)
    app.state.job_runner_factory = InlineRunner.factory()
    with TestClient(app) as client:
        runner = app.state.job_runner
        assert isinstance(runner, InlineRunner)
        assert isinstance(runner, JobRunner)
        assert runner.started
        created = client.post("/v1/sites", json={"name": "inline"}, headers=ADMIN_HEADERS)
        headers = {"Authorization": f"Bearer {created.json()['key']['api_key']}"}
        dataset = upload(client, headers)

        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits", json=fit_body(), headers=headers
        )

        # The 202 shows the job as it was committed (queued, charged); the inline runner
        # had finished it before the answer was written.
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "queued"
        assert response.json()["charges"][0]["state"] == "charged"
        assert runner.ran == [(response.json()["id"], "succeeded")]
        done = client.get(response.headers["Location"], headers=headers).json()
        assert done["status"] == "succeeded"
        assert done["model_id"] is not None
    assert runner.stopped


# --- long polls --------------------------------------------------------------------------------


def test_a_long_poll_answers_when_the_job_ends(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers)
    job = _post_fit(client, site, dataset["id"])
    response = client.get(f"/v1/jobs/{job['id']}?wait=30", headers=site.headers)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "succeeded"  # one request, no polling loop
    assert response.json()["model_id"] is not None


def test_a_long_poll_answers_with_the_job_its_worker_committed_without_reading_it_back(
    app: FastAPI, client: TestClient, site: SiteHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner hands the worker's outcome to the waiting request: the answer is the job
    as committed (the same as any later GET) and the long poll reads the job only once."""
    gate = Gate()
    uow_factory = app.state.uow_factory
    runner = PoolJobRunner(
        worker=lambda: functools.partial(run_job, uow_factory, fit=gate.fit),
        recover_jobs=functools.partial(recover_jobs, uow_factory),
        on_lost=functools.partial(settle_lost_job, uow_factory),
        kind="thread",
    )
    runner.start()
    app.state.job_runner = runner
    try:
        dataset = upload(client, site.headers)
        job = _post_fit(client, site, dataset["id"])
        wait_for(lambda: gate.entered == 1, what="job at the gate")
        reads: list[str] = []
        real_get_job = domain_jobs.get_job

        def counting_get_job(*args: Any, **kwargs: Any) -> Any:
            reads.append(kwargs["job_id"])
            return real_get_job(*args, **kwargs)

        monkeypatch.setattr(domain_jobs, "get_job", counting_get_job)
        with ThreadPoolExecutor(max_workers=1) as pool:
            waiting = pool.submit(client.get, f"/v1/jobs/{job['id']}?wait=30", headers=site.headers)
            wait_for(lambda: reads == [job["id"]], what="the long poll's first read")
            gate.open()
            answer = waiting.result(timeout=TIMEOUT)
        assert answer.status_code == 200, answer.text
        assert reads == [job["id"]]  # no second read
        later = client.get(f"/v1/jobs/{job['id']}", headers=site.headers)
        assert answer.json()["status"] == "succeeded"
        assert answer.json() == later.json()
    finally:
        gate.open(100)
        runner.shutdown(wait=True)


def test_a_long_poll_on_a_job_that_does_not_end_answers_with_its_status(
    client: TestClient, site: SiteHandle, held: HeldRunner
) -> None:
    dataset = upload(client, site.headers)
    job = _post_fit(client, site, dataset["id"])
    assert held.submitted == [job["id"]]  # never run: it stays queued
    response = client.get(f"/v1/jobs/{job['id']}?wait=0.2", headers=site.headers)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "queued"


@pytest.mark.parametrize("wait", ["-1", "31", "nan", "soon"])
def test_a_bad_wait_is_422(client: TestClient, site: SiteHandle, wait: str) -> None:
    response = client.get(f"/v1/jobs/{'0' * 32}?wait={wait}", headers=site.headers)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")


# --- Prefer: wait on the fit request ----------------------------------------------------------


def _fit_preferring(client: TestClient, site: SiteHandle, prefer: str) -> httpx.Response:
    """Upload a toy dataset and request a fit on it with ``Prefer: <prefer>``."""
    dataset = upload(client, site.headers)
    return client.post(
        f"/v1/datasets/{dataset['id']}/fits",
        json=fit_body(),
        headers={**site.headers, "Prefer": prefer},
    )


def test_prefer_wait_answers_the_fit_request_when_its_job_has_ended(
    client: TestClient, site: SiteHandle
) -> None:
    """One request: 201 with the finished job, the same as a later GET, with its Location."""
    response = _fit_preferring(client, site, "wait=30")
    assert response.status_code == 201, response.text
    assert response.headers["Preference-Applied"] == "wait=30"
    job = response.json()
    assert job["status"] == "succeeded"
    assert job["model_id"] is not None
    assert response.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert client.get(response.headers["Location"], headers=site.headers).json() == job
    assert client.get(f"/v1/models/{job['model_id']}", headers=site.headers).status_code == 200


def test_prefer_wait_gives_up_after_its_seconds_with_the_job_as_it_stands(
    client: TestClient, site: SiteHandle, held: HeldRunner
) -> None:
    response = _fit_preferring(client, site, "wait=1")
    assert response.status_code == 202, response.text
    assert response.headers["Preference-Applied"] == "wait=1"
    assert response.json()["status"] == "queued"
    assert held.submitted == [response.json()["id"]]


def test_prefer_wait_reports_a_failed_job_too(
    app: FastAPI, client: TestClient, site: SiteHandle
) -> None:
    """A job that ends failed is also finished: 201 with its problem (the inline runner has no
    notices, so this is the re-reading path)."""
    app.state.job_runner = InlineRunner(app.state.uow_factory, fit=_failing_fit(ConvergenceError))
    response = _fit_preferring(client, site, "wait=5")
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "failed"
    assert response.json()["error"]["type"].endswith("/did-not-converge")
    assert SECRET not in response.text


def test_prefer_wait_on_a_retried_request_returns_the_first_job(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    headers = {**site.headers, "Idempotency-Key": "wait-retry", "Prefer": "wait=30"}
    url = f"/v1/datasets/{dataset['id']}/fits"
    first = client.post(url, json=fit_body(), headers=headers)
    again = client.post(url, json=fit_body(), headers=headers)
    assert (first.status_code, again.status_code) == (201, 201), again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json()
    assert len(budget(client, site.headers, dataset["id"])["charges"]) == 1


@pytest.mark.parametrize("prefer", ["respond-async", "wait=soon", "wait=-1", "wait", "wait=1.5"])
def test_other_or_malformed_preferences_are_ignored(
    client: TestClient, site: SiteHandle, held: HeldRunner, prefer: str
) -> None:
    response = _fit_preferring(client, site, prefer)
    assert response.status_code == 202, response.text
    assert "Preference-Applied" not in response.headers
    assert response.json()["status"] == "queued"
