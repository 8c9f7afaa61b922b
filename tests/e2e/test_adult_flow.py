"""End to end on UCI Adult through HTTP (issue 4 item 6): upload → fit → poll → predict.

A site uploads the Adult training split (the CSV a site would send, with the public spec in
``datasets/adult/spec.json``), asks for an objective-perturbation fit at ε = 1 (λ = 1e-3),
follows the job to its end on the default process-pool runner, and scores the test split's
complete rows through ``POST /v1/models/{id}/predict`` in batches of the predict limit. The
test accuracy is printed (``pytest -s``) and must beat always answering the majority class
(0.7543 on the 15,060 complete test rows); it is typically about 0.82.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from benchmarks.adult import NUMERIC_COLUMNS, csv_bytes, load_adult, load_spec, preprocessing_spec
from service.api.schemas.models import MAX_PREDICT_ROWS
from service.main import create_app
from service.settings import Settings
from tests.conftest import ADMIN_KEY

# Heavy tier (issue 27 §5): a long walkthrough on the full Adult data whose every step (upload,
# fit, poll, predict, the accuracy of a fit) the API tests cover on small data; CI runs it in
# `make test-heavy`.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
MAJORITY_RATE = 0.7543
FIT = {
    "mechanism": "objective_perturbation",
    "epsilon": 1.0,
    "delta": 0.0,
    "loss": "logistic",
    "regularization": 1e-3,
}
JOB_DEADLINE_S = 300.0


def complete_test_rows() -> tuple[list[dict[str, Any]], np.ndarray]:
    """The test split's rows with every feature and the label present, as JSON objects keyed
    by column (numbers as numbers), and their labels (True for >50K)."""
    spec = load_spec()
    columns = load_adult("test")
    names = [f["column"] for f in spec["features"]]
    label = spec["label"]
    n = len(columns[label["column"]])
    keep = np.ones(n, dtype=bool)
    for name in [*names, label["column"]]:
        values = columns[name]
        if name in NUMERIC_COLUMNS:
            keep &= ~np.isnan(values)
        else:
            keep &= np.array([v is not None for v in values])
    rows = [
        {
            name: float(columns[name][i]) if name in NUMERIC_COLUMNS else str(columns[name][i])
            for name in names
        }
        for i in np.flatnonzero(keep)
    ]
    y = np.array([columns[label["column"]][i] == label["positive"] for i in np.flatnonzero(keep)])
    return rows, y


@pytest.fixture
def client(any_db_url: str) -> Iterator[TestClient]:
    """The app as deployed (process-pool job runner), with room for Adult's 3.5 MB upload, on
    SQLite and on PostgreSQL."""
    settings = Settings(
        database_url=any_db_url,
        admin_key=SecretStr(ADMIN_KEY),
        environment="test",
        max_request_bytes=64 * 1024 * 1024,
        job_runner="process",
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_adult_upload_fit_poll_predict(client: TestClient) -> None:
    response = client.post("/v1/sites", json={"name": "Adult census site"}, headers=ADMIN)
    assert response.status_code == 201, response.text
    site = {"Authorization": f"Bearer {response.json()['key']['api_key']}"}

    # upload the training split with its public spec
    spec = load_spec()
    response = client.post(
        "/v1/datasets",
        files={
            "file": ("adult.csv", csv_bytes("train"), "text/csv"),
            "spec": (None, json.dumps(spec)),
        },
        headers=site,
    )
    assert response.status_code == 201, response.text
    dataset = response.json()
    assert dataset["n_rows"] == 30_162  # complete rows ("missing": "drop")
    assert dataset["feature_names"] == list(preprocessing_spec(spec).feature_names())
    assert dataset["budget"] == spec["budget"]

    # fit: ε = 1 charged at once, then the job runs in a worker process
    response = client.post(f"/v1/datasets/{dataset['id']}/fits", json=FIT, headers=site)
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 1.0, "delta": 0.0, "state": "charged"}
    ]

    # poll until the job ends
    location = response.headers["location"]
    deadline = time.monotonic() + JOB_DEADLINE_S
    progress = [job["progress"]]
    while job["status"] in {"queued", "running"}:
        assert time.monotonic() < deadline, f"job still {job['status']} after {JOB_DEADLINE_S} s"
        time.sleep(0.1)
        job = client.get(location, headers=site).json()
        progress.append(job["progress"])
    assert job["status"] == "succeeded", job
    assert progress == sorted(progress)
    assert progress[-1] == 1.0

    model = client.get(f"/v1/models/{job['model_id']}", headers=site).json()
    assert model["feature_names"] == dataset["feature_names"]
    assert model["privacy"]["epsilon"] == 1.0
    assert model["privacy"]["datasets"][0]["id"] == dataset["id"]
    assert model["privacy"]["randomness"]["source"] == "csprng"

    # predict the test split in batches of the predict limit
    rows, y = complete_test_rows()
    assert len(rows) == 15_060
    assert np.mean(~y) == pytest.approx(MAJORITY_RATE, abs=1e-4)
    positive: list[bool] = []
    for start in range(0, len(rows), MAX_PREDICT_ROWS):
        batch = rows[start : start + MAX_PREDICT_ROWS]
        response = client.post(
            f"/v1/models/{model['id']}/predict", json={"rows": batch}, headers=site
        )
        assert response.status_code == 200, response.text
        predictions = response.json()["predictions"]
        assert len(predictions) == len(batch)
        for p in predictions:
            assert p["positive"] is (p["score"] > 0)
            assert 0.0 < p["probability"] < 1.0
            assert math.isfinite(p["score"])
        positive.extend(p["positive"] for p in predictions)

    accuracy = float(np.mean(np.array(positive) == y))
    print(
        f"\nAdult test accuracy, objective_perturbation ε=1 λ=1e-3 over HTTP: {accuracy:.4f} "
        f"(majority class {MAJORITY_RATE}, n={len(rows)})"
    )
    assert accuracy > MAJORITY_RATE

    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=site).json()
    assert (budget["epsilon_spent"], budget["epsilon_remaining"]) == (1.0, 3.0)
    assert [c["job_id"] for c in budget["charges"]] == [job["id"]]
