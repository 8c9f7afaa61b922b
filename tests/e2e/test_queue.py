"""The distributed job queue in real processes (issue 14): two ``privfit serve`` replicas and
three ``privfit worker`` processes (``PRIVFIT_JOB_RUNNER=queue``) on a fresh PostgreSQL
database for this module (two workers for the default tier's smoke). Nothing is mocked: jobs
go through HTTP, procrastinate and the ledger; processes are started, restarted, stopped and
SIGKILLed.

The tests share the deployment (starting five Python processes is most of their cost) and run
in file order; the last one takes the workers down.
"""

from __future__ import annotations

import json
import ssl
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from sqlalchemy import Engine, create_engine, text

from tests.conftest import ADMIN_KEY, postgres_base_url
from tests.support.queue_cluster import (
    STALLED_SECONDS,
    START_TIMEOUT,
    Cluster,
    Process,
    fresh_database,
    wait_until,
)
from tests.unit.jobs._flow import fit_body, toy_csv, toy_spec

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
#: An objective-perturbation fit of the toy dataset: a few milliseconds of numerics.
QUICK_FIT = fit_body("objective_perturbation", epsilon=0.01)
#: A DP-SGD fit that runs for seconds (one update per row, many passes) and reports progress.
SLOW_FIT = fit_body("dp_sgd", epsilon=0.05, params={"epochs": 250, "batch_size": 1})
EPSILON_UNIT = 1e-9


@dataclass
class Deployment:
    cluster: Cluster
    apis: list[Process]
    workers: list[Process]
    engine: Engine


@dataclass
class Site:
    headers: dict[str, str]
    dataset_id: str


@contextmanager
def _deployment(workers: int, log_dir: Path) -> Iterator[Deployment]:
    """Two replicas and ``workers`` workers on a fresh database; every process's output is
    kept in ``log_dir``."""
    with fresh_database(postgres_base_url()) as url:
        # One site's jobs may use every worker here (share 1): these tests fill the workers
        # with one site's jobs; sharing them between sites is tests/e2e/test_queue_fairness.py.
        cluster = Cluster(url, ADMIN_KEY, extra={"PRIVFIT_MAX_SITE_WORKER_SHARE": "1"})
        engine = create_engine(url)
        try:
            started = [cluster.start_worker(f"worker-{i}") for i in range(workers)]
            with ThreadPoolExecutor(2) as pool:
                apis = list(pool.map(lambda i: cluster.start_api(f"api-{i}"), range(2)))
            deployment = Deployment(cluster, apis, started, engine)
            wait_until(
                lambda: scalar(deployment, "SELECT count(*) FROM procrastinate_workers") == workers,
                timeout=START_TIMEOUT,
                what=f"{workers} workers to register",
            )
            yield deployment
        finally:
            cluster.close(log_dir)
            engine.dispose()


@pytest.fixture(scope="module")
def deployment(
    postgres_admin_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """The heavy tier's deployment: two replicas and three workers."""
    with _deployment(3, tmp_path_factory.mktemp("queue-logs")) as deployment:
        yield deployment


@pytest.fixture(scope="module")
def smoke_deployment(
    postgres_admin_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """The default tier's deployment: two replicas and two workers, the fewest processes in
    which jobs cross replicas and workers compete for them (each process is an interpreter
    importing the service, ≈ 2.5 s of CPU)."""
    with _deployment(2, tmp_path_factory.mktemp("queue-smoke-logs")) as deployment:
        yield deployment


def scalar(deployment: Deployment, sql: str, **params: Any) -> Any:
    with deployment.engine.connect() as connection:
        return connection.execute(text(sql), params).scalar_one()


#: One TLS context for every client of these tests (they speak plain HTTP): a client built
#: without one makes its own, ≈ 20 ms of CPU, and these tests build one per request.
TLS = ssl.create_default_context()


def client(api: Process) -> httpx2.Client:
    assert api.base_url is not None
    return httpx2.Client(base_url=api.base_url, timeout=60, verify=TLS)


def new_site(api: Process, name: str, *, epsilon: float = 10.0) -> Site:
    with client(api) as http:
        response = http.post("/v1/sites", json={"name": name}, headers=ADMIN)
        assert response.status_code == 201, response.text
        headers = {"Authorization": f"Bearer {response.json()['key']['api_key']}"}
        response = http.post(
            "/v1/datasets",
            files={
                "file": ("toy.csv", toy_csv(), "text/csv"),
                "spec": (None, json.dumps(toy_spec(epsilon=epsilon))),
            },
            headers=headers,
        )
        assert response.status_code == 201, response.text
        return Site(headers, response.json()["id"])


def submit(api: Process, site: Site, body: dict[str, Any]) -> dict[str, Any]:
    with client(api) as http:
        response = http.post(
            f"/v1/datasets/{site.dataset_id}/fits", json=body, headers=site.headers
        )
    assert response.status_code == 202, response.text
    job: dict[str, Any] = response.json()
    return job


def get_job(api: Process, site: Site, job_id: str, *, wait: float | None = None) -> dict[str, Any]:
    """The job as ``api`` sees it; with ``wait``, a long poll until it ends (at most 30 s)."""
    query = "" if wait is None else f"?wait={wait:g}"
    with client(api) as http:
        response = http.get(f"/v1/jobs/{job_id}{query}", headers=site.headers)
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


def finished(api: Process, site: Site, job_id: str, *, attempts: int = 4) -> dict[str, Any]:
    """Long-poll until the job ends (a few polls: a slow job may outlast one)."""
    job = get_job(api, site, job_id)
    for _ in range(attempts):
        if job["status"] not in {"queued", "running"}:
            return job
        job = get_job(api, site, job_id, wait=30)
    raise AssertionError(f"job {job_id} still {job['status']}")


def running(api: Process, site: Site, job_id: str) -> dict[str, Any]:
    """The job once a worker has claimed it (another process: polled)."""
    found: dict[str, Any] = wait_until(
        lambda: (job := get_job(api, site, job_id))["status"] != "queued" and job,
        timeout=60,
        what=f"job {job_id} to start",
    )
    assert found["status"] == "running", found
    return found


@pytest.mark.parametrize(
    ("count", "processes"),
    [
        # The default tier's smoke runs the path (both replicas, competing workers,
        # cross-replica long polls, one claim and one charge per job) with 6 fits, 3 queued on
        # each replica, on two workers.
        pytest.param(6, "smoke_deployment", id="6"),
        # Heavy tier (issue 27 §5), on three workers: 20 fits, more jobs than workers many times
        # over (the default tier's run until the fifth pass), and 200, a load test of minutes
        # under load.
        pytest.param(20, "deployment", id="20", marks=pytest.mark.heavy),
        pytest.param(200, "deployment", id="200", marks=pytest.mark.heavy),
    ],
)
def test_many_fits_through_two_replicas_and_competing_workers(
    request: pytest.FixtureRequest, count: int, processes: str
) -> None:
    deployment: Deployment = request.getfixturevalue(processes)
    site = new_site(deployment.apis[0], f"Many fits {count}")
    with ThreadPoolExecutor(8) as pool:
        jobs = list(
            pool.map(lambda i: submit(deployment.apis[i % 2], site, QUICK_FIT)["id"], range(count))
        )
        # Each job is awaited on the replica that did NOT queue it: the long poll is woken by
        # the worker's commit through PostgreSQL, not by the process that took the request.
        ends = list(
            pool.map(lambda i: finished(deployment.apis[(i + 1) % 2], site, jobs[i]), range(count))
        )

    outcomes = Counter((end["status"], (end["error"] or {}).get("type")) for end in ends)
    assert outcomes == {("succeeded", None): count}
    assert len({end["model_id"] for end in ends}) == count
    params = {"dataset": site.dataset_id}
    # Every job was claimed once (attempt 1) and released exactly one model.
    assert (
        scalar(
            deployment,
            "SELECT count(*) FROM job WHERE dataset_id = :dataset AND attempt = 1 "
            "AND status = 'succeeded'",
            **params,
        )
        == count
    )
    assert (
        scalar(deployment, "SELECT count(*) FROM model WHERE dataset_id = :dataset", **params)
        == count
    )
    assert (
        scalar(
            deployment,
            "SELECT count(DISTINCT job_id) FROM model WHERE dataset_id = :dataset",
            **params,
        )
        == count
    )
    # The ledger: one charge of 0.01 a fit of 0.01, and the dataset's spent ε is exactly their sum.
    charged = scalar(
        deployment,
        "SELECT sum(epsilon_units) FROM ledger_charge WHERE dataset_id = :dataset "
        "AND state = 'charged'",
        **params,
    )
    assert charged == round(count * 0.01 / EPSILON_UNIT)
    assert (
        scalar(deployment, "SELECT epsilon_spent_units FROM dataset WHERE id = :dataset", **params)
        == charged
    )
    # No task was retried or failed by the queue. A job reads as ended once the worker's own
    # transaction commits; procrastinate settles the task's row afterwards, in the worker's next
    # statement (deleting it: ``delete_jobs="successful"``), so a worker starved of CPU between
    # the two leaves the row in ``doing`` for a while: wait for the queue to settle these rows.
    ours = "FROM procrastinate_jobs WHERE args->>'job_id' = ANY(:jobs)"
    wait_until(
        lambda: (
            scalar(deployment, f"SELECT count(*) {ours} AND status IN ('todo', 'doing')", jobs=jobs)
            == 0
        ),
        timeout=START_TIMEOUT,
        what="the queue to settle the fits' tasks",
    )
    assert scalar(deployment, f"SELECT count(*) {ours} AND attempts > 0", jobs=jobs) == 0
    assert scalar(deployment, f"SELECT count(*) {ours} AND status <> 'succeeded'", jobs=jobs) == 0


# The 6 fits above are the deployment's smoke in the default tier (issue 27 §5); cancelling
# across processes on the queue is tested in-process (tests/integration/test_claim_cancel_race.py),
# and CI runs this over the real deployment in `make test-heavy`.
@pytest.mark.heavy
def test_cancel_queued_and_running_jobs_from_another_replica(deployment: Deployment) -> None:
    api_a, api_b = deployment.apis
    site = new_site(api_a, "Cancels")
    # Three slow fits occupy the three workers; a fourth waits in the queue.
    slow = [submit(api_a, site, SLOW_FIT)["id"] for _ in range(3)]
    for job_id in slow:
        running(api_a, site, job_id)
    queued = submit(api_a, site, SLOW_FIT)["id"]
    assert get_job(api_b, site, queued)["status"] == "queued"

    with client(api_b) as http:
        response = http.post(f"/v1/jobs/{queued}/cancel", headers=site.headers)
        assert response.status_code == 200, response.text
        cancelled = response.json()
        assert cancelled["status"] == "cancelled"
        assert [c["state"] for c in cancelled["charges"]] == ["refunded"]
        response = http.post(f"/v1/jobs/{slow[0]}/cancel", headers=site.headers)
        assert response.status_code == 200, response.text

    # The worker stops at its next progress report: cancelled, no model, budget kept spent.
    stopped = finished(api_a, site, slow[0])
    assert stopped["status"] == "cancelled"
    assert stopped["model_id"] is None
    assert [c["state"] for c in stopped["charges"]] == ["charged"]
    assert stopped["progress"] < 1
    # The queued one never ran anywhere: still cancelled, never claimed.
    assert scalar(deployment, "SELECT attempt FROM job WHERE id = :id", id=queued) == 0
    for job_id in slow[1:]:
        assert finished(api_b, site, job_id)["status"] == "succeeded"
    assert get_job(api_a, site, queued)["status"] == "cancelled"


# Heavy tier (issue 27 §5): start-up recovery's rule (running jobs left alone, queued ones run)
# is tested in the default tier in-process (tests/integration/test_job_recovery.py,
# test_queue_recovery.py); this restarts a real replica, and CI runs it in `make test-heavy`.
@pytest.mark.heavy
def test_restarting_an_api_replica_fails_nothing_that_still_runs(deployment: Deployment) -> None:
    api_a, api_b = deployment.apis
    site = new_site(api_a, "Restarts")
    jobs = [submit(api_a, site, SLOW_FIT)["id"] for _ in range(4)]
    running(api_b, site, jobs[0])

    port = api_a.base_url.rsplit(":", 1)[1] if api_a.base_url else None
    api_a.stop()
    restarted = deployment.cluster.start_api("api-0-restarted", port=int(port or 0))
    deployment.apis[0] = restarted
    # The restarted replica's start-up recovery left the running jobs alone.
    for job_id in jobs:
        assert get_job(restarted, site, job_id)["status"] in {"queued", "running", "succeeded"}
    ends = [finished(restarted, site, job_id) for job_id in jobs]
    assert [end["status"] for end in ends] == ["succeeded"] * 4


# Heavy tier (issue 27 §5): a silent worker's running job failing once with its budget spent is
# tested in the default tier on the queue (tests/integration/test_queue_recovery.py) and with a
# killed worker process (tests/integration/test_job_recovery.py); this kills a real worker of
# the deployment (and waits out /readyz's stall window), and CI runs it in `make test-heavy`.
@pytest.mark.heavy
def test_sigkill_of_a_worker_mid_fit(deployment: Deployment) -> None:
    api_a, api_b = deployment.apis
    site = new_site(api_a, "Crashes")
    # One worker left, so the slow fit and the quick ones after it run where we expect.
    survivor = deployment.workers[0]
    for worker in deployment.workers[1:]:
        worker.stop()
    victim = submit(api_a, site, SLOW_FIT)
    running(api_a, site, victim["id"])
    after = [submit(api_b, site, QUICK_FIT)["id"] for _ in range(5)]

    survivor.kill()
    # Whichever process notices the silent worker first fails the job it was running.
    interrupted = finished(api_b, site, victim["id"])
    assert interrupted["status"] == "failed"
    assert interrupted["error"]["type"].endswith("/job-interrupted")
    assert interrupted["model_id"] is None
    assert [c["state"] for c in interrupted["charges"]] == ["charged"]
    assert scalar(deployment, "SELECT count(*) FROM model WHERE job_id = :id", id=victim["id"]) == 0
    # The jobs queued behind it are untouched: nobody is left to run them.
    assert {get_job(api_a, site, job_id)["status"] for job_id in after} == {"queued"}
    with client(api_a) as http:
        wait_until(
            lambda: http.get("/readyz").status_code == 503,
            timeout=STALLED_SECONDS * 10,
            what="/readyz to notice that no worker is left",
        )
        assert "no job worker" in http.get("/readyz").json()["detail"]

    replacement = deployment.cluster.start_worker("worker-replacement")
    deployment.workers = [replacement]
    ends = [finished(api_a, site, job_id) for job_id in after]
    assert [end["status"] for end in ends] == ["succeeded"] * 5
    with client(api_a) as http:
        assert http.get("/readyz").status_code == 200
