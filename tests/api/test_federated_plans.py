"""A study's federated fit runs the plan fixed at submission (issue 27, item 3).

On SQLite and PostgreSQL: the submission stores the protocol's typed plan on the job (its exact
JSON form); the worker re-derives it only as a check and runs the stored one: one calibration at
submission and one check at run time, never more; a plan changed after submission is refused
by the worker (the job fails with ``plan-mismatch``, no site step runs, nothing is released,
the charges stay).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import service.dp.federated as federated
from service.dp.core.plan import plan_from_json, plan_to_json
from service.dp.federated import FederatedCalibration, noisy_average, psgd
from service.runtime.worker import run_job
from tests.api.conftest import HeldRunner
from tests.api.test_federated import N_ROWS, NOISY_AVERAGE, consortium, post, spent
from tests.conftest import MakeSite

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PSGD: dict[str, Any] = {
    "protocol": "psgd",
    "epsilon": 1.0,
    "delta": 1e-7,
    "regularization": 0.05,
    "params": {"iterations": 3},
}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def _stored_plan(app: FastAPI, job_id: str) -> dict[str, Any] | None:
    with app.state.uow_factory() as uow:
        job = uow.jobs.get(job_id)
        assert job is not None
        return None if job.plan is None else dict(job.plan)


def _store_plan(app: FastAPI, job_id: str, plan: dict[str, Any]) -> None:
    with app.state.uow_factory() as uow:
        job = uow.jobs.get(job_id)
        assert job is not None
        job.plan = plan
        uow.commit()


@pytest.mark.parametrize("body", [NOISY_AVERAGE, PSGD], ids=["noisy_average", "psgd"])
def test_the_job_stores_its_plan_and_the_run_calibrates_once_more_only_as_a_check(
    app: FastAPI,
    client: TestClient,
    make_site: MakeSite,
    held: HeldRunner,
    monkeypatch: pytest.MonkeyPatch,
    body: dict[str, Any],
) -> None:
    calls: list[FederatedCalibration] = []
    calibrate = federated.calibrate_problem

    def counted(problem: Any) -> FederatedCalibration:
        calls.append(calibrate(problem))
        return calls[-1]

    monkeypatch.setattr(federated, "calibrate_problem", counted)
    coordinator, *_, study, _ = consortium(client, make_site)
    status, job = post(client, coordinator, study["id"], **body)
    assert status == 202, job
    assert len(calls) == 1  # the submission's calibration
    stored = _stored_plan(app, job["id"])
    assert stored is not None
    kinds = {"noisy_average": noisy_average.NoisyAveragePlan.kind, "psgd": psgd.PSGDPlan.kind}
    assert stored["kind"] == kinds[body["protocol"]]
    assert [s["n"] for s in stored["sites"]] == [N_ROWS, N_ROWS]
    assert plan_from_json(stored) == calls[0].plan  # exact: the JSON round trip loses nothing

    assert run_job(app.state.uow_factory, job["id"]).status == "succeeded"
    assert len(calls) == 2  # the run's re-derivation, a check that agreed
    assert calls[1].plan == calls[0].plan


def _tampered(stored: dict[str, Any]) -> dict[str, Any]:
    """The stored plan with site 0's noise halved (PSGD: its σ_k)."""
    plan = plan_from_json(stored)
    assert isinstance(plan, psgd.PSGDPlan)
    sites = list(plan.sites)
    sites[0] = dataclasses.replace(sites[0], sigma=0.5 * sites[0].sigma)
    return plan_to_json(dataclasses.replace(plan, sites=tuple(sites)))


def test_a_plan_changed_after_submission_fails_the_job_before_any_site_step(
    app: FastAPI,
    client: TestClient,
    make_site: MakeSite,
    held: HeldRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coordinator, a, _, _, study, datasets = consortium(client, make_site)
    status, job = post(client, coordinator, study["id"], **PSGD)
    assert status == 202, job
    stored = _stored_plan(app, job["id"])
    assert stored is not None
    _store_plan(app, job["id"], _tampered(stored))

    def no_step(*_: Any, **__: Any) -> Any:
        raise AssertionError("a site step ran with a plan that was not re-derived")

    monkeypatch.setattr(psgd.PSGDSite, "noisy_gradient", no_step)
    assert run_job(app.state.uow_factory, job["id"]).status == "failed"
    failed = client.get(f"/v1/jobs/{job['id']}", headers=coordinator.headers).json()
    assert failed["model_id"] is None
    assert failed["error"]["type"].endswith("plan-mismatch")
    assert "sites" in failed["error"]["detail"]  # names the field, shows no number
    assert {c["state"] for c in failed["charges"]} == {"charged"}  # the budget stays spent
    assert spent(client, a, datasets[0])[0] == pytest.approx(1.0)
    assert client.get(f"/v1/studies/{study['id']}", headers=a.headers).json()["results"] == []
