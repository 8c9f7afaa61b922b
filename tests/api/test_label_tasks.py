"""Multi-class and numeric labels through the data path (issue 29), on SQLite and PostgreSQL.

* A label spec declares ``classes`` (3 or more; two are the binary form) or public bounds
  ``lower``/``upper``: the upload stores class indices or the numbers clipped to the bounds
  (counted in the ingest report), and the design read back holds the DP core's encoding (the
  class index; 2(v − L)/(U − L) − 1), checked against hand-computed values.
* Every refusal is a 422 problem that stores nothing, charges nothing and shows no data value:
  a row of no declared class, a non-numeric or non-finite numeric label, a mixture of label
  forms (the field is named), a mechanism that does not fit the task. The operations built for
  these tasks are tested beside them (evaluations in tests/api/test_evaluation_tasks.py,
  exports in tests/e2e/test_task_exports.py, auto, λ "auto", tuning and the planner in
  tests/api/test_task_auto.py and test_task_tuning.py, studies in tests/api/test_study_tasks.py).
* End to end with ``non_private`` (upload, fit, GET the model, predict) on each task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import httpx2 as httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from service.db.models import Model, new_id
from service.db.uow import UnitOfWorkFactory
from service.domain.datasets.catalog import load_design
from service.dp import MECHANISMS
from tests.api._studies import N_WEIGHTS, create_study, upload_model
from tests.api.test_datasets import assert_nothing_stored, assert_problem
from tests.api.test_datasets import upload as upload_file
from tests.conftest import MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CLASSES = ["low", "mid", "high"]
LOWER, UPPER = 0.0, 40.0
SECRET = "SECRET-5150"
FEATURES: list[dict[str, Any]] = [
    {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
    {"column": "color", "type": "categorical", "categories": ["red", "green", "blue"]},
]
HEADER = "patient,age,color,grade,hours"


def make_rows(n: int = 90, seed: int = 3) -> list[tuple[str, int, str, str, float]]:
    """(patient, age, color, grade, hours): the grade and the hours follow the age."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        age = int(rng.integers(18, 91))
        color = ("red", "green", "blue")[i % 3]
        grade = CLASSES[min(2, (age - 18) * 3 // 73)]
        hours = round(float(np.clip((age - 18) / 2 + rng.normal(0, 2), 0, 36)), 3)
        rows.append((f"p{i}", age, color, grade, hours))
    return rows


ROWS = make_rows()


def csv_bytes(rows: list[tuple[Any, ...]] = ROWS) -> bytes:
    return ("\n".join([HEADER, *(",".join(map(str, r)) for r in rows)]) + "\n").encode()


def dataset_spec(label: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "tasks",
        "label": dict(label),
        "features": FEATURES,
        "budget": {"epsilon": 2.0, "delta": 1e-6},
    }
    spec.update(overrides)
    return spec


MULTICLASS = {"column": "grade", "classes": CLASSES}
NUMERIC = {"column": "hours", "lower": LOWER, "upper": UPPER}


def upload(
    client: TestClient,
    site: SiteHandle,
    label: Mapping[str, Any],
    data: bytes | None = None,
    **overrides: Any,
) -> httpx.Response:
    return upload_file(client, site, data or csv_bytes(), dataset_spec(label, **overrides))


def uploaded(
    client: TestClient, site: SiteHandle, label: Mapping[str, Any], **overrides: Any
) -> dict[str, Any]:
    response = upload(client, site, label, **overrides)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


# ---- uploads -------------------------------------------------------------------------------


def test_a_multiclass_label_is_stored_as_class_indices(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    body = uploaded(client, site, MULTICLASS)
    assert body["task"] == "multiclass"
    assert body["spec"]["label"] == {"column": "grade", "classes": CLASSES}
    assert "label_clipped_rows" not in body["ingest"]
    again = client.get(f"/v1/datasets/{body['id']}", headers=site.headers).json()
    assert again["task"] == "multiclass"
    assert again["spec"]["label"] == body["spec"]["label"]
    _, y = load_design(uow_factory, body["id"])
    assert y.tolist() == [float(CLASSES.index(r[3])) for r in ROWS]


def test_a_numeric_label_is_clipped_to_its_bounds_counted_and_mapped_onto_the_unit_interval(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    rows = [*ROWS[:-2], (*ROWS[-2][:4], -5.0), (*ROWS[-1][:4], 41.5)]
    body = uploaded(client, site, NUMERIC, data=csv_bytes(rows))
    assert body["task"] == "regression"
    assert body["spec"]["label"] == {"column": "hours", "lower": LOWER, "upper": UPPER}
    assert body["ingest"]["label_clipped_rows"] == 2
    _, y = load_design(uow_factory, body["id"])
    values = np.array([min(max(float(r[4]), LOWER), UPPER) for r in rows])
    assert np.array_equal(y, 2.0 * ((values - LOWER) / (UPPER - LOWER)) - 1.0)
    assert (y[-2], y[-1]) == (-1.0, 1.0)
    assert float(np.max(np.abs(y))) <= 1.0


def test_two_classes_are_the_binary_form_negative_first(
    client: TestClient, site: SiteHandle, uow_factory: UnitOfWorkFactory
) -> None:
    rows = [
        (p, age, color, "mid" if grade == "mid" else "low", h) for p, age, color, grade, h in ROWS
    ]
    response = upload(client, site, {"column": "grade", "classes": ["low", "mid"]}, csv_bytes(rows))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["task"] == "binary"
    assert body["spec"]["label"] == {"column": "grade", "positive": "mid", "negative": "low"}
    _, y = load_design(uow_factory, body["id"])
    assert y.tolist() == [1.0 if r[3] == "mid" else -1.0 for r in rows]


def test_a_row_of_no_declared_class_is_refused_counting_rows_not_values(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    rows = [*ROWS[:-2], (*ROWS[-2][:3], SECRET, 1.0), (*ROWS[-1][:3], SECRET, 1.0)]
    response = upload(client, site, MULTICLASS, csv_bytes(rows))
    body = assert_problem(response, 422, "invalid-label-values")
    assert body["label_rows"] == 2
    assert "3 declared classes" in body["detail"]
    assert SECRET not in response.text
    assert_nothing_stored(client, site, engine)


@pytest.mark.parametrize("cell", [SECRET, "nan", "inf"])
def test_a_numeric_label_that_is_not_a_finite_number_is_refused(
    client: TestClient, site: SiteHandle, engine: Engine, cell: str
) -> None:
    rows = [*ROWS[:-1], (*ROWS[-1][:4], cell)]
    response = upload(client, site, NUMERIC, csv_bytes(rows))
    body = assert_problem(response, 422, "invalid-dataset-file")
    assert "hours" in body["detail"]
    assert SECRET not in response.text
    assert_nothing_stored(client, site, engine)


@pytest.mark.parametrize(
    ("label", "field"),
    [
        ({**MULTICLASS, "positive": "high"}, "positive"),
        ({**MULTICLASS, "negative": "low"}, "negative"),
        ({**MULTICLASS, "lower": 0}, "lower"),
        ({**NUMERIC, "classes": CLASSES}, "lower"),
        ({**NUMERIC, "positive": "yes"}, "positive"),
        ({**NUMERIC, "negative": "no"}, "negative"),
        ({"column": "hours", "lower": 0}, "upper"),
        ({"column": "hours", "upper": 3}, "lower"),
        ({"column": "hours", "lower": 5, "upper": 5}, "upper"),
        ({"column": "grade", "classes": ["low"]}, "classes"),
        ({"column": "grade", "classes": ["low", "mid", "low"]}, "classes"),
        ({"column": "grade", "classes": [str(i) for i in range(101)]}, "classes"),
        ({"column": "grade", "classes": ["low", "mid", "NA"]}, "classes"),
        ({"column": "grade"}, "label"),
    ],
)
def test_a_mixed_or_invalid_label_form_is_a_422_naming_the_field(
    client: TestClient, site: SiteHandle, engine: Engine, label: dict[str, Any], field: str
) -> None:
    body = assert_problem(upload(client, site, label), 422, "invalid-dataset-spec")
    locs = [e["loc"] for e in body["errors"]]
    assert ["spec", "label", field] in locs or (field == "label" and ["spec", "label"] in locs), (
        locs
    )
    assert_nothing_stored(client, site, engine)


def test_a_positive_fraction_belongs_to_a_binary_label(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    body = assert_problem(
        upload(client, site, MULTICLASS, positive_fraction=0.3), 422, "invalid-dataset-spec"
    )
    assert [e["loc"] for e in body["errors"]] == [["spec", "positive_fraction"]]
    assert_nothing_stored(client, site, engine)


# ---- fits ----------------------------------------------------------------------------------


def _fit(
    client: TestClient,
    site: SiteHandle,
    dataset_id: str,
    body: dict[str, Any],
    *,
    dry_run: bool = False,
) -> httpx.Response:
    return client.post(
        f"/v1/datasets/{dataset_id}/fits",
        params={"dry_run": "true"} if dry_run else None,
        json=body,
        headers={**site.headers, "Prefer": "wait=30"},
    )


def _nothing_charged(client: TestClient, site: SiteHandle, engine: Engine, dataset_id: str) -> None:
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == 0.0
    assert budget["charges"] == []
    with engine.connect() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM job")).scalar_one() == 0
        assert connection.execute(text("SELECT COUNT(*) FROM ledger_charge")).scalar_one() == 0


@pytest.mark.parametrize(
    ("label", "mechanism", "task"),
    [
        (MULTICLASS, "gaussian_objective_perturbation", "multiclass"),
        (NUMERIC, "dp_sgd", "regression"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_mechanism_that_does_not_fit_the_task_is_a_422_with_nothing_charged(
    client: TestClient,
    site: SiteHandle,
    engine: Engine,
    label: dict[str, Any],
    mechanism: str,
    task: str,
    dry_run: bool,
) -> None:
    dataset = uploaded(client, site, label)
    body = {"mechanism": mechanism, "epsilon": 1.0, "delta": 1e-7, "regularization": 0.01}
    problem = assert_problem(
        _fit(client, site, dataset["id"], body, dry_run=dry_run), 422, "invalid-input"
    )
    assert f"does not fit {task} labels" in problem["detail"]
    _nothing_charged(client, site, engine, dataset["id"])


def test_a_numeric_label_refuses_a_class_loss(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    dataset = uploaded(client, site, NUMERIC, allow_non_private=True)
    body = {"mechanism": "non_private", "loss": "logistic", "regularization": 0.01}
    problem = assert_problem(_fit(client, site, dataset["id"], body), 422, "invalid-input")
    assert "regression" in problem["detail"]
    _nothing_charged(client, site, engine, dataset["id"])


# ---- end to end with non_private ----------------------------------------------------------


def _model_of(client: TestClient, site: SiteHandle, dataset_id: str) -> dict[str, Any]:
    body = {"mechanism": "non_private", "regularization": 0.01}
    response = _fit(client, site, dataset_id, body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers)
    assert model.status_code == 200, model.text
    out: dict[str, Any] = model.json()
    listed = client.get("/v1/models", headers=site.headers).json()["items"]
    assert [m["task"] for m in listed if m["id"] == out["id"]] == [out["task"]]
    return out


def _predict(client: TestClient, site: SiteHandle, model_id: str) -> list[dict[str, Any]]:
    rows = [{"age": r[1], "color": r[2]} for r in ROWS]
    response = client.post(
        f"/v1/models/{model_id}/predict", json={"rows": rows}, headers=site.headers
    )
    assert response.status_code == 200, response.text
    out: list[dict[str, Any]] = response.json()["predictions"]
    return out


def test_a_multiclass_fit_predicts_a_declared_class_with_its_scores_and_softmax(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, MULTICLASS, allow_non_private=True)
    model = _model_of(client, site, dataset["id"])
    assert model["task"] == "multiclass"
    assert model["label"]["classes"] == CLASSES
    assert model["loss"] == "logistic"
    predictions = _predict(client, site, model["id"])
    right = 0
    for p, row in zip(predictions, ROWS, strict=True):
        assert set(p) == {
            "positive",
            "score",
            "probability",
            "predicted_class",
            "scores",
            "probabilities",
        }
        assert len(p["scores"]) == len(p["probabilities"]) == len(CLASSES)
        assert math.isclose(sum(p["probabilities"]), 1.0, rel_tol=1e-12)
        assert p["predicted_class"] == CLASSES[int(np.argmax(p["scores"]))]
        right += p["predicted_class"] == row[3]
    assert right / len(ROWS) > 0.5  # the grade is a function of the age


def test_a_regression_fit_predicts_numbers_within_the_bounds(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, NUMERIC, allow_non_private=True)
    model = _model_of(client, site, dataset["id"])
    assert model["task"] == "regression"
    assert model["label"] == {"column": "hours", "lower": LOWER, "upper": UPPER}
    assert model["loss"] == "squared"
    predictions = _predict(client, site, model["id"])
    for p in predictions:
        assert LOWER <= p["value"] <= UPPER
        expected = LOWER + (min(max(p["score"], -1.0), 1.0) + 1.0) / 2.0 * (UPPER - LOWER)
        assert math.isclose(p["value"], expected, rel_tol=1e-12, abs_tol=1e-12)
    truth = np.array([r[4] for r in ROWS])
    rmse = float(np.sqrt(np.mean((np.array([p["value"] for p in predictions]) - truth) ** 2)))
    assert rmse < float(np.std(truth))  # better than predicting the mean


# ---- a label that is not the model's or the study's: a clear 422 --------------------------


def test_evaluating_a_binary_model_on_a_numeric_label_is_refused_with_nothing_charged(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    """Private evaluation takes these tasks (tests/api/test_evaluation_tasks.py), on a dataset
    whose label is the model's: a binary model's label is not the numeric one."""
    dataset = uploaded(client, site, NUMERIC)
    model = upload_model(client, site, [0.5] * N_WEIGHTS, features=FEATURES)
    for dry_run in (True, False):
        response = client.post(
            f"/v1/models/{model['id']}/evaluations",
            params={"dry_run": "true"} if dry_run else None,
            json={"dataset_id": dataset["id"], "epsilon": 0.5},
            headers=site.headers,
        )
        problem = assert_problem(response, 422, "invalid-input")
        assert "spec differs" in problem["detail"]
    _nothing_charged(client, site, engine, dataset["id"])


def _stored_model(uow_factory: UnitOfWorkFactory, owner: str, label: dict[str, Any]) -> str:
    """A model row with a multi-class label, as a multi-class fit stores it."""
    with uow_factory() as uow:
        model = uow.models.add(
            Model(
                id=new_id(),
                owner_site_id=owner,
                source="fit",
                mechanism="non_private",
                loss="logistic",
                feature_names=["age", "color=red", "color=green", "color=blue", "intercept"],
                preprocessing={},
                body={"kind": "multiclass", "coef": [[0.0] * N_WEIGHTS] * len(CLASSES)},
                label=label,
                privacy={"kind": "fit", "verified": True, "guarantee": "none", "software": {}},
            )
        )
        uow.commit()
        return model.id


def test_a_binary_study_refuses_a_multiclass_dataset_or_model_naming_the_label_task(
    client: TestClient, site: SiteHandle, make_site: MakeSite, uow_factory: UnitOfWorkFactory
) -> None:
    member = make_site()
    study = create_study(client, site, [member])
    dataset = uploaded(client, member, MULTICLASS)
    grant = {"dataset_id": dataset["id"], "epsilon_cap": 1.0, "delta_cap": 0.0}
    response = client.post(
        f"/v1/studies/{study['id']}/contributions", json=grant, headers=member.headers
    )
    assert "label task" in assert_problem(response, 422, "invalid-input")["detail"]
    model_id = _stored_model(uow_factory, member.id, MULTICLASS)
    response = client.post(
        f"/v1/studies/{study['id']}/contributions",
        json={"model_id": model_id},
        headers=member.headers,
    )
    assert "label task" in assert_problem(response, 422, "invalid-input")["detail"]
    assert (
        client.get(f"/v1/studies/{study['id']}", headers=site.headers).json()["contributions"] == []
    )


# ---- every private mechanism that fits the task, through HTTP ------------------------------


def _private(task: str) -> list[str]:
    return sorted(
        name
        for name, mechanism in MECHANISMS.items()
        if mechanism.capabilities.private and task in mechanism.capabilities.tasks
    )


def _private_fit(
    client: TestClient,
    site: SiteHandle,
    label: Mapping[str, Any],
    mechanism: str,
    loss: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Quote, then fit ``mechanism`` at (ε, δ) = (1, 1e-6): the job succeeds and the ledger
    holds exactly the quoted cost; the model and the dataset's budget."""
    dataset = uploaded(client, site, label)
    body: dict[str, Any] = {
        "mechanism": mechanism,
        "epsilon": 1.0,
        "delta": 1e-6,
        "regularization": 0.05,
    }
    if loss is not None:
        body["loss"] = loss
    quote = _fit(client, site, dataset["id"], body, dry_run=True)
    assert quote.status_code == 200, quote.text
    response = _fit(client, site, dataset["id"], body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == quote.json()["cost"]["epsilon"] > 0
    assert budget["delta_spent"] == quote.json()["cost"]["delta"]
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    assert model["privacy"]["calibration"]["task"] == model["task"]
    return model, budget


@pytest.mark.parametrize("mechanism", _private("multiclass"))
def test_a_private_multiclass_fit_is_charged_as_quoted_and_predicts_declared_classes(
    client: TestClient, site: SiteHandle, mechanism: str
) -> None:
    model, _ = _private_fit(client, site, MULTICLASS, mechanism)
    assert model["task"] == "multiclass"
    assert model["privacy"]["calibration"]["n_classes"] == len(CLASSES)
    for p in _predict(client, site, model["id"]):
        assert p["predicted_class"] in CLASSES
        assert math.isclose(sum(p["probabilities"]), 1.0, rel_tol=1e-12)


@pytest.mark.parametrize("mechanism", _private("regression"))
def test_a_private_regression_fit_is_charged_as_quoted_and_predicts_within_the_bounds(
    client: TestClient, site: SiteHandle, mechanism: str
) -> None:
    # the squared loss has no bounded derivative: only AdaSSP fits it, the others fit Huber
    model, _ = _private_fit(
        client, site, NUMERIC, mechanism, None if mechanism == "adassp" else "huber"
    )
    assert model["task"] == "regression"
    assert model["label"] == {"column": "hours", "lower": LOWER, "upper": UPPER}
    assert all(LOWER <= p["value"] <= UPPER for p in _predict(client, site, model["id"]))
