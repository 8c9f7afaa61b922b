"""A fit job runs the typed plan fixed at submission (``job.plan``; docs/design.md §2, issue 27).

Submission stores the calibration's plan on the job, in the same transaction as the charge;
the quote shows the calibration rendered from that plan; the worker rebuilds the stored plan,
re-derives it from the job's params only as a check, and runs it. A stored plan that differs
from the re-derived one (tampered with, or an older service's) fails the job ``plan-mismatch``
before any data is read: no model, the charge kept. A job without a plan (rows written before
plans were stored) is calibrated afresh as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.dp import FitResult, calibrate
from service.dp.core.plan import plan_from_json
from service.runtime.worker import run_job
from tests.api.conftest import HeldRunner
from tests.conftest import SiteHandle
from tests.unit.jobs._flow import TOY_FEATURES, budget, fit_body, toy_spec, upload

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

#: The toy dataset's public n and d.
N, D = 200, len(TOY_FEATURES)

#: One request per plan shape: norm-exponential and Huber, Gaussian with δ > 0, DP-SGD's
#: options, stacking's nested sub-plans.
BODIES: dict[str, dict[str, Any]] = {
    "output_perturbation": fit_body("output_perturbation", epsilon=0.5),
    "objective_huber": fit_body(
        "objective_perturbation", epsilon=0.5, loss="huber", params={"h": 0.3}
    ),
    "generalized_gaussian": fit_body("generalized_objective_perturbation", epsilon=0.5, delta=1e-6),
    "dp_sgd": fit_body("dp_sgd", epsilon=0.6, params={"epochs": 2, "batch_size": 20}),
    "stacking_features": fit_body(
        "stacking_features", epsilon=0.5, params={"feature_groups": [[0, 1], [2, 3, 4], [5]]}
    ),
}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """SQLite, and PostgreSQL (the twin is heavy, see tests/conftest.py)."""
    return any_db_url


def _submit(client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]) -> str:
    response = client.post(f"/v1/datasets/{dataset_id}/fits", json=body, headers=site.headers)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


def _quote(client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]) -> Any:
    response = client.post(
        f"/v1/datasets/{dataset_id}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert response.status_code == 200, response.text
    return response.json()


def _stored_plan(app: FastAPI, job_id: str) -> dict[str, Any] | None:
    with app.state.uow_factory() as uow:
        job = uow.jobs.get(job_id)
        assert job is not None
        return None if job.plan is None else dict(job.plan)


def _store_plan(app: FastAPI, job_id: str, plan: dict[str, Any] | None) -> None:
    with app.state.uow_factory() as uow:
        job = uow.jobs.get(job_id)
        assert job is not None
        job.plan = plan
        uow.commit()


def _job(client: TestClient, site: SiteHandle, job_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/jobs/{job_id}", headers=site.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _models_total(client: TestClient, site: SiteHandle) -> int:
    response = client.get("/v1/models", headers=site.headers)
    assert response.status_code == 200, response.text
    total: int = response.json()["total"]
    return total


def _must_not_fit(*_: Any, **__: Any) -> FitResult:
    raise AssertionError("a job whose plan does not hold was fitted")


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_job_holds_its_plan_and_the_worker_runs_it(
    app: FastAPI, client: TestClient, site: SiteHandle, held: HeldRunner, name: str
) -> None:
    body = BODIES[name]
    dataset = upload(client, site.headers, spec=toy_spec())
    quote = _quote(client, site, dataset["id"], body)
    job_id = _submit(client, site, dataset["id"], body)

    stored = _stored_plan(app, job_id)
    assert stored is not None
    assert stored["kind"] == body["mechanism"]
    assert stored["inputs"]["n"] == N
    assert stored["inputs"]["d"] == D
    # the plan the public numbers give, independently of the submission path
    expected = calibrate(
        body["mechanism"],
        n=N,
        d=D,
        epsilon=body["epsilon"],
        delta=body["delta"],
        loss=body["loss"],
        regularization=body["regularization"],
        **body["params"],
    )
    assert plan_from_json(stored) == expected.plan

    seen: list[Any] = []

    def spying_fit(*args: Any, **kwargs: Any) -> FitResult:
        from service.dp import fit as dp_fit

        seen.append(kwargs.get("plan"))
        return dp_fit(*args, **kwargs)

    assert run_job(app.state.uow_factory, job_id, fit=spying_fit).status == "succeeded"
    assert seen == [expected.plan]  # the stored plan, handed to the fit as it was stored
    finished = _job(client, site, job_id)
    model = client.get(f"/v1/models/{finished['model_id']}", headers=site.headers).json()
    # the record of the run is the calibration the quote showed
    assert model["privacy"]["calibration"] == quote["calibration"]


@pytest.mark.parametrize(
    "tamper",
    ["noise", "nested", "kind", "unreadable"],
)
def test_a_worker_given_a_tampered_plan_fails_the_job_and_releases_nothing(
    app: FastAPI, client: TestClient, site: SiteHandle, held: HeldRunner, tamper: str
) -> None:
    body = fit_body("objective_perturbation", epsilon=0.5)
    dataset = upload(client, site.headers)
    job_id = _submit(client, site, dataset["id"], body)
    plan = _stored_plan(app, job_id)
    assert plan is not None
    if tamper == "noise":  # half the noise: β doubled
        plan["beta"] = 2.0 * plan["beta"]
    elif tamper == "nested":  # the certified release's noise rate
        plan["certificate"] = {**plan["certificate"], "beta": 2.0 * plan["certificate"]["beta"]}
    elif tamper == "kind":  # another mechanism's plan for the same inputs
        plan = {**plan, "kind": "output_perturbation"}
    else:
        plan = {"kind": "no-such-plan"}
    _store_plan(app, job_id, plan)

    outcome = run_job(app.state.uow_factory, job_id, fit=_must_not_fit)

    assert outcome.status == "failed"
    job = _job(client, site, job_id)
    assert job["model_id"] is None
    assert job["error"]["type"].endswith("/plan-mismatch")
    assert "beta" not in job["error"]["detail"]  # fixed text, no internals
    assert {c["state"] for c in job["charges"]} == {"charged"}  # the failure path: kept spent
    assert _models_total(client, site) == 0
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 0.5


def test_a_job_without_a_plan_is_calibrated_afresh(
    app: FastAPI, client: TestClient, site: SiteHandle, held: HeldRunner
) -> None:
    body = fit_body("objective_perturbation", epsilon=0.5)
    dataset = upload(client, site.headers)
    quote = _quote(client, site, dataset["id"], body)
    job_id = _submit(client, site, dataset["id"], body)
    _store_plan(app, job_id, None)  # a row written before plans were stored

    seen: list[Any] = []

    def spying_fit(*args: Any, **kwargs: Any) -> FitResult:
        from service.dp import fit as dp_fit

        seen.append(kwargs.get("plan"))
        return dp_fit(*args, **kwargs)

    assert run_job(app.state.uow_factory, job_id, fit=spying_fit).status == "succeeded"
    assert seen == [None]
    model = client.get(
        f"/v1/models/{_job(client, site, job_id)['model_id']}", headers=site.headers
    ).json()
    assert model["privacy"]["calibration"] == quote["calibration"]
