"""Federated fits over HTTP (issue 6): ``POST /v1/studies/{id}/federated-fits``.

On SQLite and PostgreSQL: the coordinator runs a protocol over datasets its members granted;
every dataset is charged its own cost within its budget and the grant, all or none; the job
runs on the runner and releases one model every member reads; nothing else (no local model, no
intermediate iterate) becomes reachable; bad requests are 4xx that charge nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.db.models import Model
from service.domain.jobs.lifecycle import ClaimedJob, JobCancelledError, JobContext
from service.domain.randomness import Randomness
from service.domain.studies.federated.run import run_federated_job
from service.dp import fit as dp_fit
from service.dp.federated import federated_calibrate
from service.runtime.worker import run_job
from tests.api._studies import (
    FEATURE_NAMES,
    FEATURES,
    LABEL,
    contribute,
    create_study,
    finished,
    fit_model,
    rows_csv,
    upload_dataset,
)
from tests.api.conftest import HeldRunner
from tests.conftest import MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

N_ROWS = 200  # rows of tests.api._studies.upload_dataset


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


Consortium = tuple[SiteHandle, SiteHandle, SiteHandle, SiteHandle, dict[str, Any], list[str]]


def consortium(
    client: TestClient,
    make_site: MakeSite,
    *,
    grant: float = 2.0,
    budgets: tuple[float, float] = (4.0, 4.0),
    allow_non_private: bool = False,
) -> Consortium:
    """Coordinator, two members with a granted dataset each, an outsider; the study and the
    granted dataset ids (member order)."""
    coordinator, a, b, outsider = (make_site(name=n) for n in ("coord", "a", "b", "outsider"))
    study = create_study(client, coordinator, [a, b])
    datasets = []
    for seed, (site, eps) in enumerate(zip((a, b), budgets, strict=True), start=31):
        data = upload_dataset(
            client, site, seed=seed, epsilon=eps, allow_non_private=allow_non_private
        )
        contribute(
            client,
            site,
            study["id"],
            {"dataset_id": data["id"], "epsilon_cap": grant, "delta_cap": 1e-6},
        )
        datasets.append(data["id"])
    return coordinator, a, b, outsider, study, datasets


def post(
    client: TestClient, site: SiteHandle, study_id: str, query: str = "", **body: Any
) -> tuple[int, dict[str, Any]]:
    response = client.post(
        f"/v1/studies/{study_id}/federated-fits{query}", json=body, headers=site.headers
    )
    out: dict[str, Any] = response.json()
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/problem+json")
    return response.status_code, out


def spent(client: TestClient, site: SiteHandle, dataset_id: str) -> tuple[float, float]:
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    return float(budget["epsilon_spent"]), float(budget["delta_spent"])


def grants(client: TestClient, site: SiteHandle, study_id: str) -> dict[str, dict[str, Any]]:
    study = client.get(f"/v1/studies/{study_id}", headers=site.headers).json()
    return {c["dataset_id"]: c for c in study["contributions"] if c["kind"] == "dataset"}


NOISY_AVERAGE: dict[str, Any] = {
    "protocol": "noisy_average",
    "epsilon": 1.0,
    "regularization": 0.05,
}


def test_noisy_average_charges_each_dataset_and_every_member_reads_the_model(
    client: TestClient, make_site: MakeSite
) -> None:
    coordinator, a, b, outsider, study, datasets = consortium(client, make_site)
    expected = federated_calibrate(
        "noisy_average",
        site_sizes=[N_ROWS, N_ROWS],
        d=len(FEATURE_NAMES),
        epsilon=1.0,
        regularization=0.05,
    )

    status, quote = post(client, coordinator, study["id"], "?dry_run=true", **NOISY_AVERAGE)
    assert status == 200, quote
    assert quote["dry_run"] is True
    assert quote["private"] is True
    assert [(c["dataset_id"], c["epsilon"], c["delta"]) for c in quote["costs"]] == [
        (d, c.epsilon, c.delta) for d, c in zip(datasets, expected.site_costs, strict=True)
    ]
    # hand-derived: both sites hold N_ROWS rows, so site i is charged ε·n_min/nᵢ = ε = 1.0,
    # with δ = 0 (pure ε-DP: one draw b ∝ exp(−β‖b‖))
    assert [(c["dataset_id"], c["epsilon"], c["delta"]) for c in quote["costs"]] == [
        (d, 1.0, 0.0) for d in datasets
    ]
    # β = ε/S, S = (2L/(n_min·λ) + 2τ/λ)/K for K = 2 sites of n = N_ROWS rows, L = 1 (logistic),
    # λ = 0.05 and τ the quoted certificate tolerance (S also carries a float-rounding margin 2ρ
    # below 10⁻¹³ of it). The quote withholds β (it reveals n_min): checked on the library.
    tau = float(quote["calibration"]["certificate_tolerance"])
    sensitivity = (2.0 / (N_ROWS * 0.05) + 2.0 * tau / 0.05) / 2
    assert expected.details["beta"] == pytest.approx(1.0 / sensitivity, rel=1e-9)
    assert quote["calibration"]["regularization"] == 0.05
    assert "beta" not in quote["calibration"]  # β = K·min nᵢ·λ·ε/2 would reveal a row count
    assert all(c["sufficient"] for c in quote["costs"])
    assert spent(client, a, datasets[0]) == (0.0, 0.0)  # a dry run spends nothing

    status, job = post(client, coordinator, study["id"], **NOISY_AVERAGE)
    assert status == 202, job
    assert job["kind"] == "federated"
    assert job["dataset_id"] is None
    assert sorted((c["dataset_id"], c["epsilon"], c["state"]) for c in job["charges"]) == sorted(
        (d, 1.0, "charged") for d in datasets
    )
    job = finished(client, coordinator, job)
    assert job["status"] == "succeeded", job
    assert job["progress"] == 1.0
    assert spent(client, a, datasets[0])[0] == pytest.approx(1.0)
    assert spent(client, b, datasets[1])[0] == pytest.approx(1.0)
    seen = grants(client, a, study["id"])
    assert all(g["used"] and g["epsilon_spent"] == pytest.approx(1.0) for g in seen.values())

    for site in (coordinator, a, b):
        model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers)
        assert model.status_code == 200, model.text
        body = model.json()
        assert body["source"] == "federated"
        assert body["mechanism"] == "noisy_average"
        assert body["feature_names"] == FEATURE_NAMES
        record = body["privacy"]
        assert record["kind"] == "federated"
        assert record["guarantee"] == "differential_privacy"
        assert [(d["id"], d["epsilon"]) for d in record["datasets"]] == [(d, 1.0) for d in datasets]
        predicted = client.post(
            f"/v1/models/{job['model_id']}/predict",
            json={"rows": [{"age": 40, "color": "red"}]},
            headers=site.headers,
        )
        assert predicted.status_code == 200, predicted.text
        exported = client.get(f"/v1/models/{job['model_id']}/export", headers=site.headers)
        assert exported.status_code == 200, exported.text
        assert exported.json()["privacy"]["kind"] == "federated"
    assert client.get(f"/v1/models/{job['model_id']}", headers=outsider.headers).status_code == 404
    results = client.get(f"/v1/studies/{study['id']}", headers=b.headers).json()["results"]
    assert [(r["model_id"], r["method"]) for r in results] == [(job["model_id"], "noisy_average")]


def test_no_local_model_or_iterate_becomes_reachable(
    client: TestClient, make_site: MakeSite
) -> None:
    coordinator, a, b, _, study, _ = consortium(client, make_site)
    before = {
        s.id: client.get("/v1/models", headers=s.headers).json()["total"]
        for s in (coordinator, a, b)
    }
    status, job = post(
        client,
        coordinator,
        study["id"],
        protocol="psgd",
        epsilon=1.0,
        delta=1e-7,
        regularization=0.05,
        params={"iterations": 20},
    )
    assert status == 202, job
    job = finished(client, coordinator, job)
    assert job["status"] == "succeeded", job
    # One model, owned by the coordinator; the members own nothing new.
    after = {
        s.id: client.get("/v1/models", headers=s.headers).json()["total"]
        for s in (coordinator, a, b)
    }
    assert after == {**before, coordinator.id: before[coordinator.id] + 1}
    # The job shows the request only: no coefficient vector, gradient or iterate.
    assert set(job["params"]) == {
        "protocol",
        "epsilon",
        "delta",
        "loss",
        "regularization",
        "params",
        "name",
        "study_id",
        "datasets",
    }
    assert job["params"]["params"] == {"iterations": 20}
    results = client.get(f"/v1/studies/{study['id']}", headers=a.headers).json()["results"]
    assert [r["model_id"] for r in results] == [job["model_id"]]
    record = client.get(f"/v1/models/{job['model_id']}", headers=a.headers).json()["privacy"]
    assert "only this final model" in record["released"]
    assert any("secure" in note.lower() for note in record["assumptions"])


def test_a_dataset_short_of_budget_fails_the_whole_charge(
    client: TestClient, make_site: MakeSite
) -> None:
    coordinator, a, b, _, study, datasets = consortium(client, make_site, budgets=(4.0, 2.0))
    fit_model(client, b, datasets[1], epsilon=1.5)  # b's own fit leaves 0.5 of its budget
    status, problem = post(client, coordinator, study["id"], **NOISY_AVERAGE)
    assert status == 409, problem
    assert problem["type"].endswith("budget-exhausted")
    assert problem["dataset_id"] == datasets[1]
    assert datasets[1] in problem["detail"]
    assert spent(client, a, datasets[0]) == (0.0, 0.0)
    assert spent(client, b, datasets[1]) == (1.5, 0.0)
    assert client.get("/v1/jobs", headers=coordinator.headers).json()["total"] == 0
    assert not any(g["used"] for g in grants(client, a, study["id"]).values())


def test_the_grant_caps_what_the_study_may_spend(client: TestClient, make_site: MakeSite) -> None:
    coordinator, a, _, _, study, datasets = consortium(client, make_site, grant=1.5)
    status, job = post(client, coordinator, study["id"], **NOISY_AVERAGE)
    assert status == 202, job
    assert finished(client, coordinator, job)["status"] == "succeeded"
    # 1.0 of each 1.5 grant is spent; the datasets still have 3.0 but the grants only 0.5.
    status, problem = post(client, coordinator, study["id"], **NOISY_AVERAGE)
    assert status == 409, problem
    assert problem["type"].endswith("budget-exhausted")
    assert "grant" in problem["detail"]
    assert problem["dataset_id"] in datasets
    assert problem["remaining_epsilon"] == pytest.approx(0.5)
    assert spent(client, a, datasets[0])[0] == pytest.approx(1.0)
    status, _ = post(client, coordinator, study["id"], **{**NOISY_AVERAGE, "epsilon": 0.5})
    assert status == 202


def test_only_the_coordinator_runs_federated_fits(client: TestClient, make_site: MakeSite) -> None:
    _, a, _, outsider, study, datasets = consortium(client, make_site)
    assert post(client, a, study["id"], **NOISY_AVERAGE)[0] == 403
    assert post(client, outsider, study["id"], **NOISY_AVERAGE)[0] == 404
    assert post(client, outsider, "f" * 32, **NOISY_AVERAGE)[0] == 404
    assert spent(client, a, datasets[0]) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"protocol": "gossip"}, "unknown protocol"),
        ({"datasets": ["0" * 32, "1" * 32]}, "not granted"),
        ({"params": {"iterations": 10}}, "invalid federated-fit parameters"),
        ({"protocol": "psgd", "delta": 0.0}, "invalid federated-fit parameters"),
        ({"epsilon": None}, "epsilon is required"),
        ({"protocol": "admm", "params": {"perturbation": "none"}}, "allow_non_private"),
        ({"protocol": "admm", "params": {"topology": "star-of-david"}}, "invalid"),
    ],
)
def test_bad_requests_are_422_and_charge_nothing(
    client: TestClient, make_site: MakeSite, body: dict[str, Any], words: str
) -> None:
    coordinator, a, b, _, study, datasets = consortium(client, make_site)
    status, problem = post(client, coordinator, study["id"], **{**NOISY_AVERAGE, **body})
    assert status == 422, problem
    assert words in problem["detail"], problem
    assert spent(client, a, datasets[0]) == (0.0, 0.0)
    assert spent(client, b, datasets[1]) == (0.0, 0.0)
    assert client.get("/v1/jobs", headers=coordinator.headers).json()["total"] == 0


def test_one_granted_dataset_is_not_enough(client: TestClient, make_site: MakeSite) -> None:
    coordinator, _, _, _, study, datasets = consortium(client, make_site)
    status, problem = post(
        client, coordinator, study["id"], datasets=[datasets[0]], **NOISY_AVERAGE
    )
    assert status == 422
    assert "at least 2" in problem["detail"]


def test_non_private_admm_runs_only_where_allowed_and_says_so(
    client: TestClient, make_site: MakeSite
) -> None:
    coordinator, a, _, _, study, datasets = consortium(client, make_site, allow_non_private=True)
    status, job = post(
        client,
        coordinator,
        study["id"],
        protocol="admm",
        regularization=0.05,
        params={"perturbation": "none", "iterations": 10},
    )
    assert status == 202, job
    assert sorted(c["epsilon"] for c in job["charges"]) == [0.0, 0.0]
    job = finished(client, coordinator, job)
    assert job["status"] == "succeeded", job
    record = client.get(f"/v1/models/{job['model_id']}", headers=a.headers).json()["privacy"]
    assert record["guarantee"] == "none"
    assert record["epsilon"] is None
    assert "no differential privacy" in record["statement"]
    assert spent(client, a, datasets[0]) == (0.0, 0.0)


def test_gaussian_admm_is_accounted_in_zcdp_and_charges_exactly_the_offer(
    client: TestClient, make_site: MakeSite
) -> None:
    coordinator, a, b, _, study, datasets = consortium(client, make_site)
    body: dict[str, Any] = {
        "protocol": "admm",
        "epsilon": 1.0,
        "delta": 1e-6,
        "regularization": 0.05,
        "params": {"noise": "gaussian"},
    }
    status, quote = post(client, coordinator, study["id"], "?dry_run=true", **body)
    assert status == 200, quote
    assert [(c["epsilon"], c["delta"]) for c in quote["costs"]] == [(1.0, 1e-6)] * 2
    shown = quote["calibration"]
    assert (shown["noise"], shown["perturbation"], shown["zcdp_conversion"]) == (
        "gaussian",
        "primal",
        "cks",
    )
    assert shown["rho_per_round"] * shown["iterations"] == pytest.approx(shown["rho_total"])
    assert shown["epsilon_spent"] == pytest.approx(1.0, abs=1e-9)
    assert not {"sites", "N", "sigma"} & set(shown)  # σ_p would reveal B_p
    assert "zCDP" in quote["composition"]

    # δ = 0 cannot be reached through zCDP: a 422 that charges nothing
    status, problem = post(client, coordinator, study["id"], **{**body, "delta": 0.0})
    assert status == 422, problem
    assert "delta > 0" in problem["detail"]
    assert spent(client, a, datasets[0]) == (0.0, 0.0)

    status, job = post(client, coordinator, study["id"], **body)
    assert status == 202, job
    job = finished(client, coordinator, job)
    assert job["status"] == "succeeded", job
    record = client.get(f"/v1/models/{job['model_id']}", headers=b.headers).json()["privacy"]
    assert [(d["epsilon"], d["delta"]) for d in record["datasets"]] == [(1.0, 1e-6)] * 2
    assert record["calibration"]["rho_total"] == shown["rho_total"]
    assert "zCDP" in record["composition"]["within_job"]
    assert spent(client, a, datasets[0]) == pytest.approx((1.0, 1e-6))
    assert spent(client, b, datasets[1]) == pytest.approx((1.0, 1e-6))


def test_cancelling_a_queued_federated_fit_refunds_every_dataset_and_grant(
    client: TestClient, make_site: MakeSite, held: HeldRunner
) -> None:
    coordinator, a, b, _, study, datasets = consortium(client, make_site)
    status, job = post(client, coordinator, study["id"], **NOISY_AVERAGE)
    assert status == 202
    assert held.submitted == [job["id"]]
    assert spent(client, a, datasets[0])[0] == pytest.approx(1.0)
    cancelled = client.post(f"/v1/jobs/{job['id']}/cancel", headers=coordinator.headers)
    assert cancelled.status_code == 200, cancelled.text
    assert {c["state"] for c in cancelled.json()["charges"]} == {"refunded"}
    assert spent(client, a, datasets[0]) == (0.0, 0.0)
    assert spent(client, b, datasets[1]) == (0.0, 0.0)
    assert all(g["epsilon_spent"] == 0.0 for g in grants(client, a, study["id"]).values())


def test_a_site_whose_data_is_gone_fails_the_job_and_releases_nothing(
    app: FastAPI, client: TestClient, make_site: MakeSite, held: HeldRunner
) -> None:
    coordinator, a, b, _, study, datasets = consortium(client, make_site)
    status, job = post(client, coordinator, study["id"], **NOISY_AVERAGE)
    assert status == 202
    assert client.delete(f"/v1/datasets/{datasets[1]}", headers=b.headers).status_code == 204
    assert run_job(app.state.uow_factory, job["id"]).status == "failed"
    failed = client.get(f"/v1/jobs/{job['id']}", headers=coordinator.headers).json()
    assert failed["model_id"] is None
    assert failed["error"]["type"].endswith("dataset-unavailable")
    assert {c["state"] for c in failed["charges"]} == {"charged"}  # the budget stays spent
    assert spent(client, a, datasets[0])[0] == pytest.approx(1.0)
    assert client.get(f"/v1/studies/{study['id']}", headers=a.headers).json()["results"] == []


def test_a_retried_request_with_an_idempotency_key_is_charged_once(
    client: TestClient, make_site: MakeSite
) -> None:
    coordinator, a, _, _, study, datasets = consortium(client, make_site)
    headers = {**coordinator.headers, "Idempotency-Key": "federated-1"}
    url = f"/v1/studies/{study['id']}/federated-fits"
    first = client.post(url, json=NOISY_AVERAGE, headers=headers)
    again = client.post(url, json=NOISY_AVERAGE, headers=headers)
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert spent(client, a, datasets[0])[0] == pytest.approx(1.0)
    other = client.post(url, json={**NOISY_AVERAGE, "epsilon": 0.5}, headers=headers)
    assert other.status_code == 422


def test_progress_is_reported_per_round_and_a_cancel_stops_the_protocol(
    app: FastAPI, client: TestClient, make_site: MakeSite, held: HeldRunner
) -> None:
    coordinator, *_, study, _ = consortium(client, make_site)
    status, job = post(
        client,
        coordinator,
        study["id"],
        protocol="psgd",
        epsilon=1.0,
        delta=1e-7,
        regularization=0.05,
        params={"iterations": 30},
    )
    assert status == 202, job
    seen: list[float] = []

    def progress(fraction: float) -> None:
        seen.append(fraction)
        if len(seen) == 10:
            raise JobCancelledError(job["id"])

    claimed = ClaimedJob(
        id=job["id"],
        kind="federated",
        owner_site_id=coordinator.id,
        dataset_id=None,
        params=job["params"],
    )
    context = JobContext(randomness=Randomness(seed=3), progress=progress, fit=dp_fit)
    with pytest.raises(JobCancelledError):
        run_federated_job(app.state.uow_factory, claimed, context)
    assert len(seen) == 10
    assert seen == sorted(seen)
    assert 0.0 <= seen[0] < seen[-1] < 1.0

    # Uninterrupted, the protocol reports once per round (30) after the start (0).
    seen.clear()
    context = JobContext(randomness=Randomness(seed=3), progress=seen.append, fit=dp_fit)
    model = run_federated_job(app.state.uow_factory, claimed, context).model
    assert isinstance(model, Model)
    assert len(seen) >= 30
    assert seen == sorted(seen)
    assert model.source == "federated"
    assert model.study_id == study["id"]


def test_no_row_count_or_budget_of_another_site_reaches_the_coordinator(
    client: TestClient, make_site: MakeSite
) -> None:
    coordinator, a, b = (make_site(name=n) for n in ("coord", "a", "b"))
    study = create_study(client, coordinator, [a, b])
    small = upload_dataset(client, a, seed=41, epsilon=4.0)  # 200 rows
    spec = {
        "name": "larger",
        "label": LABEL,
        "features": FEATURES,
        "budget": {"epsilon": 1.2, "delta": 1e-5},
    }
    response = client.post(
        "/v1/datasets",
        files={
            "file": ("data.csv", rows_csv(437, 42), "text/csv"),
            "spec": (None, json.dumps(spec)),
        },
        headers=b.headers,
    )
    assert response.status_code == 201, response.text
    large = response.json()
    for site, data, cap in ((a, small, 2.0), (b, large, 1.2)):
        contribute(
            client,
            site,
            study["id"],
            {"dataset_id": data["id"], "epsilon_cap": cap, "delta_cap": 0.0},
        )

    status, quote = post(client, coordinator, study["id"], "?dry_run=true", **NOISY_AVERAGE)
    assert status == 200, quote
    # The noisy average protects the 437-row site at ε·200/437, but every site is charged ε.
    assert [c["epsilon"] for c in quote["costs"]] == [1.0, 1.0]
    assert all(c["remaining_epsilon"] is None for c in quote["costs"])  # not the caller's
    assert not {"n_rows", "n"} & {k for c in quote["costs"] for k in c}
    assert not {"sites", "n_min", "N", "beta", "sensitivity"} & set(quote["calibration"])
    for protocol, extra in (
        ("psgd", {"delta": 1e-7}),
        ("admm", {"params": {"perturbation": "dual"}}),
        ("distributed_lasso", {"delta": 1e-7}),
    ):
        status, other = post(
            client,
            coordinator,
            study["id"],
            "?dry_run=true",
            **{**NOISY_AVERAGE, "protocol": protocol, **extra},
        )
        assert status == 200, other
        shown = set(other["calibration"])
        assert not {"sites", "n_min", "N", "epsilon_tilde", "Delta", "sigma_star"} & shown
        assert "437" not in other["composition"]
        assert "637" not in other["composition"]

    status, job = post(client, coordinator, study["id"], **NOISY_AVERAGE)
    assert status == 202, job
    job = finished(client, coordinator, job)
    assert job["status"] == "succeeded", job
    record = client.get(f"/v1/models/{job['model_id']}", headers=a.headers).json()["privacy"]
    assert not {"sites", "n_min", "beta"} & set(record["calibration"])
    assert [d["epsilon"] for d in record["datasets"]] == [1.0, 1.0]

    # The larger site's budget (0.2 left) cannot pay again: the 409 names it, not its balance.
    status, problem = post(client, coordinator, study["id"], **NOISY_AVERAGE)
    assert status == 409, problem
    assert problem["dataset_id"] == large["id"]
    assert "remaining_epsilon" not in problem
    assert "another site" in problem["detail"]
    assert spent(client, a, small["id"])[0] == pytest.approx(1.0)


def test_prefer_wait_answers_with_the_finished_federated_job(
    client: TestClient, make_site: MakeSite
) -> None:
    coordinator, a, _, _, study, datasets = consortium(client, make_site)
    response = client.post(
        f"/v1/studies/{study['id']}/federated-fits",
        json=NOISY_AVERAGE,
        headers={**coordinator.headers, "Prefer": "wait=30"},
    )
    assert response.status_code == 201, response.text
    assert response.headers["Preference-Applied"] == "wait=30"
    job = response.json()
    assert job["status"] == "succeeded"
    assert sorted(c["dataset_id"] for c in job["charges"]) == sorted(datasets)
    assert client.get(response.headers["Location"], headers=coordinator.headers).json() == job
    assert spent(client, a, datasets[0])[0] == pytest.approx(1.0)
