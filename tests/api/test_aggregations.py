"""Aggregations over HTTP: the average method (issue 5 item 3, seed 000 Alg. 4, docs/design.md §3).

* ``POST /v1/studies/{id}/aggregations`` with ``{"method": "average"}`` answers 202 with a job
  (kind ``aggregate``) that has already succeeded and names a model whose coefficients are the
  (weighted) average of the contributed ones, readable (get, predict, export) by every member
  and by no one else.
* Only the coordinator aggregates (another member: 403, an outsider: 404); no contributions,
  models not contributed to this study (the caller's own, another study's), duplicate ids, bad
  weights and stacked models are 422s that release nothing.
* Nothing is charged. The privacy record lists each input's guarantee, composes verified ones
  per dataset (ε adds over models fitted on the same dataset), marks uploaded classifiers'
  guarantees as declared claims, and says plainly that there is no DP when an input has none.
* ``transfer`` and ``feature`` charge the coordinator's own dataset and run on the job runner
  (202 with a queued job and its ``Location``); a cancel while queued refunds the charge.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.db.base import utcnow
from service.db.uow import UnitOfWorkFactory
from tests.api._studies import (
    FEATURE_NAMES,
    N_WEIGHTS,
    contribute,
    create_study,
    finished,
    fit_model,
    upload_dataset,
    upload_model,
    weights_of,
)
from tests.api.conftest import HeldRunner
from tests.conftest import MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


W1 = [0.5, -1.0, 0.25, 0.0, 2.0]
W2 = [1.5, 1.0, -0.25, 1.0, -2.0]
W3 = [-4.0, 0.0, 0.0, 8.0, 1.0]
FEATURES_AGE_ONLY = [{"column": "age", "type": "numeric", "lower": 18, "upper": 90}]


@pytest.fixture
def trio(make_site: MakeSite) -> tuple[SiteHandle, SiteHandle, SiteHandle]:
    """Coordinator, member, outsider."""
    return make_site(name="coordinator"), make_site(name="member"), make_site(name="outsider")


def aggregate(
    client: TestClient, site: SiteHandle, study_id: str, **body: Any
) -> tuple[int, dict[str, Any]]:
    response = client.post(
        f"/v1/studies/{study_id}/aggregations",
        json={"method": "average", **body},
        headers=site.headers,
    )
    out: dict[str, Any] = response.json()
    return response.status_code, out


def aggregated_model(
    client: TestClient, site: SiteHandle, study_id: str, **body: Any
) -> dict[str, Any]:
    status, job = aggregate(client, site, study_id, **body)
    assert status == 202, job
    assert job["kind"] == "aggregate"
    assert job["status"] == "succeeded"
    assert job["charges"] == []
    assert job["dataset_id"] is None
    response = client.get(f"/v1/models/{job['model_id']}", headers=site.headers)
    assert response.status_code == 200, response.text
    model: dict[str, Any] = response.json()
    assert model["job_id"] == job["id"]
    return model


def test_average_is_the_mean_and_every_member_reads_predicts_and_exports_it(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, outsider = trio
    study = create_study(client, coordinator, [member])
    m1 = upload_model(client, coordinator, W1)
    m2 = upload_model(client, member, W2)
    contribute(client, coordinator, study["id"], {"model_id": m1["id"]})
    contribute(client, member, study["id"], {"model_id": m2["id"]})

    model = aggregated_model(client, coordinator, study["id"])
    expected = (np.asarray(W1) + np.asarray(W2)) / 2
    np.testing.assert_allclose(weights_of(model), expected, atol=1e-9)
    assert model["source"] == "aggregate"
    assert model["mechanism"] == "average"
    assert model["feature_names"] == FEATURE_NAMES
    assert model["privacy"]["kind"] == "aggregate"
    assert model["label"] == {"column": "outcome", "positive": "yes"}

    # Every member reads, predicts with and exports the result; an outsider gets 404.
    row = {"age": 54, "color": "green"}
    for site in (coordinator, member):
        got = client.get(f"/v1/models/{model['id']}", headers=site.headers)
        assert got.status_code == 200
        assert weights_of(got.json()) == weights_of(model)
        predicted = client.post(
            f"/v1/models/{model['id']}/predict", json={"rows": [row]}, headers=site.headers
        )
        assert predicted.status_code == 200, predicted.text
        x = np.array([(54 - 18) / (90 - 18), 0.0, 1.0, 0.0, 1.0])
        x = x / max(1.0, float(np.linalg.norm(x)))
        score = predicted.json()["predictions"][0]["score"]
        assert score == pytest.approx(float(x @ expected), abs=1e-9)
        exported = client.get(f"/v1/models/{model['id']}/export", headers=site.headers)
        assert exported.status_code == 200
        assert exported.json()["privacy"]["kind"] == "aggregate"
    for path in ("", "/export"):
        assert (
            client.get(f"/v1/models/{model['id']}{path}", headers=outsider.headers).status_code
            == 404
        )
    hidden = client.post(
        f"/v1/models/{model['id']}/predict", json={"rows": [row]}, headers=outsider.headers
    )
    assert hidden.status_code == 404

    # The study lists the result; the contributions are now used.
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert [r["model_id"] for r in seen["results"]] == [model["id"]]
    assert seen["results"][0]["method"] == "average"
    assert all(c["used"] for c in seen["contributions"])


def test_selected_models_with_public_weights(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    ids = []
    for site, w in ((coordinator, W1), (member, W2), (member, W3)):
        m = upload_model(client, site, w)
        contribute(client, site, study["id"], {"model_id": m["id"]})
        ids.append(m["id"])
    model = aggregated_model(
        client, coordinator, study["id"], models=[ids[2], ids[0]], weights=[1.0, 3.0]
    )
    expected = 0.25 * np.asarray(W3) + 0.75 * np.asarray(W1)
    np.testing.assert_allclose(weights_of(model), expected, atol=1e-9)
    inputs = model["privacy"]["inputs"]
    assert [i["model_id"] for i in inputs] == [ids[2], ids[0]]
    assert [i["weight"] for i in inputs] == [0.25, 0.75]
    # Only the selected contributions are used: the other can still be withdrawn.
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    used = {c["model_id"]: c["used"] for c in seen["contributions"]}
    assert used == {ids[0]: True, ids[1]: False, ids[2]: True}


def test_only_the_coordinator_aggregates(
    client: TestClient,
    trio: tuple[SiteHandle, SiteHandle, SiteHandle],
    admin_headers: dict[str, str],
) -> None:
    coordinator, member, outsider = trio
    study = create_study(client, coordinator, [member])
    m = upload_model(client, member, W2)
    contribute(client, member, study["id"], {"model_id": m["id"]})
    assert aggregate(client, member, study["id"])[0] == 403
    assert aggregate(client, outsider, study["id"])[0] == 404
    by_admin = client.post(
        f"/v1/studies/{study['id']}/aggregations",
        json={"method": "average"},
        headers=admin_headers,
    )
    assert by_admin.status_code == 404  # the admin is in no study
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert seen["results"] == []


def test_bad_aggregation_requests_are_422_and_release_nothing(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    status, problem = aggregate(client, coordinator, study["id"])
    assert status == 422
    assert "no contributed models" in problem["detail"]

    contributed = upload_model(client, member, W2)
    contribute(client, member, study["id"], {"model_id": contributed["id"]})
    own_not_contributed = upload_model(client, coordinator, W1)
    other_study = create_study(client, coordinator, [member])
    elsewhere = upload_model(client, member, W3)
    contribute(client, member, other_study["id"], {"model_id": elsewhere["id"]})

    bodies: list[dict[str, Any]] = [
        {"models": [own_not_contributed["id"]]},
        {"models": [contributed["id"], elsewhere["id"]]},
        {"models": [contributed["id"], contributed["id"]]},
        {"models": ["0" * 32]},
        {"weights": [1.0, 2.0]},
        {"weights": [0.0]},
        {"weights": [-1.0]},
        {"method": "median"},
        {"models": []},
    ]
    for body in bodies:
        status, problem = aggregate(client, coordinator, study["id"], **body)
        assert status == 422, (body, problem)
    status, problem = aggregate(client, coordinator, study["id"], models=[elsewhere["id"]])
    assert "only models contributed to this study" in problem["detail"]
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert seen["results"] == []
    assert [c["used"] for c in seen["contributions"]] == [False]


def test_a_stacked_model_cannot_be_averaged(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    dataset = upload_dataset(client, member, seed=5)
    stacked = fit_model(client, member, dataset["id"], mechanism="stacking_samples")
    assert stacked["model"]["kind"] == "stacked"
    contribute(client, member, study["id"], {"model_id": stacked["id"]})
    status, problem = aggregate(client, coordinator, study["id"])
    assert status == 422
    assert "stacked" in problem["detail"]


def test_privacy_record_composes_verified_guarantees_per_dataset_and_charges_nothing(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    d_member = upload_dataset(client, member, seed=1)
    d_coord = upload_dataset(client, coordinator, seed=2)
    a = fit_model(client, member, d_member["id"], epsilon=1.0)
    b = fit_model(client, member, d_member["id"], epsilon=0.5)
    c = fit_model(client, coordinator, d_coord["id"], epsilon=0.25)
    for site, m in ((member, a), (member, b), (coordinator, c)):
        contribute(client, site, study["id"], {"model_id": m["id"]})

    def spent(site: SiteHandle, dataset_id: str) -> float:
        budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
        return float(budget["epsilon_spent"])

    before = (spent(member, d_member["id"]), spent(coordinator, d_coord["id"]))
    model = aggregated_model(client, coordinator, study["id"])
    after = (spent(member, d_member["id"]), spent(coordinator, d_coord["id"]))
    assert before == after
    assert before[0] == pytest.approx(1.5)
    assert before[1] == pytest.approx(0.25)

    expected = (np.asarray(weights_of(a)) + weights_of(b) + weights_of(c)) / 3
    np.testing.assert_allclose(weights_of(model), expected, atol=1e-9)
    record = model["privacy"]
    assert record["guarantee"] == "differential_privacy"
    assert record["verified"] is True
    assert "nothing" in record["charged"]
    by_dataset = {d["id"]: d for d in record["datasets"]}
    assert set(by_dataset) == {d_member["id"], d_coord["id"]}
    # Sequential within a dataset (two models on the member's rows), parallel across datasets.
    assert by_dataset[d_member["id"]]["epsilon"] == pytest.approx(1.5)
    assert sorted(by_dataset[d_member["id"]]["models"]) == sorted([a["id"], b["id"]])
    assert by_dataset[d_coord["id"]]["epsilon"] == pytest.approx(0.25)
    assert record["epsilon"] == pytest.approx(1.5)
    assert len(record["inputs"]) == 3
    assert {i["guarantee"] for i in record["inputs"]} == {"differential_privacy"}
    assert "(1.5, 0)-differential privacy" in record["statement"]
    # The member sees the record too, and it holds no other site's dataset metadata.
    text = json.dumps(client.get(f"/v1/models/{model['id']}", headers=member.headers).json())
    assert d_coord["name"] not in text
    assert "n_rows" not in text


def test_uploaded_classifiers_guarantees_are_declared_claims(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    dataset = upload_dataset(client, coordinator, seed=3)
    fitted = fit_model(client, coordinator, dataset["id"], epsilon=0.5)
    claimed = upload_model(
        client, member, W2, claim={"epsilon": 0.8, "mechanism": "objective_perturbation"}
    )
    contribute(client, coordinator, study["id"], {"model_id": fitted["id"]})
    contribute(client, member, study["id"], {"model_id": claimed["id"]})
    record = aggregated_model(client, coordinator, study["id"])["privacy"]
    assert record["guarantee"] == "declared"
    assert record["verified"] is False
    assert record["epsilon"] is None
    assert "declared by the uploader, not verified by PrivFit" in record["statement"]
    upload_entry = next(i for i in record["inputs"] if i["model_id"] == claimed["id"])
    assert upload_entry["guarantee"] == "declared"
    assert upload_entry["verified"] is False
    assert upload_entry["claim"]["epsilon"] == 0.8
    assert upload_entry["note"] == "declared by the uploader, not verified by PrivFit"
    fit_entry = next(i for i in record["inputs"] if i["model_id"] == fitted["id"])
    assert fit_entry["verified"] is True
    assert fit_entry["epsilon"] == pytest.approx(0.5)
    by_model = {d["models"][0]: d for d in record["datasets"]}
    assert by_model[fitted["id"]]["epsilon"] == pytest.approx(0.5)
    assert by_model[claimed["id"]]["verified"] is False


@pytest.mark.parametrize("no_dp", ["upload_without_claim", "non_private_fit"])
def test_an_input_without_dp_means_the_average_has_none(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle], no_dp: str
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    dp = upload_model(client, coordinator, W1, claim={"epsilon": 1.0})
    if no_dp == "upload_without_claim":
        plain = upload_model(client, member, W2)
    else:
        dataset = upload_dataset(client, member, seed=4, allow_non_private=True)
        plain = fit_model(client, member, dataset["id"], mechanism="non_private", epsilon=None)
    contribute(client, coordinator, study["id"], {"model_id": dp["id"]})
    contribute(client, member, study["id"], {"model_id": plain["id"]})
    model = aggregated_model(client, coordinator, study["id"])
    record = model["privacy"]
    assert record["guarantee"] == "none"
    assert record["verified"] is False
    assert record["epsilon"] is None
    assert record["statement"].startswith("no differential privacy")
    assert plain["id"] in record["statement"]
    listed = client.get("/v1/models", headers=coordinator.headers).json()["items"]
    summary = next(m for m in listed if m["id"] == model["id"])
    assert summary["source"] == "aggregate"
    assert summary["epsilon"] is None
    assert len(weights_of(model)) == N_WEIGHTS


# --- transfer ------------------------------------------------------------------------------


def transfer(
    client: TestClient, site: SiteHandle, study_id: str, **body: Any
) -> tuple[int, dict[str, Any]]:
    response = client.post(
        f"/v1/studies/{study_id}/aggregations",
        json={"method": "transfer", **body},
        headers=site.headers,
    )
    out: dict[str, Any] = response.json()
    if response.status_code == 202:  # the job runs on the runner: wait for its end
        assert response.headers["Location"] == f"/v1/jobs/{out['id']}"
        out = finished(client, site, out)
    return response.status_code, out


def transfer_study(
    client: TestClient, coordinator: SiteHandle, member: SiteHandle
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A study where ``member`` contributed a model fitted at ε = 1 on its dataset, and a target
    dataset of the coordinator (ε = 2): the study, the source dataset and the target."""
    study = create_study(client, coordinator, [member])
    source_data = upload_dataset(client, member, seed=11)
    source = fit_model(client, member, source_data["id"], epsilon=1.0)
    contribute(client, member, study["id"], {"model_id": source["id"]})
    return study, source_data, upload_dataset(client, coordinator, seed=12, epsilon=2.0)


def epsilon_spent(client: TestClient, site: SiteHandle, dataset_id: str) -> float:
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    return float(budget["epsilon_spent"])


def test_transfer_fits_the_target_charges_it_and_every_member_reads_the_result(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, outsider = trio
    study, source_data, target = transfer_study(client, coordinator, member)

    status, job = transfer(
        client,
        coordinator,
        study["id"],
        target_dataset_id=target["id"],
        epsilon=0.75,
        transfer_strength=0.5,
        regularization=0.05,
    )
    assert status == 202, job
    assert job["kind"] == "aggregate"
    assert job["status"] == "succeeded", job
    assert job["dataset_id"] == target["id"]
    assert [(c["dataset_id"], c["epsilon"], c["state"]) for c in job["charges"]] == [
        (target["id"], 0.75, "charged")
    ]
    assert epsilon_spent(client, coordinator, target["id"]) == pytest.approx(0.75)
    assert epsilon_spent(client, member, source_data["id"]) == pytest.approx(1.0)

    got = client.get(f"/v1/models/{job['model_id']}", headers=member.headers)
    assert got.status_code == 200
    model = got.json()
    assert model["source"] == "aggregate"
    assert model["mechanism"] == "transfer"
    assert len(weights_of(model)) == N_WEIGHTS
    record = model["privacy"]
    assert record["guarantee"] == "differential_privacy"
    assert record["verified"] is True
    by_dataset = {d["id"]: d for d in record["datasets"]}
    assert by_dataset[target["id"]]["epsilon"] == pytest.approx(0.75)
    assert by_dataset[target["id"]]["role"] == "target"
    assert by_dataset[source_data["id"]]["epsilon"] == pytest.approx(1.0)
    assert record["epsilon"] == pytest.approx(1.0)
    assert record["calibration"]["transfer_strength"] == 0.5
    # Nothing that reveals the target's size or name reaches the other members.
    assert "n" not in record["calibration"]
    text = json.dumps(model)
    assert "n_rows" not in text
    assert target["name"] not in text
    predicted = client.post(
        f"/v1/models/{model['id']}/predict",
        json={"rows": [{"age": 40, "color": "red"}]},
        headers=member.headers,
    )
    assert predicted.status_code == 200
    assert client.get(f"/v1/models/{model['id']}", headers=outsider.headers).status_code == 404


def test_a_strong_transfer_returns_the_average_of_the_sources(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    for site, w in ((coordinator, W1), (member, W2)):
        m = upload_model(client, site, w, claim={"epsilon": 1.0})
        contribute(client, site, study["id"], {"model_id": m["id"]})
    target = upload_dataset(client, coordinator, seed=13)
    status, job = transfer(
        client,
        coordinator,
        study["id"],
        target_dataset_id=target["id"],
        epsilon=1.0,
        transfer_strength=1e6,
        regularization=0.05,
    )
    assert status == 202
    assert job["status"] == "succeeded", job
    model = client.get(f"/v1/models/{job['model_id']}", headers=coordinator.headers).json()
    expected = (np.asarray(W1) + np.asarray(W2)) / 2
    np.testing.assert_allclose(weights_of(model), expected, atol=1e-4)
    assert model["privacy"]["guarantee"] == "declared"
    assert "declared by the uploader" in model["privacy"]["statement"]


def test_a_source_fitted_on_the_target_composes_sequentially(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    target = upload_dataset(client, coordinator, seed=14)
    own = fit_model(client, coordinator, target["id"], epsilon=0.5)
    contribute(client, coordinator, study["id"], {"model_id": own["id"]})
    status, job = transfer(
        client,
        coordinator,
        study["id"],
        target_dataset_id=target["id"],
        epsilon=1.0,
        transfer_strength=0.1,
        regularization=0.05,
    )
    assert status == 202
    assert job["status"] == "succeeded", job
    assert epsilon_spent(client, coordinator, target["id"]) == pytest.approx(1.5)
    record = client.get(f"/v1/models/{job['model_id']}", headers=member.headers).json()["privacy"]
    (slot,) = [d for d in record["datasets"] if d["id"] == target["id"]]
    assert slot["epsilon"] == pytest.approx(1.5)
    assert slot["charged_by_this_job"]["epsilon"] == pytest.approx(1.0)
    assert record["epsilon"] == pytest.approx(1.5)


def test_a_source_without_dp_is_said_plainly(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    plain = upload_model(client, member, W2)
    contribute(client, member, study["id"], {"model_id": plain["id"]})
    target = upload_dataset(client, coordinator, seed=15)
    status, job = transfer(
        client,
        coordinator,
        study["id"],
        target_dataset_id=target["id"],
        epsilon=1.0,
        transfer_strength=1.0,
        regularization=0.05,
    )
    assert status == 202
    record = client.get(f"/v1/models/{job['model_id']}", headers=member.headers).json()["privacy"]
    assert record["guarantee"] == "none"
    assert record["epsilon"] is None
    assert plain["id"] in record["statement"]
    assert "carry no DP guarantee" in record["statement"]


def test_bad_transfers_are_refused_before_anything_is_charged(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    m = upload_model(client, member, W2)
    contribute(client, member, study["id"], {"model_id": m["id"]})
    target = upload_dataset(client, coordinator, seed=16, epsilon=1.0)
    members_data = upload_dataset(client, member, seed=17)
    mismatched = upload_dataset(client, coordinator, seed=18, features=[FEATURES_AGE_ONLY[0]])
    ok = {"epsilon": 0.5, "transfer_strength": 1.0, "regularization": 0.05}

    # Not the coordinator: 403; the target is another site's dataset: 404.
    assert (
        transfer(client, member, study["id"], target_dataset_id=members_data["id"], **ok)[0] == 403
    )
    status, _ = transfer(
        client, coordinator, study["id"], target_dataset_id=members_data["id"], **ok
    )
    assert status == 404
    # The target's spec differs from the study's: 422 saying what.
    status, problem = transfer(
        client, coordinator, study["id"], target_dataset_id=mismatched["id"], **ok
    )
    assert status == 422
    assert "missing features the study declares: 'color'" in problem["detail"]
    # More ε than the target's budget: 409 with the remaining budget.
    status, problem = transfer(
        client,
        coordinator,
        study["id"],
        target_dataset_id=target["id"],
        epsilon=1.5,
        transfer_strength=1.0,
    )
    assert status == 409
    assert problem["remaining_epsilon"] == pytest.approx(1.0)
    # Bad parameters and foreign sources: 422.
    for bad in (
        {**ok, "transfer_strength": -1.0},
        {**ok, "epsilon": 0.0},
        {**ok, "regularization": 0.0},
        {**ok, "source_models": ["0" * 32]},
        {**ok, "feature_groups": [[0, 1]]},
    ):
        status, _ = transfer(
            client, coordinator, study["id"], target_dataset_id=target["id"], **bad
        )
        assert status == 422, bad
    for site, dataset in ((coordinator, target), (member, members_data), (coordinator, mismatched)):
        assert epsilon_spent(client, site, dataset["id"]) == 0.0
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert seen["results"] == []
    assert [c["used"] for c in seen["contributions"]] == [False]


# --- feature method ------------------------------------------------------------------------


def feature(
    client: TestClient, site: SiteHandle, study_id: str, **body: Any
) -> tuple[int, dict[str, Any]]:
    response = client.post(
        f"/v1/studies/{study_id}/aggregations",
        json={"method": "feature", **body},
        headers=site.headers,
    )
    out: dict[str, Any] = response.json()
    if response.status_code == 202:  # the job runs on the runner: wait for its end
        assert response.headers["Location"] == f"/v1/jobs/{out['id']}"
        out = finished(client, site, out)
    return response.status_code, out


def test_linear_feature_method_releases_a_model_in_the_span_of_the_site_models(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, outsider = trio
    study = create_study(client, coordinator, [member])
    site_models = []
    for seed in (21, 22):
        data = upload_dataset(client, member, seed=seed)
        m = fit_model(client, member, data["id"], epsilon=1.0)
        contribute(client, member, study["id"], {"model_id": m["id"]})
        site_models.append(weights_of(m))
    holdout = upload_dataset(client, coordinator, seed=23, epsilon=2.0)

    status, job = feature(
        client,
        coordinator,
        study["id"],
        holdout_dataset_id=holdout["id"],
        epsilon=1.0,
        regularization=0.05,
        meta_features="linear",
    )
    assert status == 202, job
    assert job["status"] == "succeeded", job
    assert [(c["dataset_id"], c["epsilon"]) for c in job["charges"]] == [(holdout["id"], 1.0)]
    assert epsilon_spent(client, coordinator, holdout["id"]) == pytest.approx(1.0)

    model = client.get(f"/v1/models/{job['model_id']}", headers=member.headers).json()
    assert model["mechanism"] == "feature"
    w = np.asarray(weights_of(model))
    assert w.shape == (N_WEIGHTS,)
    # f_Σ = s·M_fᵀω lies in the span of the site models (seed 000, Alg. 5).
    M = np.asarray(site_models)
    omega, *_ = np.linalg.lstsq(M.T, w, rcond=None)
    np.testing.assert_allclose(M.T @ omega, w, atol=1e-6)
    record = model["privacy"]
    assert record["guarantee"] == "differential_privacy"
    assert record["method"] == "feature"
    (slot,) = [d for d in record["datasets"] if d["id"] == holdout["id"]]
    assert slot["role"] == "holdout"
    assert slot["epsilon"] == pytest.approx(1.0)
    assert record["calibration"]["meta_features"] == "linear"
    assert record["calibration"]["n_site_models"] == 2
    assert "n" not in record["calibration"]
    assert holdout["name"] not in json.dumps(model)
    assert client.get(f"/v1/models/{model['id']}", headers=outsider.headers).status_code == 404


def test_sigmoid_feature_method_releases_a_stacked_model_members_predict_with(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    for site, w in ((coordinator, W1), (member, W2)):
        m = upload_model(client, site, w, claim={"epsilon": 1.0})
        contribute(client, site, study["id"], {"model_id": m["id"]})
    holdout = upload_dataset(client, coordinator, seed=24)
    status, job = feature(
        client,
        coordinator,
        study["id"],
        holdout_dataset_id=holdout["id"],
        epsilon=1.0,
        mechanism="output_perturbation",
        regularization=0.05,
        meta_features="sigmoid",
    )
    assert status == 202
    assert job["status"] == "succeeded", job
    model = client.get(f"/v1/models/{job['model_id']}", headers=member.headers).json()
    assert model["model"]["kind"] == "stacked"
    assert model["coefficients"] is None
    assert [m["coef"] for m in model["model"]["low_level"]] == [W1, W2]
    assert model["privacy"]["guarantee"] == "declared"
    predicted = client.post(
        f"/v1/models/{model['id']}/predict",
        json={"rows": [{"age": 30, "color": "blue"}]},
        headers=member.headers,
    )
    assert predicted.status_code == 200, predicted.text
    assert 0.0 < predicted.json()["predictions"][0]["probability"] < 1.0


def test_feature_method_refuses_a_holdout_the_coordinator_does_not_own(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    m = upload_model(client, member, W2)
    contribute(client, member, study["id"], {"model_id": m["id"]})
    members_data = upload_dataset(client, member, seed=25)
    holdout = upload_dataset(client, coordinator, seed=26)
    body = {"epsilon": 1.0, "regularization": 0.05}
    status, _ = feature(
        client, coordinator, study["id"], holdout_dataset_id=members_data["id"], **body
    )
    assert status == 404
    status, _ = feature(client, member, study["id"], holdout_dataset_id=members_data["id"], **body)
    assert status == 403
    status, _ = feature(
        client,
        coordinator,
        study["id"],
        holdout_dataset_id=holdout["id"],
        mechanism="dp_sgd",
        **body,
    )
    assert status == 422
    assert epsilon_spent(client, member, members_data["id"]) == 0.0
    assert epsilon_spent(client, coordinator, holdout["id"]) == 0.0
    # Source models without any DP guarantee: the result says so plainly.
    status, job = feature(
        client, coordinator, study["id"], holdout_dataset_id=holdout["id"], **body
    )
    assert status == 202
    record = client.get(f"/v1/models/{job['model_id']}", headers=member.headers).json()["privacy"]
    assert record["guarantee"] == "none"
    assert "carry no DP guarantee" in record["statement"]


def test_contributions_can_be_aggregated_again_and_stay_used(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    ids = []
    for site, w in ((coordinator, W1), (member, W2)):
        m = upload_model(client, site, w)
        contribute(client, site, study["id"], {"model_id": m["id"]})
        ids.append(m["id"])
    first = aggregated_model(client, coordinator, study["id"])
    second = aggregated_model(client, coordinator, study["id"], weights=[3.0, 1.0])
    np.testing.assert_allclose(
        weights_of(second), 0.75 * np.asarray(W1) + 0.25 * np.asarray(W2), atol=1e-9
    )
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert {r["model_id"] for r in seen["results"]} == {first["id"], second["id"]}
    assert all(c["used"] for c in seen["contributions"])


def test_marking_used_counts_only_contributions_that_still_exist(
    client: TestClient,
    trio: tuple[SiteHandle, SiteHandle, SiteHandle],
    uow_factory: UnitOfWorkFactory,
) -> None:
    """An aggregation whose contribution was withdrawn meanwhile sees fewer rows and refuses
    (409) instead of releasing a model built on a withdrawn contribution."""
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    m = upload_model(client, member, W2)
    contribution = contribute(client, member, study["id"], {"model_id": m["id"]})
    with uow_factory() as uow:
        assert uow.studies.mark_used([contribution["id"], "0" * 32], at=utcnow()) == 1
        uow.rollback()


def test_charged_aggregations_run_on_the_runner_and_a_queued_one_is_refunded(
    app: FastAPI,
    client: TestClient,
    trio: tuple[SiteHandle, SiteHandle, SiteHandle],
    held: HeldRunner,
) -> None:
    from service.runtime.worker import run_job

    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    source = upload_model(client, member, W1)
    contribute(client, member, study["id"], {"model_id": source["id"]})
    target = upload_dataset(client, coordinator, seed=21, epsilon=2.0)
    body = {"target_dataset_id": target["id"], "epsilon": 0.5, "transfer_strength": 0.1}
    queued = []
    for _ in range(2):
        response = client.post(
            f"/v1/studies/{study['id']}/aggregations",
            json={"method": "transfer", **body},
            headers=coordinator.headers,
        )
        assert response.status_code == 202, response.text
        assert response.json()["status"] == "queued"
        queued.append(response.json()["id"])
    assert held.submitted == queued
    assert epsilon_spent(client, coordinator, target["id"]) == pytest.approx(1.0)
    cancelled = client.post(f"/v1/jobs/{queued[0]}/cancel", headers=coordinator.headers)
    assert cancelled.status_code == 200
    assert [c["state"] for c in cancelled.json()["charges"]] == ["refunded"]
    assert epsilon_spent(client, coordinator, target["id"]) == pytest.approx(0.5)
    assert run_job(app.state.uow_factory, queued[0]).status == "cancelled"
    assert run_job(app.state.uow_factory, queued[1]).status == "succeeded"
    done = client.get(f"/v1/jobs/{queued[1]}", headers=coordinator.headers).json()
    model = client.get(f"/v1/models/{done['model_id']}", headers=member.headers)
    assert model.status_code == 200
    assert model.json()["mechanism"] == "transfer"


# --- PST-H: transfer with feature groups (seed 003 Alg. 4) ---------------------------------

#: age + intercept, and the color block (named by its column), with public importance 2 : 1.
PST_H_GROUPS = [["age", "intercept"], ["color"]]


def test_pst_h_fits_a_stacked_model_charges_the_target_eps_and_members_use_it(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    from service.dp.core.released import StackedModel, model_from_dict

    coordinator, member, outsider = trio
    study = create_study(client, coordinator, [member])
    source_data = upload_dataset(client, member, seed=31)
    source = fit_model(client, member, source_data["id"], epsilon=1.0)
    contribute(client, member, study["id"], {"model_id": source["id"]})
    target = upload_dataset(client, coordinator, seed=32, epsilon=2.0)

    status, job = transfer(
        client,
        coordinator,
        study["id"],
        target_dataset_id=target["id"],
        epsilon=0.8,
        transfer_strength=0.5,
        regularization=0.05,
        feature_groups=PST_H_GROUPS,
        importance=[2.0, 1.0],
    )
    assert status == 202, job
    assert job["status"] == "succeeded", job
    # The whole job costs ε: Σ_k q_k·ε on the low-level rows, ε on the disjoint high-level rows.
    assert [(c["dataset_id"], c["epsilon"], c["delta"]) for c in job["charges"]] == [
        (target["id"], 0.8, 0.0)
    ]
    assert epsilon_spent(client, coordinator, target["id"]) == pytest.approx(0.8)
    assert epsilon_spent(client, member, source_data["id"]) == pytest.approx(1.0)

    model = client.get(f"/v1/models/{job['model_id']}", headers=member.headers).json()
    assert model["mechanism"] == "transfer"
    assert model["coefficients"] is None
    body = model["model"]
    assert body["kind"] == "stacked"
    assert body["method"] == "features"
    assert body["meta_features"] == "sigmoid"  # seed 003's default
    assert [m["columns"] for m in body["low_level"]] == [[0, 4], [1, 2, 3]]
    record = model["privacy"]
    assert record["guarantee"] == "differential_privacy"
    by_dataset = {d["id"]: d for d in record["datasets"]}
    assert by_dataset[target["id"]]["epsilon"] == pytest.approx(0.8)
    assert by_dataset[target["id"]]["charged_by_this_job"]["epsilon"] == pytest.approx(0.8)
    assert by_dataset[source_data["id"]]["epsilon"] == pytest.approx(1.0)
    assert record["charged"] == f"ε = 0.8, δ = 0 to the target dataset {target['id']}"
    cal = record["calibration"]
    assert cal["variant"] == "pst_h"
    assert cal["base_mechanism"] == "stacking_features"
    assert cal["feature_group_names"] == [
        ["age", "intercept"],
        ["color=red", "color=green", "color=blue"],
    ]
    assert cal["unused_features"] == []
    assert cal["importance"] == pytest.approx([2 / 3, 1 / 3])
    assert cal["low_level_epsilon"] == pytest.approx([0.8 * 2 / 3, 0.8 / 3])
    assert sum(cal["low_level_epsilon"]) <= 0.8
    assert cal["high_level_epsilon"] == pytest.approx(0.8)
    assert cal["high_level_epsilon"] <= 0.8  # the largest double ≤ the ledger's decimal
    assert cal["transfer_strength"] == 0.5
    within = record["composition"]["within_job"]
    assert "PST-H" in within
    assert "K·ε_src" in within
    # Nothing that depends on the target's size reaches the members.
    for key in ("n", "rows_low_level", "rows_high_level", "low_level", "high_level"):
        assert key not in cal

    row = {"age": 61, "color": "blue"}
    x = np.array([(61 - 18) / (90 - 18), 0.0, 0.0, 1.0, 1.0])
    x = x / max(1.0, float(np.linalg.norm(x)))
    stacked = model_from_dict(body)
    assert isinstance(stacked, StackedModel)
    expected = float(stacked.decision_function(x[None, :])[0])
    for site in (coordinator, member):
        predicted = client.post(
            f"/v1/models/{model['id']}/predict", json={"rows": [row]}, headers=site.headers
        )
        assert predicted.status_code == 200, predicted.text
        assert predicted.json()["predictions"][0]["score"] == pytest.approx(expected, abs=1e-9)
        exported = client.get(f"/v1/models/{model['id']}/export", headers=site.headers)
        assert exported.status_code == 200
        assert exported.json()["model"] == body
        assert exported.json()["weights"] is None
    for path in ("", "/export"):
        assert (
            client.get(f"/v1/models/{model['id']}{path}", headers=outsider.headers).status_code
            == 404
        )


def test_a_strong_pst_h_puts_each_group_on_the_sources_weights(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    for site, w in ((coordinator, W1), (member, W2)):
        m = upload_model(client, site, w, claim={"epsilon": 1.0})
        contribute(client, site, study["id"], {"model_id": m["id"]})
    target = upload_dataset(client, coordinator, seed=33)
    status, job = transfer(
        client,
        coordinator,
        study["id"],
        target_dataset_id=target["id"],
        epsilon=1.0,
        transfer_strength=1e6,
        regularization=0.05,
        feature_groups=[["age"], ["color=red", "color=blue"]],
        meta_features="centered_sigmoid",
    )
    assert status == 202
    assert job["status"] == "succeeded", job
    model = client.get(f"/v1/models/{job['model_id']}", headers=coordinator.headers).json()
    assert model["model"]["meta_features"] == "centered_sigmoid"
    assert model["privacy"]["calibration"]["meta_features"] == "centered_sigmoid"
    w0 = (np.asarray(W1) + np.asarray(W2)) / 2
    low = model["model"]["low_level"]
    assert [m["columns"] for m in low] == [[0], [1, 3]]
    np.testing.assert_allclose(low[0]["coef"], w0[[0]], atol=1e-4)
    np.testing.assert_allclose(low[1]["coef"], w0[[1, 3]], atol=1e-4)
    cal = model["privacy"]["calibration"]
    assert cal["unused_features"] == ["color=green", "intercept"]
    assert cal["importance"] == [0.5, 0.5]  # default: equal weights
    assert model["privacy"]["guarantee"] == "declared"
    assert epsilon_spent(client, coordinator, target["id"]) == pytest.approx(1.0)


def test_bad_feature_groups_and_importance_are_422_and_charge_nothing(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    m = upload_model(client, member, W2)
    contribute(client, member, study["id"], {"model_id": m["id"]})
    target = upload_dataset(client, coordinator, seed=34, epsilon=1.0)
    ok = {"epsilon": 0.5, "transfer_strength": 1.0, "regularization": 0.05}

    refused: list[tuple[dict[str, Any], str | None]] = [
        ({"feature_groups": [["age", "height"]]}, "unknown feature 'height'"),
        ({"feature_groups": [["age"], ["age"]]}, "must be disjoint"),
        ({"feature_groups": [["color"], ["color=red"]]}, "'color=red' is also in group 0"),
        ({"feature_groups": [["age", "age"]]}, "twice in group"),
        ({"feature_groups": [["age"], []]}, None),
        ({"feature_groups": []}, None),
        ({"feature_groups": [[0, 4]]}, None),
        ({"feature_groups": PST_H_GROUPS, "importance": [1.0]}, "one weight per feature group"),
        ({"feature_groups": PST_H_GROUPS, "importance": [1.0, 0.0]}, "no privacy budget"),
        ({"feature_groups": PST_H_GROUPS, "importance": [1.0, -1.0]}, None),
        ({"importance": [1.0]}, "need feature_groups"),
        ({"meta_features": "centered_sigmoid"}, "meta_features needs feature_groups"),
        ({"feature_groups": PST_H_GROUPS, "meta_features": "linear"}, None),
    ]
    for bad, message in refused:
        status, problem = transfer(
            client, coordinator, study["id"], target_dataset_id=target["id"], **ok, **bad
        )
        assert status == 422, (bad, problem)
        if message is not None:
            assert message in problem["detail"], (bad, problem["detail"])
    # The member is not the coordinator: 403 before the groups are looked at.
    status, _ = transfer(
        client,
        member,
        study["id"],
        target_dataset_id=target["id"],
        feature_groups=[["height"]],
        **ok,
    )
    assert status == 403
    assert epsilon_spent(client, coordinator, target["id"]) == 0.0
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert seen["results"] == []
    assert [c["used"] for c in seen["contributions"]] == [False]


def test_prefer_wait_answers_a_transfer_with_its_finished_job(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    """``Prefer: wait`` on an aggregation that runs on the job runner: one request, 201 with
    the succeeded job (the same as a later GET)."""
    coordinator, member, _ = trio
    study, _, target = transfer_study(client, coordinator, member)
    response = client.post(
        f"/v1/studies/{study['id']}/aggregations",
        json={
            "method": "transfer",
            "target_dataset_id": target["id"],
            "epsilon": 0.5,
            "transfer_strength": 0.5,
            "regularization": 0.05,
        },
        headers={**coordinator.headers, "Prefer": "wait=30"},
    )
    assert response.status_code == 201, response.text
    assert response.headers["Preference-Applied"] == "wait=30"
    job = response.json()
    assert job["status"] == "succeeded"
    assert job["model_id"] is not None
    assert client.get(response.headers["Location"], headers=coordinator.headers).json() == job


def test_without_prefer_wait_an_average_is_still_202(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    """An average is done within the request; it keeps its 202 unless the client asked to
    wait, and then it is 201 at once."""
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    contribute(
        client, coordinator, study["id"], {"model_id": upload_model(client, coordinator, W1)["id"]}
    )
    url = f"/v1/studies/{study['id']}/aggregations"
    plain = client.post(url, json={"method": "average"}, headers=coordinator.headers)
    waited = client.post(
        url, json={"method": "average"}, headers={**coordinator.headers, "Prefer": "wait=5"}
    )
    assert (plain.status_code, waited.status_code) == (202, 201), waited.text
    assert plain.json()["status"] == waited.json()["status"] == "succeeded"


# --- Idempotency-Key and dry runs ---------------------------------------------------------------


def _post_transfer(
    client: TestClient,
    site: SiteHandle,
    study_id: str,
    body: dict[str, Any],
    *,
    key: str | None = None,
    query: str = "",
) -> Any:
    headers = {**site.headers, **({"Idempotency-Key": key} if key else {})}
    return client.post(
        f"/v1/studies/{study_id}/aggregations{query}",
        json={"method": "transfer", **body},
        headers=headers,
    )


def test_a_retried_transfer_with_an_idempotency_key_is_charged_once(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle], held: HeldRunner
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    contribute(client, member, study["id"], {"model_id": upload_model(client, member, W1)["id"]})
    target = upload_dataset(client, coordinator, seed=21, epsilon=2.0)
    body = {"target_dataset_id": target["id"], "epsilon": 0.5, "transfer_strength": 0.1}

    first = _post_transfer(client, coordinator, study["id"], body, key="transfer-1")
    again = _post_transfer(client, coordinator, study["id"], body, key="transfer-1")
    assert (first.status_code, again.status_code) == (202, 202), again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert held.submitted == [first.json()["id"]]
    assert epsilon_spent(client, coordinator, target["id"]) == pytest.approx(0.5)

    other = _post_transfer(
        client, coordinator, study["id"], {**body, "epsilon": 0.25}, key="transfer-1"
    )
    assert other.status_code == 422, other.text
    assert epsilon_spent(client, coordinator, target["id"]) == pytest.approx(0.5)


def test_a_retried_average_with_an_idempotency_key_releases_one_result(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    contribute(client, member, study["id"], {"model_id": upload_model(client, member, W1)["id"]})
    headers = {**coordinator.headers, "Idempotency-Key": "average-1"}
    url = f"/v1/studies/{study['id']}/aggregations"
    first = client.post(url, json={"method": "average"}, headers=headers)
    again = client.post(url, json={"method": "average"}, headers=headers)
    assert (first.status_code, again.status_code) == (202, 202), again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    results = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()["results"]
    assert len(results) == 1


def test_a_dry_run_quotes_a_transfer_and_spends_nothing(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle], held: HeldRunner
) -> None:
    coordinator, member, outsider = trio
    study = create_study(client, coordinator, [member])
    contribute(client, member, study["id"], {"model_id": upload_model(client, member, W1)["id"]})
    target = upload_dataset(client, coordinator, seed=21, epsilon=2.0)
    body = {"target_dataset_id": target["id"], "epsilon": 0.5, "transfer_strength": 0.1}

    quoted = _post_transfer(client, coordinator, study["id"], body, query="?dry_run=true")
    assert quoted.status_code == 200, quoted.text
    quote = quoted.json()
    assert quote["dry_run"] is True
    assert (quote["method"], quote["dataset_id"]) == ("transfer", target["id"])
    assert quote["cost"] == {"epsilon": 0.5, "delta": 0.0}
    assert quote["budget"] == {
        "remaining_epsilon": 2.0,
        "remaining_delta": 1e-5,
        "sufficient": True,
    }
    assert quote["calibration"]
    assert held.submitted == []
    assert epsilon_spent(client, coordinator, target["id"]) == 0.0
    assert client.get("/v1/jobs", headers=coordinator.headers).json()["total"] == 0

    # The same refusals as the real request, before anything is spent.
    as_member = _post_transfer(client, member, study["id"], body, query="?dry_run=true")
    assert as_member.status_code == 403
    as_outsider = _post_transfer(client, outsider, study["id"], body, query="?dry_run=true")
    assert as_outsider.status_code == 404
    too_much = _post_transfer(
        client, coordinator, study["id"], {**body, "epsilon": 5.0}, query="?dry_run=true"
    )
    assert too_much.status_code == 200
    assert too_much.json()["budget"]["sufficient"] is False

    averaged = client.post(
        f"/v1/studies/{study['id']}/aggregations?dry_run=true",
        json={"method": "average"},
        headers=coordinator.headers,
    )
    assert averaged.status_code == 200, averaged.text
    assert averaged.json()["cost"] == {"epsilon": 0.0, "delta": 0.0}
    assert averaged.json()["budget"] is None
    assert client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()["results"] == []
