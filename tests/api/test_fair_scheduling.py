"""Fair use of workers between sites (issue 26 §4), through the HTTP API.

* A job whose estimated work (row-feature passes, ``service.dp.analysis.work``) exceeds
  ``PRIVFIT_MAX_JOB_WORK`` is a 422 ``job-too-large`` before anything is charged or stored;
  the dry run quotes as before.
* Two worker threads, share ½: site A queues three DP-SGD fits that would run for many
  minutes; site B's small fit, submitted after them with ``Prefer: wait``, finishes within
  seconds (before this change it waited behind A's jobs). A's jobs are cancelled at the end.

On SQLite and PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from service.main import create_app
from service.settings import Settings
from tests.api.test_datasets import assert_problem, base_spec, csv_bytes, upload, wait_for_job
from tests.api.test_federated import consortium
from tests.conftest import MakeSite, SiteHandle, create_site, make_test_settings

#: A's long job: 10,000 passes of one-row updates over 1,000 rows (≈ 3.9·10⁹ row-feature
#: passes; many minutes of one core), cancelled at the end of the test.
LONG_FIT = {
    "mechanism": "dp_sgd",
    "epsilon": 1.0,
    "regularization": 0.01,
    "params": {"epochs": 10_000, "batch_size": 1},
}
#: B's short fit on the five-row dataset.
SHORT_FIT = {"mechanism": "output_perturbation", "epsilon": 0.1, "regularization": 0.1}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def long_rows(n: int) -> list[str]:
    colors = ("red", "green", "blue")
    return [
        f"p{i},{18 + i % 70},{colors[i % 3]},{(i * 37) % 1000},{'yes' if i % 2 else 'no'}"
        for i in range(n)
    ]


def new_dataset(client: TestClient, site: SiteHandle, rows: list[str] | None = None) -> str:
    data = csv_bytes() if rows is None else csv_bytes(rows)
    response = upload(client, site, data, base_spec(budget={"epsilon": 5.0, "delta": 0}))
    assert response.status_code == 201, response.text
    dataset_id: str = response.json()["id"]
    return dataset_id


def spent(engine: Engine) -> tuple[int, int]:
    """(ledger charges, jobs) in the database."""
    with engine.connect() as connection:
        charges = connection.execute(text("SELECT COUNT(*) FROM ledger_charge")).scalar_one()
        jobs = connection.execute(text("SELECT COUNT(*) FROM job")).scalar_one()
    return int(charges), int(jobs)


# --- the cap on one job's work --------------------------------------------------------------


@pytest.fixture
def capped(db_url: str) -> Iterator[TestClient]:
    settings = make_test_settings(db_url, max_job_work=1e6)
    with TestClient(create_app(settings)) as client:
        yield client


def test_a_job_over_the_work_cap_is_refused_before_any_charge(
    capped: TestClient, engine: Engine
) -> None:
    site = create_site(capped, "busy hospital")
    dataset = new_dataset(capped, site)
    # 5 rows, d = 6, one update per pass: 10,000·(5 + 64)·6 = 4.14·10⁶ > 10⁶
    too_long = {**LONG_FIT, "params": {"epochs": 10_000}}
    response = capped.post(f"/v1/datasets/{dataset}/fits", json=too_long, headers=site.headers)
    body = assert_problem(response, 422, "job-too-large")
    assert body["work"] == pytest.approx(10_000 * (5 + 64) * 6)
    assert body["max_work"] == 1e6
    assert "PRIVFIT_MAX_JOB_WORK" in body["detail"]
    assert spent(engine) == (0, 0)
    budget = capped.get(f"/v1/datasets/{dataset}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == 0
    # the same fit with fewer passes is accepted: 100·69·6 = 41,400
    fine = {**LONG_FIT, "params": {"epochs": 100}}
    response = capped.post(
        f"/v1/datasets/{dataset}/fits", json=fine, headers={**site.headers, "Prefer": "wait=30"}
    )
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "succeeded"


def test_tuned_fits_count_every_candidate(capped: TestClient, engine: Engine) -> None:
    site = create_site(capped, "tuning hospital")
    dataset = new_dataset(capped, site, long_rows(200))
    # 3 candidates on parts of 50 rows, 2,000 passes of 50 one-row updates, d = 6:
    # 3·(2000·(50 + 50·64)·6 + 50·6) ≈ 1.17·10⁸
    tuned = {
        **LONG_FIT,
        "regularization": {"candidates": [0.01, 0.1, 1.0]},
        "params": {"epochs": 2_000, "batch_size": 1},
        "selection": "cms",
    }
    response = capped.post(f"/v1/datasets/{dataset}/fits", json=tuned, headers=site.headers)
    body = assert_problem(response, 422, "job-too-large")
    assert body["work"] == pytest.approx(3 * (2_000 * (50 + 50 * 64) * 6 + 50 * 6))
    assert spent(engine) == (0, 0)


def test_random_repetition_counts_its_expected_runs_on_all_rows(
    capped: TestClient, engine: Engine
) -> None:
    site = create_site(capped, "repeating hospital")
    dataset = new_dataset(capped, site, long_rows(200))
    # Liu–Talwar with k = 3: μ = 18 runs on average, each a fit on all 200 rows
    # (2,000 passes of 200 one-row updates, d = 6) and a scoring pass: 18·(2000·(200 + 200·64)·6
    # + 200·6); the number of runs itself is random and never shown
    tuned = {
        **LONG_FIT,
        "regularization": {"candidates": [0.01, 0.1, 1.0]},
        "params": {"epochs": 2_000, "batch_size": 1},
        "selection": "liu_talwar",
    }
    response = capped.post(f"/v1/datasets/{dataset}/fits", json=tuned, headers=site.headers)
    body = assert_problem(response, 422, "job-too-large")
    assert body["work"] == pytest.approx(18 * (2_000 * (200 + 200 * 64) * 6 + 200 * 6))
    assert spent(engine) == (0, 0)


@pytest.fixture
def settings(db_url: str) -> Settings:
    """The ``client`` and ``make_site`` fixtures' app, with the small cap."""
    return make_test_settings(db_url, max_job_work=1e6)


def test_a_federated_fit_over_the_cap_is_refused_without_naming_other_sites_rows(
    client: TestClient, make_site: MakeSite, engine: Engine
) -> None:
    coordinator, _a, _b, _outsider, study, _datasets = consortium(client, make_site)
    before = spent(engine)
    body = {"protocol": "psgd", "epsilon": 1.0, "delta": 1e-7, "regularization": 0.05}
    # 10,000 rounds over the members' 2 × 200 rows: far over 10⁶ row-feature passes
    long = {**body, "params": {"iterations": 10_000}}
    response = client.post(
        f"/v1/studies/{study['id']}/federated-fits", json=long, headers=coordinator.headers
    )
    problem = assert_problem(response, 422, "job-too-large")
    assert "work" not in problem  # computed from the members' row counts
    assert problem["max_work"] == 1e6
    assert spent(engine) == before
    # a few rounds are within the cap and run
    short = {**body, "params": {"iterations": 20}}
    response = client.post(
        f"/v1/studies/{study['id']}/federated-fits",
        json=short,
        headers={**coordinator.headers, "Prefer": "wait=30"},
    )
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "succeeded"


# --- two workers, two sites -------------------------------------------------------------------


@pytest.fixture
def fair_settings(db_url: str) -> Settings:
    return make_test_settings(db_url, job_workers=2, max_site_worker_share=0.5)


@pytest.fixture
def fair_app(fair_settings: Settings) -> FastAPI:
    return create_app(fair_settings)


def test_a_sites_short_fit_is_not_held_up_by_another_sites_long_jobs(fair_app: FastAPI) -> None:
    with TestClient(fair_app) as client:
        site_a = create_site(client, "Hospital A")
        site_b = create_site(client, "Hospital B")
        dataset_a = new_dataset(client, site_a, long_rows(1_000))
        dataset_b = new_dataset(client, site_b)
        long_jobs = []
        for _ in range(3):
            response = client.post(
                f"/v1/datasets/{dataset_a}/fits", json=LONG_FIT, headers=site_a.headers
            )
            assert response.status_code == 202, response.text
            long_jobs.append(response.json()["id"])
        try:
            started = time.monotonic()
            response = client.post(
                f"/v1/datasets/{dataset_b}/fits",
                json=SHORT_FIT,
                headers={**site_b.headers, "Prefer": "wait=10"},
            )
            waited = time.monotonic() - started
            assert response.status_code == 201, response.text  # 202: still waiting after 10 s
            assert response.json()["status"] == "succeeded"
            assert waited < 10.0
            # A holds one of the two slots; its other two jobs wait for it
            statuses = [
                client.get(f"/v1/jobs/{job}", headers=site_a.headers).json()["status"]
                for job in long_jobs
            ]
            assert sorted(statuses) == ["queued", "queued", "running"]
        finally:
            for job in long_jobs:
                client.post(f"/v1/jobs/{job}/cancel", headers=site_a.headers)
            for job in long_jobs:
                assert wait_for_job(client, site_a, job)["status"] == "cancelled"
