"""Helpers shared by the study and aggregation tests: a small public spec, uploaded and fitted
models over it, studies and contributions created through the API."""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from tests.conftest import SiteHandle

LABEL: dict[str, Any] = {"column": "outcome", "positive": "yes"}
FEATURES: list[dict[str, Any]] = [
    {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
    {"column": "color", "type": "categorical", "categories": ["red", "green", "blue"]},
]
SPEC: dict[str, Any] = {"label": LABEL, "features": FEATURES}
#: age, color=red, color=green, color=blue, intercept
N_WEIGHTS = 5
FEATURE_NAMES = ["age", "color=red", "color=green", "color=blue", "intercept"]
TERMINAL = {"succeeded", "failed", "cancelled"}


def spec(**changes: Any) -> dict[str, Any]:
    """The study spec, with top-level keys replaced."""
    out = copy.deepcopy(SPEC)
    out.update(changes)
    return out


def create_study(
    client: TestClient,
    coordinator: SiteHandle,
    members: Sequence[SiteHandle],
    *,
    study_spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    response = client.post(
        "/v1/studies",
        json={
            "name": "consortium",
            "members": [m.id for m in members],
            "spec": study_spec or SPEC,
        },
        headers=coordinator.headers,
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def upload_model(
    client: TestClient,
    site: SiteHandle,
    weights: Sequence[float],
    *,
    features: list[dict[str, Any]] | None = None,
    label: dict[str, Any] | None = None,
    claim: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "label": label or LABEL,
        "features": features or FEATURES,
        "weights": list(weights),
    }
    if claim is not None:
        body["privacy_claim"] = claim
    response = client.post("/v1/models", json=body, headers=site.headers)
    assert response.status_code == 201, response.text
    model: dict[str, Any] = response.json()
    return model


def contribute(
    client: TestClient, site: SiteHandle, study_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    response = client.post(f"/v1/studies/{study_id}/contributions", json=body, headers=site.headers)
    assert response.status_code == 201, response.text
    out: dict[str, Any] = response.json()
    return out


def rows_csv(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    lines = ["age,color,outcome"]
    for _ in range(n):
        age = int(rng.integers(18, 91))
        color = ("red", "green", "blue")[int(rng.integers(0, 3))]
        logit = 3 * (age - 50) / 40 + (1.0 if color == "red" else -0.5)
        outcome = "yes" if rng.random() < 1 / (1 + math.exp(-logit)) else "no"
        lines.append(f"{age},{color},{outcome}")
    return ("\n".join(lines) + "\n").encode()


def upload_dataset(
    client: TestClient,
    site: SiteHandle,
    *,
    seed: int = 1,
    features: list[dict[str, Any]] | None = None,
    epsilon: float = 4.0,
    delta: float = 1e-5,
    allow_non_private: bool = False,
) -> dict[str, Any]:
    dataset_spec = {
        "name": f"site-data-{seed}",
        "label": LABEL,
        "features": features or FEATURES,
        "budget": {"epsilon": epsilon, "delta": delta},
        "allow_non_private": allow_non_private,
    }
    response = client.post(
        "/v1/datasets",
        files={
            "file": ("data.csv", rows_csv(200, seed), "text/csv"),
            "spec": (None, json.dumps(dataset_spec)),
        },
        headers=site.headers,
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def finished(
    client: TestClient, site: SiteHandle, job: dict[str, Any], timeout: float = 30.0
) -> dict[str, Any]:
    """A job returned by a 202, once it has finished: one long poll (``?wait=``, at most
    ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while job["status"] not in TERMINAL:
        assert time.monotonic() < deadline, f"job still {job['status']} after {timeout} s"
        wait = min(30.0, max(deadline - time.monotonic(), 0.0))
        response = client.get(f"/v1/jobs/{job['id']}", params={"wait": wait}, headers=site.headers)
        assert response.status_code == 200, response.text
        job = response.json()
    return job


def fit_model(
    client: TestClient,
    site: SiteHandle,
    dataset_id: str,
    *,
    mechanism: str = "objective_perturbation",
    epsilon: float | None = 1.0,
) -> dict[str, Any]:
    """POST a fit, wait for its job (one long poll, 30 s) and return the model."""
    body: dict[str, Any] = {
        "mechanism": mechanism,
        "delta": 0.0,
        "loss": "logistic",
        "regularization": 0.05,
    }
    if epsilon is not None:
        body["epsilon"] = epsilon
    response = client.post(f"/v1/datasets/{dataset_id}/fits", json=body, headers=site.headers)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    job = client.get(f"/v1/jobs/{job_id}", params={"wait": 30}, headers=site.headers).json()
    assert job["status"] == "succeeded", job
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers)
    assert model.status_code == 200, model.text
    out: dict[str, Any] = model.json()
    return out


def weights_of(model: dict[str, Any]) -> list[float]:
    return [float(c["weight"]) for c in model["coefficients"]]


def epsilon_spent(client: TestClient, site: SiteHandle, dataset_id: str) -> float:
    """The ε the dataset's budget has spent, as its owner reads it."""
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    return float(budget["epsilon_spent"])
