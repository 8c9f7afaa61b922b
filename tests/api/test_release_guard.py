"""The release guard: a job releases nothing whose run would exceed what the ledger charged.

Before a fit, a charged aggregation or a federated fit stores its result, the worker compares
the (ε, δ) the mechanism reports for the run on every dataset with the ledger's charge for
that job. A run that spends more (forced here by a mechanism that reports a larger cost than
its calibration) fails ``release-exceeds-charge``: no model, the budget kept spent, the job's
charges unchanged. A run that spends exactly its charge passes, and the record's "charged"
line states the ledger's figures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.domain.jobs.lifecycle import (
    Charged,
    ReleaseExceedsChargeError,
    check_release,
)
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT
from service.dp import FitResult
from service.dp import fit as dp_fit
from service.dp.core.accounting import PrivacyCost
from service.dp.federated import federated_fit
from service.dp.multisite import methods as multisite
from service.runtime.worker import run_job
from tests.api._studies import contribute, create_study, fit_model, upload_dataset
from tests.api.conftest import HeldRunner
from tests.conftest import MakeSite, SiteHandle
from tests.unit.jobs._flow import budget, fit_body, upload

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _models_total(client: TestClient, site: SiteHandle) -> int:
    response = client.get("/v1/models", headers=site.headers)
    assert response.status_code == 200, response.text
    total: int = response.json()["total"]
    return total


def _job(client: TestClient, site: SiteHandle, job_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/jobs/{job_id}", headers=site.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _assert_refused(job: dict[str, Any]) -> None:
    assert job["status"] == "failed"
    assert job["model_id"] is None
    assert job["error"]["type"].endswith("/release-exceeds-charge")
    assert {c["state"] for c in job["charges"]} == {"charged"}  # the budget stays spent


# --- the comparison itself ------------------------------------------------------------------

CHARGE = Charged("d1", epsilon_units=500_000_000, delta_units=1_000)  # ε = 0.5, δ = 1e-12


def test_a_run_that_spends_exactly_its_charge_or_less_passes() -> None:
    check_release({"d1": CHARGE}, {"d1": (0.5, 1e-12)})
    check_release({"d1": CHARGE}, {"d1": (0.25, 0.0)})
    check_release({"d1": CHARGE}, {})  # a release that reads no data (post-processing)


@pytest.mark.parametrize(
    "spent",
    [
        {"d1": (0.5 + EPSILON_UNIT, 1e-12)},  # one ε-unit more
        {"d1": (0.5, 1e-12 + DELTA_UNIT)},  # one δ-unit more
        {"d1": (float("inf"), 0.0)},
        {"d1": (float("nan"), 0.0)},
        {"d1": (-1.0, 0.0)},
        {"d1": (0.5, 0.0), "d2": (0.0, 0.0)},  # a dataset the job did not charge
    ],
    ids=["epsilon", "delta", "inf", "nan", "negative", "uncharged-dataset"],
)
def test_a_run_that_exceeds_its_charge_is_refused(spent: Mapping[str, tuple[float, float]]) -> None:
    with pytest.raises(ReleaseExceedsChargeError):
        check_release({"d1": CHARGE}, spent)


# --- fits -------------------------------------------------------------------------------------


def _overspending_fit(factor: float) -> Callable[..., FitResult]:
    """``service.dp.fit`` whose report of the run's cost is ``factor`` times the real one."""

    def fit(*args: Any, **kwargs: Any) -> FitResult:
        result = dp_fit(*args, **kwargs)
        return dataclasses.replace(result, epsilon=result.epsilon * factor)

    return fit


def test_a_fit_whose_run_exceeds_its_charge_releases_nothing(
    app: FastAPI, client: TestClient, site: SiteHandle, held: HeldRunner
) -> None:
    dataset = upload(client, site.headers)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=fit_body(epsilon=0.5), headers=site.headers
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]

    outcome = run_job(app.state.uow_factory, job_id, fit=_overspending_fit(1.001))

    assert outcome.status == "failed"
    _assert_refused(_job(client, site, job_id))
    assert _models_total(client, site) == 0
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 0.5


def test_a_fit_that_spends_its_charge_states_the_ledger_charge_in_its_record(
    app: FastAPI, client: TestClient, site: SiteHandle, held: HeldRunner
) -> None:
    dataset = upload(client, site.headers)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=fit_body(epsilon=0.5), headers=site.headers
    )
    job_id = response.json()["id"]
    assert run_job(app.state.uow_factory, job_id).status == "succeeded"
    model_id = _job(client, site, job_id)["model_id"]
    record = client.get(f"/v1/models/{model_id}", headers=site.headers).json()["privacy"]
    assert record["charged"] == f"ε = 0.5, δ = 0 to dataset {dataset['id']}"


# --- charged aggregations ---------------------------------------------------------------------


def test_a_transfer_whose_run_exceeds_its_charge_releases_nothing(
    app: FastAPI,
    client: TestClient,
    make_site: MakeSite,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coordinator, member = make_site(name="coord"), make_site(name="member")
    study = create_study(client, coordinator, [member])
    source_data = upload_dataset(client, member, seed=11)
    source = fit_model(client, member, source_data["id"], epsilon=1.0)
    contribute(client, member, study["id"], {"model_id": source["id"]})
    monkeypatch.setattr(app.state, "job_runner", HeldRunner())  # the transfer stays queued
    target = upload_dataset(client, coordinator, seed=12, epsilon=2.0)
    response = client.post(
        f"/v1/studies/{study['id']}/aggregations",
        json={
            "method": "transfer",
            "target_dataset_id": target["id"],
            "epsilon": 0.5,
            "transfer_strength": 0.5,
            "regularization": 0.05,
        },
        headers=coordinator.headers,
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]

    honest = multisite.CHARGED_AGGREGATIONS["transfer"]

    def overspending(params: Mapping[str, Any]) -> Any:
        spec = honest(params)

        def compute(*args: Any) -> FitResult:
            return dataclasses.replace(spec.compute(*args), delta=1e-9)

        return dataclasses.replace(spec, compute=compute)

    monkeypatch.setitem(multisite.CHARGED_AGGREGATIONS, "transfer", overspending)
    assert run_job(app.state.uow_factory, job_id).status == "failed"

    _assert_refused(_job(client, coordinator, job_id))
    assert _models_total(client, member) == 1  # only the source model
    spent = budget(client, coordinator.headers, target["id"])
    assert (spent["epsilon_spent"], spent["delta_spent"]) == (0.5, 0.0)
    assert client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()["results"] == []


# --- federated fits ---------------------------------------------------------------------------


def test_a_federated_fit_whose_run_exceeds_a_sites_charge_releases_nothing(
    app: FastAPI,
    client: TestClient,
    make_site: MakeSite,
    held: HeldRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coordinator, a, b = (make_site(name=n) for n in ("coord", "a", "b"))
    study = create_study(client, coordinator, [a, b])
    datasets = []
    for seed, site in enumerate((a, b), start=31):
        data = upload_dataset(client, site, seed=seed, epsilon=4.0)
        contribute(
            client,
            site,
            study["id"],
            {"dataset_id": data["id"], "epsilon_cap": 2.0, "delta_cap": 1e-6},
        )
        datasets.append((site, data["id"]))
    response = client.post(
        f"/v1/studies/{study['id']}/federated-fits",
        json={"protocol": "noisy_average", "epsilon": 1.0, "regularization": 0.05},
        headers=coordinator.headers,
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]

    honest = federated_fit

    def overspending(*args: Any, **kwargs: Any) -> Any:
        result = honest(*args, **kwargs)
        costs = list(result.calibration.site_costs)
        costs[-1] = PrivacyCost(costs[-1].epsilon * 2.0, costs[-1].delta)  # the last site only
        calibration = dataclasses.replace(result.calibration, site_costs=tuple(costs))
        return dataclasses.replace(result, calibration=calibration)

    monkeypatch.setattr("service.domain.studies.federated.run.federated_fit", overspending)
    assert run_job(app.state.uow_factory, job_id).status == "failed"

    _assert_refused(_job(client, coordinator, job_id))
    assert _models_total(client, coordinator) == 0
    for site, dataset_id in datasets:
        assert budget(client, site.headers, dataset_id)["epsilon_spent"] == pytest.approx(1.0)
    assert client.get(f"/v1/studies/{study['id']}", headers=a.headers).json()["results"] == []
