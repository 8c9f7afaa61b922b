"""A coordinator's federated fit over site nodes, over HTTP, by job runner (issue 15).

The app runs the default ``process`` runner here. A fit naming remote contributions is
accepted and runs on a thread of the API process, the one holding the nodes' task exchange (no
node answers in these tests, so it fails ``node-silent`` after the short deadline, not
``nodes-unreachable`` as it would in a worker process), while a fit over hosted datasets runs
in the process pool. With a runner whose jobs run in other processes (the distributed queue),
such a fit, and its dry run, is a 422 problem that says why and what to do, charging nothing
and queueing nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.nodes.exchange import EXCHANGE
from service.domain.nodes.remote_fit import task_deadline
from service.runtime.runner import PoolJobRunner
from service.settings import Settings
from tests.api._studies import contribute, create_study, finished, upload_dataset
from tests.conftest import ADMIN_KEY, MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ADMM: dict[str, Any] = {
    "protocol": "admm",
    "epsilon": 1.0,
    "regularization": 0.05,
    "params": {"perturbation": "dual", "iterations": 3},
}


@pytest.fixture
def settings(db_url: str) -> Settings:
    """The default job runner (a process pool) and a short node task deadline."""
    return Settings(
        database_url=db_url,
        admin_key=SecretStr(ADMIN_KEY),
        environment="test",
        job_runner="process",
        node_task_deadline=0.5,
        rate_limit_failed_auth=None,
        rate_limit_expensive=None,
    )


@pytest.fixture(autouse=True)
def _process_state() -> Iterator[None]:
    """The app's lifespan sets this process's exchange and deadline: put them back."""
    before = (EXCHANGE.attached, task_deadline())
    yield
    EXCHANGE.attached = before[0]
    task_deadline(before[1])


class QueueLikeRunner:
    """Stands for the distributed queue: jobs enqueued with their charge, run elsewhere."""

    def __init__(self) -> None:
        self.jobs: list[str] = []

    def enqueue_in_transaction(self, uow: UnitOfWork, job_id: str) -> None:
        del uow
        self.jobs.append(job_id)

    def submit(self, job_id: str) -> None:
        del job_id


Study = tuple[SiteHandle, SiteHandle, dict[str, Any], list[str], list[str]]


def study_with_nodes(
    client: TestClient, make_site: MakeSite, uow_factory: UnitOfWorkFactory
) -> Study:
    """Coordinator, a member; the study, two granted hosted datasets of the member and two
    remote contributions (registered as the member's node does it)."""
    coordinator, member = make_site(name="coordinator"), make_site(name="member")
    study = create_study(client, coordinator, [member])
    hosted = []
    for seed in (3, 4):
        dataset = upload_dataset(client, member, seed=seed)
        contribute(
            client,
            member,
            study["id"],
            {"dataset_id": dataset["id"], "epsilon_cap": 2.0, "delta_cap": 1e-6},
        )
        hosted.append(dataset["id"])
    with uow_factory() as uow:
        row = uow.studies.get(study["id"])
        assert row is not None
        offer = {
            "preprocessing": dict(row.preprocessing),
            "label": dict(row.spec["label"]),
            "n_features": len(row.feature_names),
            "epsilon_cap": 3.0,
            "delta_cap": 1e-6,
        }
    remote = []
    for node_dataset in ("0" * 31 + "1", "0" * 31 + "2"):
        response = client.post(
            f"/v1/studies/{study['id']}/remote-contributions",
            json={**offer, "node_dataset_id": node_dataset},
            headers=member.headers,
        )
        assert response.status_code == 201, response.text
        remote.append(response.json()["id"])
    return coordinator, member, study, hosted, remote


def epsilon_spent(client: TestClient, site: SiteHandle, dataset_id: str) -> float:
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    return float(budget["epsilon_spent"])


def test_with_the_process_runner_a_fit_over_nodes_runs_in_the_api_process(
    app: FastAPI, client: TestClient, make_site: MakeSite, uow_factory: UnitOfWorkFactory
) -> None:
    coordinator, member, study, hosted, remote = study_with_nodes(client, make_site, uow_factory)
    runner = app.state.job_runner
    assert isinstance(runner, PoolJobRunner)
    assert runner.kind == "process"
    url = f"/v1/studies/{study['id']}/federated-fits"
    quote = client.post(
        f"{url}?dry_run=true",
        json={**ADMM, "datasets": [hosted[0], *remote]},
        headers=coordinator.headers,
    )
    assert quote.status_code == 200, quote.text
    response = client.post(
        url, json={**ADMM, "datasets": [hosted[0], *remote]}, headers=coordinator.headers
    )
    assert response.status_code == 202, response.text
    job = finished(client, coordinator, response.json())
    # it reached the exchange (no node polls it here), so it ran in this process
    assert job["status"] == "failed", job
    assert job["error"]["type"].endswith("/node-silent"), job["error"]
    assert epsilon_spent(client, member, hosted[0]) == pytest.approx(1.0)
    # a fit over hosted datasets still runs in the process pool
    response = client.post(url, json={**ADMM, "datasets": hosted}, headers=coordinator.headers)
    assert response.status_code == 202, response.text
    assert finished(client, coordinator, response.json())["status"] == "succeeded"
    assert runner.worker_pids()


@pytest.mark.parametrize("query", ["", "?dry_run=true"])
def test_with_a_queue_runner_a_fit_over_nodes_is_refused_at_submission(
    app: FastAPI,
    client: TestClient,
    make_site: MakeSite,
    uow_factory: UnitOfWorkFactory,
    query: str,
) -> None:
    coordinator, member, study, hosted, remote = study_with_nodes(client, make_site, uow_factory)
    queue = QueueLikeRunner()
    original, app.state.job_runner = app.state.job_runner, queue
    try:
        response = client.post(
            f"/v1/studies/{study['id']}/federated-fits{query}",
            json={**ADMM, "datasets": [hosted[0], *remote]},
            headers={**coordinator.headers, "Idempotency-Key": "fit-over-nodes-on-a-queue"},
        )
    finally:
        app.state.job_runner = original
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert "PRIVFIT_JOB_RUNNER=queue" in problem["detail"]
    assert "PRIVFIT_JOB_RUNNER=process (the default) or thread" in problem["detail"]
    assert "Nothing was charged" in problem["detail"]
    assert problem["errors"][0]["loc"] == ["body", "datasets"]
    # nothing charged, nothing queued, no job
    assert queue.jobs == []
    assert epsilon_spent(client, member, hosted[0]) == 0.0
    jobs = client.get("/v1/jobs", headers=coordinator.headers).json()
    assert jobs["total"] == 0
