"""``POST /v1/models/{id}/evaluations`` for multi-class and numeric labels (issue 29), on SQLite
and PostgreSQL.

A model of the dataset's label is stored as a fit stores it (the multi-class and regression fits
are built by their own change; here the weights are chosen, so the test does not depend on a
mechanism): a regression model is the least-squares fit of the mapped label, a multi-class model
scores the grade from the age. Each evaluation is charged on the evaluated dataset, recorded and
near the truth computed from the same design; each refusal is a 422 problem with nothing charged.
The whole path is also run with DP fits (objective perturbation for classes, AdaSSP for numbers).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from service.db.models import Model, new_id
from service.db.uow import UnitOfWorkFactory
from service.domain.datasets.catalog import load_design
from service.dp.core.released import model_from_dict
from tests.api.test_datasets import assert_problem
from tests.api.test_label_tasks import CLASSES, MULTICLASS, NUMERIC, csv_bytes, make_rows, uploaded
from tests.conftest import SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

WAIT = {"Prefer": "wait=30"}
N = 3000
BUDGET = {"epsilon": 4.0, "delta": 1e-6}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def _dataset(client: TestClient, site: SiteHandle, label: dict[str, Any], seed: int = 3) -> str:
    body = uploaded(client, site, label, data=csv_bytes(make_rows(N, seed=seed)), budget=BUDGET)
    return str(body["id"])


def _store_model(
    uow_factory: UnitOfWorkFactory, owner: str, dataset_id: str, body: dict[str, Any]
) -> str:
    """A model row as a fit on ``dataset_id`` stores it, with the given released form."""
    with uow_factory() as uow:
        dataset = uow.datasets.get(dataset_id)
        assert dataset is not None
        model = uow.models.add(
            Model(
                id=new_id(),
                owner_site_id=owner,
                dataset_id=dataset_id,
                source="fit",
                mechanism="non_private",
                loss="squared" if body["kind"] == "linear" else "logistic",
                feature_names=list(dataset.feature_names),
                preprocessing=dict(dataset.preprocessing),
                body=body,
                label=dict(dataset.spec["label"]),
                privacy={"kind": "fit", "verified": True, "guarantee": "none", "software": {}},
            )
        )
        uow.commit()
        return model.id


def _evaluate(
    client: TestClient, site: SiteHandle, model_id: str, dataset_id: str, epsilon: float, **kw: Any
) -> Any:
    return client.post(
        f"/v1/models/{model_id}/evaluations",
        json={"dataset_id": dataset_id, "epsilon": epsilon},
        headers={**site.headers, **kw.get("headers", {})},
        params=kw.get("params"),
    )


def _released(client: TestClient, site: SiteHandle, model_id: str, dataset_id: str) -> Any:
    response = _evaluate(client, site, model_id, dataset_id, 2.0, headers=WAIT)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    assert job["charges"] == [
        {"dataset_id": dataset_id, "epsilon": 2.0, "delta": 0.0, "state": "charged"}
    ]
    spent = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    assert spent["epsilon_spent"] == pytest.approx(2.0)
    evaluation = client.get(f"/v1/evaluations/{job['id']}", headers=site.headers)
    assert evaluation.status_code == 200, evaluation.text
    body = evaluation.json()
    assert body["privacy"]["epsilon"] == 2.0
    assert body["privacy"]["delta"] == 0.0
    return body


def test_a_regression_model_is_evaluated_in_the_labels_units(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    train = _dataset(client, site, NUMERIC)
    held_out = _dataset(client, site, NUMERIC, seed=11)
    X, y = load_design(uow_factory, train)
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    model_id = _store_model(
        uow_factory, site.id, train, {"kind": "linear", "coef": [float(v) for v in coef]}
    )
    quote = _evaluate(client, site, model_id, held_out, 2.0, params={"dry_run": "true"})
    assert quote.status_code == 200, quote.text
    assert quote.json()["epsilon_split"]["squared_residuals"] == pytest.approx(0.4)
    assert sum(quote.json()["epsilon_split"].values()) == pytest.approx(2.0)

    body = _released(client, site, model_id, held_out)
    result = body["result"]
    assert result["task"] == "regression"
    assert result["n"] == N
    assert result["label_bounds"] == {"lower": 0.0, "upper": 40.0}
    assert body["privacy"]["epsilon_split"]["squared_residuals"] == pytest.approx(0.4)
    assert body["privacy"]["warnings"] == []
    # the truth on the held-out rows, in hours (the bounds [0, 40]: 20 hours per mapped unit)
    X_test, y_test = load_design(uow_factory, held_out)
    r = np.clip(X_test @ coef, -1, 1) - y_test
    truth = {
        "rmse": 20 * math.sqrt(float(np.mean(r**2))),
        "mae": 20 * float(np.mean(np.abs(r))),
        "r2": 1 - float(np.mean(r**2) / np.var(y_test)),
    }
    # noise on the mean of a term: Laplace of scale Δ/(ε/5)/n (Σ|r|: 2/0.4/3000 = 0.0017,
    # × 20 hours); ten scales bound |error| but with probability e⁻¹⁰
    assert abs(result["metrics"]["mae"]["estimate"] - truth["mae"]) < 10 * 20 * 2 / 0.4 / N
    for name in ("rmse", "mae", "r2"):
        low, high = result["metrics"][name]["interval"]
        assert low <= result["metrics"][name]["estimate"] <= high, name
    # R²'s error is mostly Σr²'s noise over n·V_y (scale 4/0.4/3000 over V_y ≈ 0.27: 0.012)
    assert result["metrics"]["r2"]["estimate"] == pytest.approx(truth["r2"], abs=0.15)
    assert result["noise"]["scale"]["squared_residuals"] == pytest.approx(4 / 0.4)


def test_a_multiclass_model_is_evaluated_by_class(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    dataset = _dataset(client, site, MULTICLASS)
    X, y = load_design(uow_factory, dataset)
    k, d = len(CLASSES), X.shape[1]
    # class scores from a least-squares one-hot fit: a good, not perfect, classifier
    onehot = np.eye(k)[y.astype(int)]
    coef = np.linalg.lstsq(X, onehot, rcond=None)[0].T
    assert coef.shape == (k, d)
    model_id = _store_model(
        uow_factory,
        site.id,
        dataset,
        {"kind": "multiclass", "coef": [[float(v) for v in row] for row in coef]},
    )
    body = _released(client, site, model_id, dataset)
    result = body["result"]
    assert result["task"] == "multiclass"
    assert result["classes"] == CLASSES
    counts = np.array(result["confusion_matrix"]["counts"])
    assert counts.shape == (k, k)
    truth = np.zeros((k, k), dtype=int)
    np.add.at(truth, (y.astype(int), np.argmax(X @ coef.T, axis=1)), 1)
    # ε = 2: scale 1 per cell; 9 cells within 12 of the truth but with probability ~1e-4
    assert np.abs(counts - truth).max() <= 12
    accuracy = np.trace(truth) / N
    assert result["metrics"]["accuracy"]["estimate"] == pytest.approx(accuracy, abs=0.01)
    assert [c["class"] for c in result["per_class"]] == CLASSES
    assert result["epsilon_split"] == {"confusion_matrix": 2.0}
    assert body["privacy"]["warnings"]  # evaluated on its own training set: in-sample


def _nothing_spent(client: TestClient, site: SiteHandle, engine: Engine, dataset_id: str) -> None:
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    assert budget["charges"] == []
    with engine.connect() as connection:
        count = connection.execute(text("SELECT COUNT(*) FROM job WHERE kind = 'evaluate'"))
        assert count.scalar_one() == 0


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_model_of_another_task_or_label_is_refused_with_nothing_charged(
    client: TestClient,
    site: SiteHandle,
    uow_factory: UnitOfWorkFactory,
    engine: Engine,
    dry_run: bool,
) -> None:
    numeric = _dataset(client, site, NUMERIC)
    classes = _dataset(client, site, MULTICLASS)
    params = {"dry_run": "true"} if dry_run else None
    # a regression model on a multi-class dataset: the labels differ
    regression_model = _store_model(
        uow_factory, site.id, numeric, {"kind": "linear", "coef": [0.1] * 5}
    )
    response = _evaluate(client, site, regression_model, classes, 0.5, params=params)
    problem = assert_problem(response, 422, "invalid-input")
    assert "spec differs" in problem["detail"]
    # a model whose released form does not predict its own label's task (a single score
    # for a multi-class label; K rows for a numeric one)
    wrong_kind = _store_model(uow_factory, site.id, classes, {"kind": "linear", "coef": [0.1] * 5})
    response = _evaluate(client, site, wrong_kind, classes, 0.5, params=params)
    problem = assert_problem(response, 422, "invalid-input")
    assert "does not predict a multi-class label" in problem["detail"]
    wrong_rows = _store_model(
        uow_factory, site.id, numeric, {"kind": "multiclass", "coef": [[0.1] * 5] * 3}
    )
    response = _evaluate(client, site, wrong_rows, numeric, 0.5, params=params)
    assert (
        "does not predict a numeric label"
        in assert_problem(response, 422, "invalid-input")["detail"]
    )
    _nothing_spent(client, site, engine, numeric)
    _nothing_spent(client, site, engine, classes)


@pytest.mark.parametrize(
    ("label", "mechanism"), [(MULTICLASS, "objective_perturbation"), (NUMERIC, "adassp")]
)
def test_a_private_fit_is_evaluated_on_held_out_rows(
    client: TestClient,
    site: SiteHandle,
    uow_factory: UnitOfWorkFactory,
    label: dict[str, Any],
    mechanism: str,
) -> None:
    """The whole path: a DP fit of the task on one dataset, its private evaluation on another
    of the same spec, near the model's true accuracy / MAE on those rows."""
    train = _dataset(client, site, label)
    held_out = _dataset(client, site, label, seed=11)
    fit = client.post(
        f"/v1/datasets/{train}/fits",
        json={"mechanism": mechanism, "epsilon": 1.0, "delta": 1e-6, "regularization": 0.05},
        headers={**site.headers, **WAIT},
    )
    assert fit.status_code == 201, fit.text
    assert fit.json()["status"] == "succeeded", fit.json()
    model_id = fit.json()["model_id"]
    result = _released(client, site, model_id, held_out)["result"]
    with uow_factory() as uow:
        row = uow.models.get(model_id)
        assert row is not None
        fitted = model_from_dict(dict(row.body))
    X, y = load_design(uow_factory, held_out)
    scores = np.asarray(fitted.decision_function(X))
    if label is MULTICLASS:
        assert result["task"] == "multiclass"
        accuracy = float(np.mean(np.argmax(scores, axis=1) == y))
        # nine cells of scale 1 move the accuracy by a few counts in 3000
        assert result["metrics"]["accuracy"]["estimate"] == pytest.approx(accuracy, abs=0.01)
    else:
        assert result["task"] == "regression"
        mae = 20 * float(np.mean(np.abs(np.clip(scores, -1, 1) - y)))
        assert abs(result["metrics"]["mae"]["estimate"] - mae) < 10 * 20 * 2 / 0.4 / N
