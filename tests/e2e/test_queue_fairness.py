"""Fair use of queue workers between sites (issue 26 §4), in real processes: one ``privfit
serve`` and ``privfit worker --concurrency 2`` (``PRIVFIT_JOB_RUNNER=queue``) on a fresh
PostgreSQL database. Site A queues three DP-SGD fits that would run for many minutes; site B's
small fit, submitted after them with ``Prefer: wait``, finishes within seconds on the worker
A may not take (share ½ of two). A's jobs are cancelled at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine

from tests.conftest import ADMIN_KEY, postgres_base_url
from tests.e2e.test_queue import (
    Deployment,
    client,
    finished,
    get_job,
    new_site,
    running,
    scalar,
    submit,
)
from tests.support.queue_cluster import START_TIMEOUT, Cluster, fresh_database, wait_until
from tests.unit.jobs._flow import fit_body

# Heavy tier (issue 27 §5): the fair-share rule is tested in the default tier on the queue
# itself (tests/integration/test_queue_fairness.py) and through the API's runner
# (tests/api/test_fair_scheduling.py); this repeats it over real replicas and workers (minutes
# of real processes under load), and CI runs it in `make test-heavy`.
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.heavy]

#: 10,000 passes of one-row updates over the toy dataset's 200 rows: many minutes.
LONG_FIT = fit_body("dp_sgd", epsilon=1.0, params={"epochs": 10_000, "batch_size": 1})
SHORT_FIT = fit_body("objective_perturbation", epsilon=0.1)


@pytest.fixture(scope="module")
def deployment(
    postgres_admin_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    with fresh_database(postgres_base_url()) as url:
        cluster = Cluster(url, ADMIN_KEY, extra={"PRIVFIT_MAX_SITE_WORKER_SHARE": "0.5"})
        engine = create_engine(url)
        try:
            workers = [cluster.start_worker("workers", concurrency=2)]
            api = cluster.start_api("api")
            deployment = Deployment(cluster, [api], workers, engine)
            wait_until(
                lambda: scalar(deployment, "SELECT count(*) FROM procrastinate_workers") == 2,
                timeout=START_TIMEOUT,
                what="two workers to register",
            )
            yield deployment
        finally:
            cluster.close(tmp_path_factory.mktemp("queue-fairness-logs"))
            engine.dispose()


def test_a_sites_short_fit_is_not_held_up_by_another_sites_long_jobs(
    deployment: Deployment,
) -> None:
    api = deployment.apis[0]
    site_a = new_site(api, "Hospital A")
    site_b = new_site(api, "Hospital B")
    long_jobs = [submit(api, site_a, LONG_FIT)["id"] for _ in range(3)]
    try:
        running(api, site_a, long_jobs[0])
        started = time.monotonic()
        with client(api) as http:
            response = http.post(
                f"/v1/datasets/{site_b.dataset_id}/fits",
                json=SHORT_FIT,
                headers={**site_b.headers, "Prefer": "wait=20"},
            )
        waited = time.monotonic() - started
        assert response.status_code == 201, response.text  # 202: still waiting after 20 s
        assert response.json()["status"] == "succeeded"
        assert waited < 20.0
        statuses = sorted(get_job(api, site_a, job)["status"] for job in long_jobs)
        assert statuses == ["queued", "queued", "running"]
    finally:
        with client(api) as http:
            for job in long_jobs:
                http.post(f"/v1/jobs/{job}/cancel", headers=site_a.headers)
        for job in long_jobs:
            assert finished(api, site_a, job)["status"] == "cancelled"
