"""Models over HTTP: read, predict, export and upload (issue 4 item 4, docs/design.md §2 and §5).

What is checked, on a small synthetic dataset fitted through the API:

* ``GET /v1/models/{id}``: the coefficients by encoded feature name (the dataset's), the public
  preprocessing spec, and a privacy record naming the mechanism, ε, δ, the dataset and the unit
  protected, the calibration (equal to the dry run's), the composition, the noise source (a test
  seed only when the server runs in test mode with a seed, the CSPRNG otherwise, and the record
  tells the truth: seeded fits repeat, CSPRNG fits do not) and the software version. A
  ``non_private`` fit's record says there is no DP.
* ``POST /v1/models/{id}/predict``: each score equals the coefficients dotted with the row as
  this test preprocesses it itself (``service.dp.data.preprocessing`` built from the declared spec);
  a probability only for the logistic loss; a bad row is a 422 naming row and column that quotes
  no value.
* ``GET /v1/models/{id}/export``: self-contained JSON that the README's scikit-learn code (run
  here verbatim) turns into a ``LogisticRegression`` scoring like PrivFit to 1e-9.
* ``POST /v1/models``: a site's own classifier with a declared claim, shown as unverified;
  wrong weight counts and bad specs are 422s that store nothing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from numpy.typing import NDArray
from pydantic import SecretStr

from service.api.schemas.problem import PROBLEM_MEDIA_TYPE, PROBLEM_TYPE_BASE
from service.domain.models import export as export_module
from service.domain.randomness import Randomness
from service.dp.data.preprocessing import CategoricalFeature, NumericFeature, PreprocessingSpec
from service.settings import Settings
from tests.conftest import ADMIN_KEY, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


README = Path(__file__).resolve().parents[2] / "README.md"
DATASET_NAME = "clinic-a"
COLORS = ("red", "green", "blue")
N_ROWS = 300
FEATURE_NAMES = ["age", "color=red", "color=green", "color=blue", "income", "intercept"]
LABEL = {"column": "outcome", "positive": "yes"}
FEATURES: list[dict[str, Any]] = [
    {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
    {"column": "color", "type": "categorical", "categories": list(COLORS)},
    {"column": "income", "type": "numeric", "lower": 0, "upper": 1000},
]
TEST_SEED = 1234
TERMINAL = {"succeeded", "failed", "cancelled"}


def transform(row_norm: str = "clip") -> PreprocessingSpec:
    """The declared preprocessing, built here from the spec above (not read from the API)."""
    return PreprocessingSpec(
        features=(
            NumericFeature(column="age", lower=18.0, upper=90.0),
            CategoricalFeature(column="color", categories=COLORS),
            NumericFeature(column="income", lower=0.0, upper=1000.0),
        ),
        intercept=True,
        row_norm="scale" if row_norm == "scale" else "clip",
    )


def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Raw rows: a patient id and the label (never read by predict), two numbers, a colour."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        age = int(rng.integers(10, 100))  # some below 18 and above 90: clamped
        income = round(float(rng.uniform(-100, 1200)), 3)  # some outside [0, 1000]
        color = COLORS[int(rng.integers(0, 3))]
        logit = 4 * (age - 50) / 40 + 2 * (income - 500) / 500 + (1.5 if color == "red" else 0)
        outcome = "yes" if rng.random() < 1 / (1 + math.exp(-logit)) else "no"
        rows.append(
            {"patient": f"p{i}", "age": age, "color": color, "income": income, "outcome": outcome}
        )
    return rows


def csv_of(rows: Sequence[Mapping[str, Any]]) -> bytes:
    header = ["patient", "age", "color", "income", "outcome"]
    lines = [",".join(header)] + [",".join(str(r[c]) for c in header) for r in rows]
    return ("\n".join(lines) + "\n").encode()


def columns_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, NDArray[Any]]:
    return {
        "age": np.array([float(r["age"]) for r in rows]),
        "color": np.array([str(r["color"]) for r in rows]),
        "income": np.array([float(r["income"]) for r in rows]),
    }


def expected_scores(coef: Sequence[float], rows: Sequence[Mapping[str, Any]], row_norm: str) -> Any:
    X = transform(row_norm).transform(columns_of(rows))
    return X @ np.asarray(coef, dtype=np.float64)


def upload(
    client: TestClient, site: SiteHandle, *, row_norm: str = "clip", allow_non_private: bool = False
) -> dict[str, Any]:
    spec = {
        "name": DATASET_NAME,
        "label": LABEL,
        "features": FEATURES,
        "budget": {"epsilon": 8.0, "delta": 1e-5},
        "allow_non_private": allow_non_private,
        "row_norm": row_norm,
    }
    response = client.post(
        "/v1/datasets",
        files={
            "file": ("clinic.csv", csv_of(make_rows(N_ROWS, seed=7)), "text/csv"),
            "spec": (None, json.dumps(spec)),
        },
        headers=site.headers,
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def fit_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "mechanism": "objective_perturbation",
        "epsilon": 1.0,
        "delta": 0.0,
        "loss": "logistic",
        "regularization": 0.01,
    }
    body.update(overrides)
    return body


def run_fit(
    client: TestClient, site: SiteHandle, dataset_id: str, **overrides: Any
) -> dict[str, Any]:
    """POST a fit and wait for its job with one long poll (30 s); returns the final job."""
    response = client.post(
        f"/v1/datasets/{dataset_id}/fits", json=fit_body(**overrides), headers=site.headers
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    waited = client.get(f"/v1/jobs/{job_id}", params={"wait": 30}, headers=site.headers)
    job: dict[str, Any] = waited.json()
    assert job["status"] in TERMINAL, f"job still {job['status']} after 30 s"
    return job


def fitted_model(
    client: TestClient,
    site: SiteHandle,
    dataset: Mapping[str, Any],
    **overrides: Any,
) -> dict[str, Any]:
    job = run_fit(client, site, dataset["id"], **overrides)
    assert job["status"] == "succeeded", job
    response = client.get(f"/v1/models/{job['model_id']}", headers=site.headers)
    assert response.status_code == 200, response.text
    model: dict[str, Any] = response.json()
    assert model["job_id"] == job["id"]
    return model


def coef_of(model: Mapping[str, Any]) -> list[float]:
    return [c["weight"] for c in model["coefficients"]]


def predict(
    client: TestClient, site: SiteHandle, model_id: str, rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    response = client.post(
        f"/v1/models/{model_id}/predict", json={"rows": list(rows)}, headers=site.headers
    )
    assert response.status_code == 200, response.text
    predictions: list[dict[str, Any]] = response.json()["predictions"]
    assert len(predictions) == len(rows)
    return predictions


def readme_sklearn_code() -> dict[str, Any]:
    """Execute the README's scikit-learn conversion block and return its namespace."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    (code,) = [b for b in blocks if "def to_sklearn" in b]
    namespace: dict[str, Any] = {"__name__": "readme_export_snippet"}
    exec(compile(code, str(README), "exec"), namespace)
    return namespace


@pytest.fixture
def settings(db_url: str, request: pytest.FixtureRequest) -> Settings:
    """The test settings of tests/conftest.py, with ``request.param`` (indirect parametrize)
    overriding fields such as ``test_seed`` or ``environment``."""
    overrides: dict[str, Any] = dict(getattr(request, "param", {}))
    values: dict[str, Any] = {
        "database_url": db_url,
        "admin_key": SecretStr(ADMIN_KEY),
        "environment": "test",
        "max_request_bytes": 1024 * 1024,
        "job_runner": "thread",
    }
    values.update(overrides)
    return Settings(**values)


# --- GET /v1/models/{id} ------------------------------------------------------------------


def test_a_model_shows_its_coefficients_by_encoded_feature_and_its_preprocessing(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site)
    assert dataset["feature_names"] == FEATURE_NAMES
    model = fitted_model(client, site, dataset)

    assert model["source"] == "fit"
    assert model["mechanism"] == "objective_perturbation"
    assert model["loss"] == "logistic"
    assert model["dataset_id"] == dataset["id"]
    assert model["label"] == LABEL
    assert model["feature_names"] == FEATURE_NAMES
    assert [c["feature"] for c in model["coefficients"]] == FEATURE_NAMES
    coef = coef_of(model)
    assert model["model"] == {"kind": "linear", "coef": coef}
    assert all(math.isfinite(w) for w in coef)
    assert any(w != 0 for w in coef)
    # released weights lie on the 2^-32 grid (no low-order noise signature)
    assert all((w * 2**32).is_integer() for w in coef)
    assert model["preprocessing"] == transform().to_dict()
    assert model["preprocessing"]["features"][0] == {
        "type": "numeric",
        "column": "age",
        "lower": 18.0,
        "upper": 90.0,
    }

    listed = client.get("/v1/models", headers=site.headers).json()
    assert listed["total"] == 1
    (summary,) = listed["items"]
    assert summary["id"] == model["id"]
    assert (summary["epsilon"], summary["delta"], summary["verified"]) == (1.0, 0.0, True)
    assert summary["n_features"] == len(FEATURE_NAMES)


@pytest.mark.parametrize(
    ("settings", "source"),
    [
        ({"test_seed": TEST_SEED}, "test_seed"),
        ({}, "csprng"),
        ({"test_seed": TEST_SEED, "environment": "dev"}, "csprng"),
    ],
    ids=["test-mode-with-seed", "test-mode-without-seed", "dev-ignores-the-seed"],
    indirect=["settings"],
)
def test_the_privacy_record_states_what_was_protected_and_how(
    client: TestClient, site: SiteHandle, source: str
) -> None:
    dataset = upload(client, site)
    quote = client.post(
        f"/v1/datasets/{dataset['id']}/fits",
        params={"dry_run": "true"},
        json=fit_body(),
        headers=site.headers,
    ).json()
    model = fitted_model(client, site, dataset)
    record = model["privacy"]

    assert record["kind"] == "fit"
    assert record["verified"] is True
    assert record["guarantee"] == "differential_privacy"
    assert record["mechanism"] == "objective_perturbation"
    assert (record["epsilon"], record["delta"]) == (1.0, 0.0)
    unit = f"one row of dataset {DATASET_NAME!r} ({dataset['id']}), replace-one"
    assert record["unit"] == {"record": "row", "neighbouring": "replace-one", "description": unit}
    assert record["datasets"] == [
        {"id": dataset["id"], "name": DATASET_NAME, "epsilon": 1.0, "delta": 0.0}
    ]
    assert record["statement"].startswith(f"(1, 0)-differential privacy for {unit}")
    # the calibration is the dry run's, on the dataset's public n and d
    calibration = record["calibration"]
    assert calibration == quote["calibration"]
    assert (calibration["n"], calibration["d"]) == (N_ROWS, len(FEATURE_NAMES))
    assert (calibration["epsilon"], calibration["regularization"]) == (1.0, 0.01)
    assert calibration["loss"] == "logistic"
    assert record["expected_noise_norm"] == pytest.approx(quote["expected_noise_norm"])
    assert record["expected_noise_norm"] > 0
    assert record["composition"]["within_job"] == quote["composition"]
    assert "basic sequential composition" in record["composition"]["across_jobs"]
    assert record["software"] == {"name": "privfit", "version": metadata.version("privfit")}
    assert record["job_id"] == model["job_id"]

    randomness = record["randomness"]
    assert randomness["source"] == source
    if source == "test_seed":
        assert randomness["seed"] == TEST_SEED
        assert "test seed" in record["statement"]
        assert "no privacy guarantee in practice" in randomness["description"]
    else:
        assert "seed" not in randomness
        assert "seed" not in record["statement"]
        assert "CSPRNG" in randomness["description"]

    # the export carries the same record (the read schema only adds empty optional members)
    doc = client.get(f"/v1/models/{model['id']}/export", headers=site.headers).json()
    assert doc["privacy"] == {k: v for k, v in record.items() if k in doc["privacy"]}
    assert all(record[k] is None for k in set(record) - set(doc["privacy"]))


@pytest.mark.parametrize(
    ("settings", "repeats"),
    [({"test_seed": TEST_SEED}, True), ({}, False)],
    ids=["test-seed", "csprng"],
    indirect=["settings"],
)
def test_the_recorded_noise_source_is_the_one_used(
    client: TestClient, site: SiteHandle, repeats: bool
) -> None:
    """A seeded server derives each job's seed from its own and the job id; the CSPRNG is
    never repeated. Two jobs never share noise (that would cancel it between their models)."""
    dataset = upload(client, site)
    first = fitted_model(client, site, dataset)
    second = fitted_model(client, site, dataset)
    assert first["privacy"]["randomness"]["source"] == ("test_seed" if repeats else "csprng")
    assert coef_of(first) != coef_of(second)
    for model in (first, second):
        recorded = model["privacy"]["randomness"]
        expected = Randomness(seed=TEST_SEED).job_seed(model["job_id"]) if repeats else None
        assert recorded.get("job_seed") == (None if expected is None else str(expected))


def test_a_non_private_fit_says_it_gives_no_differential_privacy(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site, allow_non_private=True)
    model = fitted_model(client, site, dataset, mechanism="non_private", epsilon=None)
    record = model["privacy"]
    assert record["guarantee"] == "none"
    assert record["epsilon"] is None
    assert record["statement"].startswith("no differential privacy")
    assert record["datasets"] == [
        {"id": dataset["id"], "name": DATASET_NAME, "epsilon": None, "delta": 0.0}
    ]
    assert record["composition"]["across_jobs"].startswith("not applicable")
    (summary,) = client.get("/v1/models", headers=site.headers).json()["items"]
    assert summary["epsilon"] is None
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=site.headers).json()
    assert budget["epsilon_spent"] == 0.0


# --- POST /v1/models/{id}/predict ---------------------------------------------------------


def scoring_rows() -> list[dict[str, Any]]:
    """Rows to score: fresh ones plus clamped values, numbers as text, an integral float and
    extra columns that predict ignores."""
    rows = make_rows(40, seed=99)
    rows += [
        {"age": 5, "color": "red", "income": -50.0},  # both clamped to their lower bounds
        {"age": 150, "color": "blue", "income": 99999},  # both clamped to their upper bounds
        {"age": " 39 ", "color": "green", "income": "120.5", "note": "x"},  # numbers as text
        {"age": 39.0, "color": "green", "income": 120.5, "outcome": "no"},
        {"age": 39.0, "color": "purple", "income": 120.5},  # undeclared: all-zero block
    ]
    return rows


@pytest.mark.parametrize("row_norm", ["clip", "scale"])
def test_predict_scores_are_the_coefficients_dot_the_preprocessed_row(
    client: TestClient, site: SiteHandle, row_norm: str
) -> None:
    model = fitted_model(client, site, upload(client, site, row_norm=row_norm))
    rows = scoring_rows()
    predictions = predict(client, site, model["id"], rows)
    scores = expected_scores(coef_of(model), rows, row_norm)
    assert [p["score"] for p in predictions] == pytest.approx(list(scores), rel=1e-12, abs=1e-12)
    assert predictions[-2]["score"] == predictions[-3]["score"]  # " 39 " is 39
    for p, score in zip(predictions, scores, strict=True):
        assert set(p) == {"positive", "score", "probability"}
        assert p["positive"] is bool(score > 0)
        assert p["probability"] == pytest.approx(1.0 / (1.0 + math.exp(-score)), abs=1e-12)


def test_a_huber_model_gives_scores_but_no_probability(
    client: TestClient, site: SiteHandle
) -> None:
    model = fitted_model(client, site, upload(client, site), loss="huber", params={"h": 0.5})
    assert model["loss"] == "huber"
    rows = scoring_rows()
    predictions = predict(client, site, model["id"], rows)
    assert all(p["probability"] is None for p in predictions)
    scores = expected_scores(coef_of(model), rows, "clip")
    assert [p["score"] for p in predictions] == pytest.approx(list(scores), rel=1e-12, abs=1e-12)


#: A distinctive value of the one good row: no error may quote it.
GOOD_INCOME = 777.125
GOOD_ROW = {"age": 40, "color": "red", "income": GOOD_INCOME}


@pytest.mark.parametrize(
    ("bad_row", "column", "msg", "sent"),
    [
        ({"age": 40, "income": 10}, "color", "missing value", None),
        ({"age": None, "color": "red", "income": 10}, "age", "missing value", None),
        (
            {"age": "SECRET-forty", "color": "red", "income": 10},
            "age",
            "expected a number",
            "SECRET-forty",
        ),
        ({"age": 40, "color": "red", "income": [31337, 1]}, "income", "expected a number", "31337"),
        ({"age": True, "color": "red", "income": 10}, "age", "boolean", None),
        (
            {"age": 40, "color": {"SECRET-key": 1}, "income": 10},
            "color",
            "expected a category",
            "SECRET-key",
        ),
    ],
    ids=["absent", "null", "text", "list", "boolean", "object"],
)
def test_a_bad_row_is_a_422_naming_row_and_column_without_quoting_values(
    client: TestClient,
    site: SiteHandle,
    bad_row: dict[str, Any],
    column: str,
    msg: str,
    sent: str | None,
) -> None:
    model = fitted_model(client, site, upload(client, site))
    response = client.post(
        f"/v1/models/{model['id']}/predict",
        json={"rows": [GOOD_ROW, GOOD_ROW, bad_row]},
        headers=site.headers,
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    problem = response.json()
    assert problem["type"] == PROBLEM_TYPE_BASE + "invalid-input"
    assert f"row 2, column {column!r}" in problem["detail"]
    (error,) = problem["errors"]
    assert error["loc"] == ["body", "rows", 2, column]
    assert msg in error["msg"]
    assert str(GOOD_INCOME) not in response.text
    if sent is not None:
        assert sent not in response.text


def test_rows_that_are_not_objects_are_a_422_naming_the_row(
    client: TestClient, site: SiteHandle
) -> None:
    model = fitted_model(client, site, upload(client, site))
    response = client.post(
        f"/v1/models/{model['id']}/predict",
        json={"rows": [GOOD_ROW, "SECRET-row"]},
        headers=site.headers,
    )
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["errors"]] == [["body", "rows", 1]]
    assert "SECRET-row" not in response.text
    assert str(GOOD_INCOME) not in response.text


@pytest.mark.parametrize("n_rows", [0, 1001])
def test_an_empty_or_oversized_batch_is_a_422(
    client: TestClient, site: SiteHandle, n_rows: int
) -> None:
    model = fitted_model(client, site, upload(client, site))
    response = client.post(
        f"/v1/models/{model['id']}/predict",
        json={"rows": [GOOD_ROW] * n_rows},
        headers=site.headers,
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["errors"]
    assert error["loc"] == ["body", "rows"]
    assert str(GOOD_INCOME) not in response.text
    assert len(response.content) < 2000


def test_the_largest_batch_is_scored(client: TestClient, site: SiteHandle) -> None:
    model = fitted_model(client, site, upload(client, site))
    rows = make_rows(1000, seed=3)
    predictions = predict(client, site, model["id"], rows)
    scores = expected_scores(coef_of(model), rows, "clip")
    assert [p["score"] for p in predictions] == pytest.approx(list(scores), rel=1e-12, abs=1e-12)


def test_many_bad_cells_are_capped_in_the_error(client: TestClient, site: SiteHandle) -> None:
    model = fitted_model(client, site, upload(client, site))
    rows = [{"age": None, "color": "red", "income": 1}] * 50
    response = client.post(
        f"/v1/models/{model['id']}/predict", json={"rows": rows}, headers=site.headers
    )
    assert response.status_code == 422
    problem = response.json()
    assert [e["loc"][2] for e in problem["errors"]] == list(range(20))
    assert problem["detail"].endswith("(and 30 more)")


# --- GET /v1/models/{id}/export -----------------------------------------------------------


@pytest.mark.parametrize("row_norm", ["clip", "scale"])
def test_the_export_is_self_contained_and_the_readme_turns_it_into_sklearn(
    client: TestClient, site: SiteHandle, row_norm: str
) -> None:
    model = fitted_model(client, site, upload(client, site, row_norm=row_norm))
    response = client.get(f"/v1/models/{model['id']}/export", headers=site.headers)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert f"privfit-model-{model['id']}.json" in response.headers["content-disposition"]
    doc: dict[str, Any] = json.loads(response.text)  # strict JSON: no NaN or Infinity
    assert (doc["format"], doc["format_version"]) == ("privfit.model", 1)
    assert doc["model_id"] == model["id"]
    assert doc["feature_names"] == FEATURE_NAMES
    assert doc["weights"] == {"coef": coef_of(model), "intercept": 0.0}
    assert doc["preprocessing"] == model["preprocessing"]
    assert doc["projection_matrix"] is None
    assert doc["label"] == LABEL
    assert doc["classes"] == [-1, 1]
    assert (doc["mechanism"], doc["loss"], doc["source"]) == (
        "objective_perturbation",
        "logistic",
        "fit",
    )
    assert doc["privacy"]["epsilon"] == 1.0

    rows = scoring_rows()
    predictions = predict(client, site, model["id"], rows)
    scores = np.array([p["score"] for p in predictions])

    readme = readme_sklearn_code()
    estimator = readme["to_sklearn"](doc)
    X = readme["preprocess"](doc, rows)
    np.testing.assert_allclose(X, transform(row_norm).transform(columns_of(rows)), atol=1e-12)
    np.testing.assert_allclose(estimator.decision_function(X), scores, rtol=0, atol=1e-9)
    expected_class = np.where([p["positive"] for p in predictions], 1, -1)
    np.testing.assert_array_equal(estimator.predict(X), expected_class)
    np.testing.assert_allclose(
        estimator.predict_proba(X)[:, 1], [p["probability"] for p in predictions], atol=1e-9
    )
    # the service's own copy of the conversion agrees with the README's
    ours = export_module.to_sklearn(doc)
    np.testing.assert_allclose(
        ours.decision_function(export_module.preprocess(doc, rows)), scores, rtol=0, atol=1e-9
    )


def test_a_stacked_model_is_exported_without_a_sklearn_equivalent(
    client: TestClient, site: SiteHandle
) -> None:
    model = fitted_model(client, site, upload(client, site), mechanism="stacking_samples")
    assert model["coefficients"] is None
    assert model["model"]["kind"] == "stacked"
    predictions = predict(client, site, model["id"], scoring_rows())
    assert all(math.isfinite(p["score"]) for p in predictions)
    doc = client.get(f"/v1/models/{model['id']}/export", headers=site.headers).json()
    assert doc["weights"] is None
    assert doc["model"] == model["model"]
    with pytest.raises(ValueError, match="only linear models"):
        readme_sklearn_code()["to_sklearn"](doc)


# --- POST /v1/models ----------------------------------------------------------------------

UPLOAD_WEIGHTS = [1.5, 0.75, -0.25, -0.5, 2.0, -1.25]
CLAIM = {
    "epsilon": 2.0,
    "delta": 1e-6,
    "mechanism": "output_perturbation",
    "description": "Fitted in-house with diffprivlib.",
}


def upload_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "label": LABEL,
        "features": FEATURES,
        "weights": UPLOAD_WEIGHTS,
        "loss": "logistic",
        "privacy_claim": CLAIM,
    }
    body.update(overrides)
    return body


def test_an_uploaded_classifier_is_stored_with_its_claim_shown_as_unverified(
    client: TestClient, site: SiteHandle
) -> None:
    response = client.post("/v1/models", json=upload_body(), headers=site.headers)
    assert response.status_code == 201, response.text
    model = response.json()
    assert model["source"] == "upload"
    assert model["mechanism"] == "output_perturbation"
    assert (model["dataset_id"], model["job_id"]) == (None, None)
    assert model["feature_names"] == FEATURE_NAMES
    assert coef_of(model) == UPLOAD_WEIGHTS
    assert model["preprocessing"] == transform().to_dict()
    assert model["label"] == LABEL
    record = model["privacy"]
    assert record["kind"] == "declared_claim"
    assert record["verified"] is False
    assert record["guarantee"] == "declared"
    assert (record["epsilon"], record["delta"]) == (None, None)  # nothing verified
    assert record["claim"] == CLAIM
    assert record["statement"].startswith("claimed ε = 2, δ = 1e-06")
    assert "not verified by PrivFit" in record["statement"]
    assert record["software"]["version"] == metadata.version("privfit")
    assert client.get(f"/v1/models/{model['id']}", headers=site.headers).json() == model
    (summary,) = client.get("/v1/models", headers=site.headers).json()["items"]
    assert (summary["id"], summary["verified"], summary["epsilon"]) == (model["id"], False, None)

    rows = scoring_rows()
    predictions = predict(client, site, model["id"], rows)
    scores = expected_scores(UPLOAD_WEIGHTS, rows, "clip")
    assert [p["score"] for p in predictions] == pytest.approx(list(scores), rel=1e-12, abs=1e-12)
    assert all(p["probability"] is not None for p in predictions)

    doc = client.get(f"/v1/models/{model['id']}/export", headers=site.headers).json()
    assert doc["source"] == "upload"
    assert doc["privacy"]["verified"] is False
    readme = readme_sklearn_code()
    np.testing.assert_allclose(
        readme["to_sklearn"](doc).decision_function(readme["preprocess"](doc, rows)),
        [p["score"] for p in predictions],
        rtol=0,
        atol=1e-9,
    )


def test_an_uploaded_classifier_without_a_claim_claims_nothing(
    client: TestClient, site: SiteHandle
) -> None:
    body = upload_body(privacy_claim=None, loss="huber")
    response = client.post("/v1/models", json=body, headers=site.headers)
    assert response.status_code == 201, response.text
    model = response.json()
    assert model["mechanism"] is None
    record = model["privacy"]
    assert (record["guarantee"], record["claim"], record["verified"]) == ("none", None, False)
    assert record["statement"] == "no privacy claim was declared by the uploader"
    predictions = predict(client, site, model["id"], scoring_rows())
    assert all(p["probability"] is None for p in predictions)


def _no_models(client: TestClient, site: SiteHandle) -> bool:
    listed = client.get("/v1/models", headers=site.headers).json()
    return bool(listed["total"] == 0 and listed["items"] == [])


@pytest.mark.parametrize("weights", [UPLOAD_WEIGHTS[:-1], [*UPLOAD_WEIGHTS, 0.0]])
def test_a_wrong_number_of_weights_is_a_422(
    client: TestClient, site: SiteHandle, weights: list[float]
) -> None:
    response = client.post("/v1/models", json=upload_body(weights=weights), headers=site.headers)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert f"has {len(weights)} weights" in problem["detail"]
    assert "encodes 6 features" in problem["detail"]
    assert problem["errors"] == [{"loc": ["body", "weights"], "msg": "expected 6 weights"}]
    assert _no_models(client, site)


@pytest.mark.parametrize(
    ("features", "needle"),
    [
        ([{"column": "age", "type": "numeric"}], "bound"),
        ([{"column": "age", "type": "numeric", "lower": 18}], "bound"),
        ([{"column": "age", "type": "numeric", "lower": 90, "upper": 18}], "lower"),
        ([{"column": "color", "type": "categorical", "categories": []}], "categor"),
        (
            [
                {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
                {"column": "age", "type": "numeric", "lower": 0, "upper": 1},
            ],
            "age",
        ),
        ([{"column": "outcome", "type": "numeric", "lower": 0, "upper": 1}], "label"),
    ],
    ids=["no-bounds", "one-bound", "inverted-bounds", "no-categories", "duplicate", "label"],
)
def test_a_bad_feature_spec_is_a_422_and_stores_nothing(
    client: TestClient, site: SiteHandle, features: list[dict[str, Any]], needle: str
) -> None:
    response = client.post(
        "/v1/models", json=upload_body(features=features, weights=[0.0, 1.0]), headers=site.headers
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_MEDIA_TYPE)
    problem = response.json()
    # a problem with the model's feature spec, not with a dataset upload
    assert problem["type"] == PROBLEM_TYPE_BASE + "invalid-input"
    assert problem["detail"].startswith("invalid feature spec: ")
    assert "dataset" not in problem["detail"]
    assert needle in problem["detail"].lower()
    assert problem["errors"]
    assert all(e["loc"][0] == "body" for e in problem["errors"])
    assert _no_models(client, site)


def test_the_no_bounds_error_says_why_privfit_will_not_read_them(
    client: TestClient, site: SiteHandle
) -> None:
    features = [{"column": "age", "type": "numeric", "lower": 18}]
    response = client.post(
        "/v1/models", json=upload_body(features=features, weights=[0.0, 1.0]), headers=site.headers
    )
    assert response.status_code == 422
    problem = response.json()
    assert "needs public bounds 'lower' and 'upper'" in problem["detail"]
    assert "will not read bounds from the data" in problem["detail"]
    assert problem["errors"][0]["loc"] == ["body", "features", 0]


def test_the_admin_cannot_upload_a_classifier(
    client: TestClient, admin_headers: dict[str, str], site: SiteHandle
) -> None:
    for body in (upload_body(), upload_body(features=[{"column": "age", "type": "numeric"}])):
        response = client.post("/v1/models", json=body, headers=admin_headers)
        assert response.status_code == 403, response.text
    assert _no_models(client, site)
    assert client.get("/v1/models", headers=admin_headers).status_code == 403


def test_non_finite_weights_are_a_422(client: TestClient, site: SiteHandle) -> None:
    text = json.dumps(upload_body()).replace("2.0, -1.25", "1e999, -1.25")
    response = client.post(
        "/v1/models",
        content=text,
        headers={**site.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["loc"][:2] == ["body", "weights"]
    assert _no_models(client, site)


@pytest.mark.parametrize("fmt", ["pickle", "JSON", ""])
def test_an_unknown_export_format_is_a_422_problem(
    client: TestClient, site: SiteHandle, fmt: str
) -> None:
    model = fitted_model(client, site, upload(client, site))
    response = client.get(
        f"/v1/models/{model['id']}/export", params={"format": fmt}, headers=site.headers
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("fmt", ["skops", "onnx"])
def test_a_stacked_model_has_no_standard_export(
    client: TestClient, site: SiteHandle, fmt: str
) -> None:
    model = fitted_model(client, site, upload(client, site), mechanism="stacking_samples")
    response = client.get(
        f"/v1/models/{model['id']}/export", params={"format": fmt}, headers=site.headers
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert "only linear models" in response.json()["detail"]
