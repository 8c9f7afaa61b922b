"""``POST /v1/models/{id}/evaluations``: a charged job whose result is a private evaluation.

A model fitted on one dataset is evaluated on another of the same spec (and on its own training
set, which the record warns about). Every refusal (different spec, a dataset of another site,
a bad ε, an exhausted budget) charges nothing and queues nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.dp.analysis.evaluation import roc_from_histograms
from tests.conftest import MakeSite, SiteHandle
from tests.unit.jobs._flow import budget, fit_body, toy_csv, toy_spec, upload

PROBLEM_JSON = "application/problem+json"
WAIT = {"Prefer": "wait=30"}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


def _fit(client: TestClient, site: SiteHandle, dataset_id: str) -> dict[str, Any]:
    response = client.post(
        f"/v1/datasets/{dataset_id}/fits",
        json=fit_body("objective_perturbation", epsilon=1.0),
        headers={**site.headers, **WAIT},
    )
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    assert job["status"] == "succeeded", job
    return job


@pytest.fixture
def trained(client: TestClient, site: SiteHandle) -> tuple[str, str, str]:
    """(model id, training dataset id, a held-out dataset id of the same spec)."""
    train = upload(client, site.headers)
    held_out = upload(client, site.headers, raw=toy_csv(n=400, seed=7))
    model_id = _fit(client, site, train["id"])["model_id"]
    return model_id, train["id"], held_out["id"]


def _true_accuracy(client: TestClient, site: SiteHandle, model_id: str, raw: bytes) -> float:
    lines = raw.decode().strip().splitlines()
    header = lines[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=True)) for line in lines[1:]]
    for row in rows:
        row["x1"], row["x2"] = float(row["x1"]), float(row["x2"])  # type: ignore[assignment]
    response = client.post(
        f"/v1/models/{model_id}/predict", json={"rows": rows}, headers=site.headers
    )
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    right = sum(
        bool(p["positive"]) == (r["y"] == "yes") for p, r in zip(predictions, rows, strict=True)
    )
    return right / len(rows)


def _evaluate(
    client: TestClient, site: SiteHandle, model_id: str, body: dict[str, Any], **headers: str
) -> Any:
    return client.post(
        f"/v1/models/{model_id}/evaluations", json=body, headers={**site.headers, **headers}
    )


def test_an_evaluation_is_charged_and_released(
    client: TestClient, site: SiteHandle, trained: tuple[str, str, str]
) -> None:
    model_id, _, held_out = trained
    response = _evaluate(client, site, model_id, {"dataset_id": held_out, "epsilon": 2.0}, **WAIT)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["kind"] == "evaluate"
    assert job["status"] == "succeeded"
    assert job["charges"] == [
        {"dataset_id": held_out, "epsilon": 2.0, "delta": 0.0, "state": "charged"}
    ]
    assert budget(client, site.headers, held_out)["epsilon_spent"] == pytest.approx(2.0)

    evaluation = client.get(f"/v1/evaluations/{job['id']}", headers=site.headers)
    assert evaluation.status_code == 200, evaluation.text
    body = evaluation.json()
    assert body["model_id"] == model_id
    assert body["dataset_id"] == held_out
    result = body["result"]
    counts = result["confusion_matrix"]
    assert set(counts) == {"tp", "fp", "fn", "tn"}
    assert all(isinstance(v, int) for v in counts.values())
    # ε = 2 gives each half ε = 1 and each cell discrete Laplace noise of scale b = Δ₁/ε = 2
    # (standard deviation ≈ 2.8): the noisy total is close to n
    assert abs(sum(counts.values()) - 400) < 100
    for name in ("accuracy", "precision", "recall", "f1"):
        metric = result["metrics"][name]
        low, high = metric["interval"]
        assert 0.0 <= low <= high <= 1.0
    # the noisy estimate is near the model's true accuracy on those rows: its error is about
    # (Z_tp + Z_tn)(1 − acc) − (Z_fp + Z_fn) acc over 400, of standard deviation ≤ 4/400 =
    # 0.01, so |error| < 0.1 is ten deviations of a Laplace-tailed sum (probability < 1e-8)
    true_accuracy = _true_accuracy(client, site, model_id, toy_csv(n=400, seed=7))
    assert abs(result["metrics"]["accuracy"]["estimate"] - true_accuracy) < 0.1
    roc = result["roc"]
    assert len(roc["histogram_positive"]) == roc["bins"]
    # the curve and its AUC are post-processing of the released noisy histograms (a noisy
    # histogram of 400 rows at ε = 1 may put the AUC of this toy model near 0.5)
    fpr, tpr, auc = roc_from_histograms(
        np.array([roc["histogram_positive"], roc["histogram_negative"]])
    )
    assert (roc["fpr"], roc["tpr"]) == (pytest.approx(fpr), pytest.approx(tpr))
    assert roc["auc"] == pytest.approx(auc)
    assert 0.0 <= roc["auc"] <= 1.0
    assert result["epsilon_split"] == {"confusion_matrix": 1.0, "roc_histogram": 1.0}
    assert body["privacy"]["warnings"] == []
    assert body["privacy"]["epsilon"] == 2.0

    listed = client.get(f"/v1/models/{model_id}/evaluations", headers=site.headers)
    assert listed.status_code == 200
    assert [e["id"] for e in listed.json()["items"]] == [job["id"]]


def test_evaluating_on_the_training_set_warns(
    client: TestClient, site: SiteHandle, trained: tuple[str, str, str]
) -> None:
    model_id, train, _ = trained
    dry = client.post(
        f"/v1/models/{model_id}/evaluations?dry_run=true",
        json={"dataset_id": train, "epsilon": 0.1},
        headers=site.headers,
    )
    assert dry.status_code == 200, dry.text
    assert dry.json()["warnings"]
    assert dry.json()["cost"] == {"epsilon": 0.1, "delta": 0.0}
    response = _evaluate(client, site, model_id, {"dataset_id": train, "epsilon": 0.1}, **WAIT)
    assert response.status_code == 201, response.text
    evaluation = client.get(f"/v1/evaluations/{response.json()['id']}", headers=site.headers)
    assert "in-sample" in evaluation.json()["privacy"]["warnings"][0]


def test_a_dry_run_spends_nothing(
    client: TestClient, site: SiteHandle, trained: tuple[str, str, str]
) -> None:
    model_id, _, held_out = trained
    response = client.post(
        f"/v1/models/{model_id}/evaluations?dry_run=true",
        json={"dataset_id": held_out, "epsilon": 0.2},
        headers=site.headers,
    )
    assert response.status_code == 200, response.text
    quote = response.json()
    assert quote["dry_run"] is True
    assert quote["warnings"] == []
    assert quote["budget"]["sufficient"] is True
    assert budget(client, site.headers, held_out)["charges"] == []


def test_an_idempotent_retry_is_charged_once(
    client: TestClient, site: SiteHandle, trained: tuple[str, str, str]
) -> None:
    model_id, _, held_out = trained
    body = {"dataset_id": held_out, "epsilon": 0.3}
    first = _evaluate(client, site, model_id, body, **{"Idempotency-Key": "eval-1"})
    second = _evaluate(client, site, model_id, body, **{"Idempotency-Key": "eval-1"})
    assert first.status_code == second.status_code == 202
    assert first.json()["id"] == second.json()["id"]
    assert second.headers["Idempotent-Replayed"] == "true"
    assert len(budget(client, site.headers, held_out)["charges"]) == 1
    other = _evaluate(
        client, site, model_id, {**body, "epsilon": 0.4}, **{"Idempotency-Key": "eval-1"}
    )
    assert other.status_code == 422


def _refused(
    client: TestClient,
    site: SiteHandle,
    model_id: str,
    dataset_id: str,
    body: dict[str, Any],
    status: int = 422,
) -> None:
    before = budget(client, site.headers, dataset_id)
    jobs_before = client.get("/v1/jobs", headers=site.headers).json()["total"]
    response = _evaluate(client, site, model_id, body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert budget(client, site.headers, dataset_id) == before
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == jobs_before


def test_a_dataset_with_another_spec_is_422_and_charges_nothing(
    client: TestClient, site: SiteHandle, trained: tuple[str, str, str]
) -> None:
    model_id, _, _ = trained
    spec = toy_spec()
    spec["features"][0] = {"column": "x1", "type": "numeric", "lower": -5, "upper": 5}
    other = upload(client, site.headers, spec=spec)
    _refused(client, site, model_id, other["id"], {"dataset_id": other["id"], "epsilon": 0.5})
    spec = toy_spec()
    spec["label"] = {"column": "y", "positive": "no"}
    flipped = upload(client, site.headers, spec=spec)
    _refused(client, site, model_id, flipped["id"], {"dataset_id": flipped["id"], "epsilon": 0.5})


@pytest.mark.parametrize("epsilon", [0, -1, 1e9, "x", None])
def test_a_bad_epsilon_is_422(
    client: TestClient, site: SiteHandle, trained: tuple[str, str, str], epsilon: Any
) -> None:
    model_id, _, held_out = trained
    _refused(client, site, model_id, held_out, {"dataset_id": held_out, "epsilon": epsilon})


def test_an_exhausted_budget_is_409(
    client: TestClient, site: SiteHandle, trained: tuple[str, str, str]
) -> None:
    model_id, _, held_out = trained
    _refused(client, site, model_id, held_out, {"dataset_id": held_out, "epsilon": 6.0}, status=409)


def test_other_sites_datasets_models_and_evaluations_are_404(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    trained: tuple[str, str, str],
) -> None:
    model_id, _, held_out = trained
    other = make_site("other")
    theirs = upload(client, other.headers)
    # their dataset with my model; my dataset with their access to my model
    assert (
        _evaluate(client, site, model_id, {"dataset_id": theirs["id"], "epsilon": 0.1}).status_code
        == 404
    )
    assert (
        _evaluate(client, other, model_id, {"dataset_id": theirs["id"], "epsilon": 0.1}).status_code
        == 404
    )
    assert budget(client, other.headers, theirs["id"])["charges"] == []
    done = _evaluate(client, site, model_id, {"dataset_id": held_out, "epsilon": 0.1}, **WAIT)
    assert (
        client.get(f"/v1/evaluations/{done.json()['id']}", headers=other.headers).status_code == 404
    )
    assert client.get("/v1/evaluations/not-an-id", headers=site.headers).status_code == 404
    assert (
        client.get(f"/v1/models/{model_id}/evaluations", headers=other.headers).status_code == 404
    )
