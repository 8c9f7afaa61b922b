"""Crash recovery of fit jobs (issue 4 items 3 and 6, docs/design.md §2 ledger semantics).

* A restart fails every job a crash left ``running`` (its budget stays spent: noise may have
  been drawn) and runs the ones still ``queued``.
* A worker process killed mid-fit on the default process pool leaves its job ``failed``
  (``job-interrupted``), the charge ``charged`` and no model; the pool comes back.
* The API answers while a fit runs in a worker process.

On SQLite (a file every worker process opens) and on PostgreSQL.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from service.db.base import utcnow
from service.db.uow import UnitOfWorkFactory
from service.main import create_app
from service.runtime.runner import JobRunner, PoolJobRunner
from service.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.unit.jobs._flow import (
    HoldingRunner,
    budget,
    fit_body,
    get_job,
    upload,
    wait_for,
    wait_job,
)

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
#: A dp_sgd fit that runs for about a minute unless stopped (2·10⁶ noisy updates).
SLOW_FIT = fit_body("dp_sgd", epsilon=1.0, params={"epochs": 10_000, "batch_size": 1})


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def _settings(db_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url,
        "admin_key": SecretStr(ADMIN_KEY),
        "environment": "test",
        "job_runner": "thread",
        **overrides,
    }
    return Settings(**values)


@contextmanager
def serving(
    settings: Settings,
    runner_factory: Callable[[Settings, UnitOfWorkFactory], JobRunner] | None = None,
) -> Iterator[tuple[TestClient, Any]]:
    """The app running with its lifespan (start-up recovery included); yields the client and
    the app's state."""
    app = create_app(settings)
    if runner_factory is not None:
        app.state.job_runner_factory = runner_factory
    with TestClient(app) as client:
        yield client, app.state


def _site_headers(client: TestClient, name: str) -> dict[str, str]:
    response = client.post("/v1/sites", json={"name": name}, headers=ADMIN)
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['key']['api_key']}"}


def _post_fit(
    client: TestClient, headers: dict[str, str], dataset_id: str, body: dict[str, Any]
) -> str:
    response = client.post(f"/v1/datasets/{dataset_id}/fits", json=body, headers=headers)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


def _models_total(client: TestClient, headers: dict[str, str]) -> int:
    response = client.get("/v1/models", headers=headers)
    assert response.status_code == 200, response.text
    total: int = response.json()["total"]
    return total


def _assert_interrupted(job: dict[str, Any], dataset_id: str, epsilon: float) -> None:
    assert job["status"] == "failed"
    assert job["error"]["type"].endswith("/job-interrupted")
    assert job["model_id"] is None
    assert job["charges"] == [
        {"dataset_id": dataset_id, "epsilon": epsilon, "delta": 0.0, "state": "charged"}
    ]


# --- restart --------------------------------------------------------------------------------


def _crash_with_one_running_and_one_queued(
    settings: Settings,
) -> tuple[dict[str, str], str, str, str]:
    """Serve with a runner that never runs jobs, queue two fits, let a 'worker' claim the first
    and report progress, then stop the app without finishing either: the database as a crash
    mid-fit leaves it. Returns the site headers, the dataset and the two job ids."""
    with serving(settings, HoldingRunner.factory()) as (client, state):
        headers = _site_headers(client, "crashed")
        dataset = upload(client, headers)
        running = _post_fit(client, headers, dataset["id"], fit_body(epsilon=0.5))
        queued = _post_fit(client, headers, dataset["id"], fit_body(epsilon=0.25))
        with state.uow_factory() as uow:
            assert uow.jobs.claim(running, started_at=utcnow())
            assert not uow.jobs.report_progress(running, 0.4)
            uow.commit()
        assert get_job(client, headers, running)["status"] == "running"
        assert get_job(client, headers, queued)["status"] == "queued"
    return headers, dataset["id"], running, queued


def test_a_restart_fails_running_jobs_and_runs_queued_ones(db_url: str) -> None:
    settings = _settings(db_url)
    headers, dataset_id, running, queued = _crash_with_one_running_and_one_queued(settings)

    with serving(settings) as (client, _):
        # Recovery ran in the lifespan, before the first request was served.
        interrupted = get_job(client, headers, running)
        _assert_interrupted(interrupted, dataset_id, 0.5)
        assert interrupted["progress"] == 0.4
        assert interrupted["finished_at"] is not None

        resumed = wait_job(client, headers, queued)
        assert resumed["status"] == "succeeded", resumed
        assert resumed["attempt"] == 1
        model = client.get(f"/v1/models/{resumed['model_id']}", headers=headers)
        assert model.status_code == 200, model.text

        state = budget(client, headers, dataset_id)
        assert state["epsilon_spent"] == 0.75  # nothing refunded
        assert {c["job_id"]: c["state"] for c in state["charges"]} == {
            running: "charged",
            queued: "charged",
        }
        assert _models_total(client, headers) == 1
    # A failed job is final: another restart changes nothing.
    with serving(settings) as (client, _):
        assert get_job(client, headers, running) == interrupted


def test_recovery_can_be_turned_off(db_url: str) -> None:
    """With job_recovery off (several API processes on one database) a start touches nothing."""
    settings = _settings(db_url)
    headers, _dataset_id, running, queued = _crash_with_one_running_and_one_queued(settings)

    with serving(_settings(db_url, job_recovery=False)) as (client, _):
        assert get_job(client, headers, running)["status"] == "running"
        assert get_job(client, headers, queued)["status"] == "queued"


# --- a worker process killed mid-fit --------------------------------------------------------


#: Seconds between two reads of a job whose progress is awaited (the fit writes its progress
#: every ``job_progress_interval``, 0.05 s here; no event announces a progress write).
PROGRESS_POLL_SECONDS = 0.05


def _ended(client: TestClient, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    """The job once it ended: long polls (``?wait=``, answered when the runner reports the
    end), not a read every few milliseconds while a worker process starts."""
    for _ in range(4):
        response = client.get(f"/v1/jobs/{job_id}?wait=30", headers=headers)
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        if job["status"] not in {"queued", "running"}:
            return job
    raise AssertionError(f"job {job_id} still {job['status']}")


@pytest.mark.slow
def test_a_worker_killed_mid_fit_leaves_the_budget_spent_and_no_model(db_url: str) -> None:
    # progress every 0.05 s: the slow fit is seen progressing (and killed) after a tenth of a
    # second of its numerics rather than after half a second at the default interval
    settings = _settings(db_url, job_runner="process", job_workers=1, job_progress_interval=0.05)
    with serving(settings) as (client, state):
        runner = state.job_runner
        assert isinstance(runner, PoolJobRunner)
        assert runner.kind == "process"
        headers = _site_headers(client, "killed")
        dataset = upload(client, headers)
        job_id = _post_fit(client, headers, dataset["id"], SLOW_FIT)

        # The worker has claimed the job and is inside the fit, reporting progress.
        seen: list[float] = []

        def progressing() -> bool:
            job = get_job(client, headers, job_id)
            assert job["status"] in {"queued", "running"}, job
            seen.append(float(job["progress"]))
            return len({p for p in seen if p > 0}) >= 2

        wait_for(
            progressing,
            timeout=60,
            what="the fit reports progress twice",
            interval=PROGRESS_POLL_SECONDS,
        )
        # The API answers while the fit runs in the worker process.
        health = client.get("/healthz")
        assert health.status_code == 200, health.text
        assert get_job(client, headers, job_id)["status"] == "running"

        pids = runner.worker_pids()
        assert len(pids) == 1
        assert os.getpid() not in pids
        os.kill(pids[0], signal.SIGKILL)

        failed = _ended(client, headers, job_id)
        _assert_interrupted(failed, dataset["id"], 1.0)
        spent = budget(client, headers, dataset["id"])
        assert spent["epsilon_spent"] == 1.0
        assert [c["state"] for c in spent["charges"]] == ["charged"]
        assert _models_total(client, headers) == 0
        with state.uow_factory() as uow:
            assert uow.models.count(owner_site_id=None) == 0

        # A fresh pool replaced the broken one: the next fit runs normally.
        next_job = _post_fit(client, headers, dataset["id"], fit_body(epsilon=0.5))
        assert _ended(client, headers, next_job)["status"] == "succeeded"
        assert runner.worker_pids() != pids
