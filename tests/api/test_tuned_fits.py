"""Fits with candidate regularisations: private tuning within the request's (ε, δ)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import SiteHandle
from tests.unit.jobs._flow import budget, fit_body, toy_csv, upload

PROBLEM_JSON = "application/problem+json"
WAIT = {"Prefer": "wait=30"}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


def _body(candidates: Any, **fields: Any) -> dict[str, Any]:
    return {**fit_body("output_perturbation", epsilon=1.0, **fields), "regularization": candidates}


CMS_CHOICE = {"selection": "cms", "requested_selection": "cms", "selection_reason": "requested"}


def test_a_tuned_fit_charges_once_and_records_the_choice(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    candidates = [1e-3, 1e-2, 1e-1]
    body = _body({"candidates": candidates}) | {"selection": "cms"}
    dry = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert dry.status_code == 200, dry.text
    quote = dry.json()
    assert quote["cost"] == {"epsilon": 1.0, "delta": 0.0}
    assert quote["calibration"]["tuning"] == {
        "candidates": candidates,
        "grid": [{"regularization": c} for c in candidates],
        "part_size": 150,
        "parts": 4,
        **CMS_CHOICE,
    }
    # calibrated at the part size: n = 150
    assert quote["calibration"]["n"] == 150

    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["kind"] == "tuned_fit"
    assert job["status"] == "succeeded", job
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 1.0, "delta": 0.0, "state": "charged"}
    ]
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == pytest.approx(1.0)
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    tuning = model["privacy"]["tuning"]
    assert tuning["candidates"] == candidates
    assert tuning["chosen_regularization"] in candidates
    assert tuning["part_sizes"] == [150, 150, 150, 150]
    assert "step_size_candidates" not in tuning
    assert "chosen_eta" not in tuning
    assert tuning["epsilon_split"]["total"] == 1.0
    assert model["privacy"]["epsilon"] == 1.0


@pytest.mark.parametrize(
    "candidates",
    [
        {"candidates": []},
        {"candidates": [1e-3] * 11},
        {"candidates": [0.0]},
        {"candidates": [-1.0, 1e-3]},
        {"candidates": [1e-3, 1e-3]},
        {"candidates": "x"},
        {"values": [1e-3]},
    ],
)
def test_bad_candidate_lists_are_422_and_charge_nothing(
    client: TestClient, site: SiteHandle, candidates: Any
) -> None:
    dataset = upload(client, site.headers)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=_body(candidates), headers=site.headers
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert budget(client, site.headers, dataset["id"])["charges"] == []
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0


def test_too_many_candidates_for_the_rows_is_422(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=15, seed=1))
    body = _body({"candidates": [1e-3 * (i + 1) for i in range(10)]}) | {"selection": "cms"}
    response = client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)
    assert response.status_code == 422, response.text
    assert budget(client, site.headers, dataset["id"])["charges"] == []
    # random repetition fits every candidate on all 15 rows: auto chooses it (k = 10: the
    # geometric law)
    body["selection"] = "auto"
    dry = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert dry.status_code == 200, dry.text
    assert dry.json()["calibration"]["tuning"]["selection"] == "liu_talwar"


def test_a_non_private_mechanism_cannot_be_tuned(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers)
    body = {**fit_body("non_private", epsilon=None), "regularization": {"candidates": [0.01]}}
    response = client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)
    assert response.status_code == 422, response.text


def _sgd_body(eta: Any, regularization: Any = 0.01, **params: Any) -> dict[str, Any]:
    return fit_body(
        "dp_sgd", epsilon=1.0, regularization=regularization, params={"eta": eta, **params}
    )


def test_dp_sgd_step_sizes_and_lambdas_are_tuned_over_their_grid(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    etas, lambdas = [0.1, 1.0], [1e-3, 1e-2]
    body = _sgd_body({"candidates": etas}, {"candidates": lambdas}) | {"selection": "cms"}
    grid = [{"regularization": lam, "eta": eta} for lam in lambdas for eta in etas]
    dry = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert dry.status_code == 200, dry.text
    quote = dry.json()
    assert quote["cost"] == {"epsilon": 1.0, "delta": 0.0}
    assert quote["calibration"]["tuning"] == {
        "candidates": lambdas,
        "step_size_candidates": etas,
        "grid": grid,
        "part_size": 120,
        "parts": 5,
        **CMS_CHOICE,
    }
    # Each grid point is calibrated at the part size m = 120: batch size 50 gives ⌊120/50⌋ = 2
    # batches of 60 rows, so b_min = 60 and β = ε·b_min/2 = 30 (E‖z‖ = d/β).
    calibration = quote["calibration"]
    assert calibration["n"] == 120
    assert calibration["beta"] == pytest.approx(30.0)
    assert quote["expected_noise_norm"] == pytest.approx(calibration["d"] / 30.0)

    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert (job["kind"], job["status"]) == ("tuned_fit", "succeeded"), job
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 1.0, "delta": 0.0, "state": "charged"}
    ]
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    tuning = model["privacy"]["tuning"]
    assert tuning["candidates"] == lambdas
    assert tuning["step_size_candidates"] == etas
    assert tuning["grid"] == grid
    chosen = grid[tuning["chosen_index"]]
    assert (tuning["chosen_regularization"], tuning["chosen_eta"]) == (
        chosen["regularization"],
        chosen["eta"],
    )
    assert tuning["part_sizes"] == [120] * 5
    assert tuning["epsilon_split"] == {
        "each_candidate_fit": 1.0,
        "selection": 1.0,
        "total": 1.0,
        "composition": "parallel: every row is in exactly one part",
    }
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == pytest.approx(1.0)


def test_step_sizes_alone_keep_the_single_lambda(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=300, seed=2))
    body = _sgd_body({"candidates": [0.05, 0.5, 2.0]}, 0.02, schedule="constant") | {
        "selection": "cms"
    }
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    tuning = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()["privacy"][
        "tuning"
    ]
    assert tuning["candidates"] == [0.02]
    assert tuning["step_size_candidates"] == [0.05, 0.5, 2.0]
    assert tuning["chosen_regularization"] == 0.02
    assert tuning["chosen_eta"] in (0.05, 0.5, 2.0)
    assert tuning["part_sizes"] == [75] * 4
    # a retry with the same key and body is the same job, charged once
    key = {"Idempotency-Key": "tune-eta-1"}
    first = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **key}
    )
    again = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **key}
    )
    assert first.json()["id"] == again.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(budget(client, site.headers, dataset["id"])["charges"]) == 2


@pytest.mark.parametrize(
    "body",
    [
        _sgd_body({"candidates": []}),
        _sgd_body({"candidates": [0.1 * (i + 1) for i in range(11)]}),
        _sgd_body({"candidates": [0.0]}),
        _sgd_body({"candidates": [-1.0, 0.5]}),
        _sgd_body({"candidates": [0.5, 0.5]}),
        _sgd_body({"candidates": ["x"]}),
        _sgd_body({"candidates": [True]}),
        _sgd_body({"candidates": [10**400]}),
        _sgd_body({"candidates": "x"}),
        _sgd_body({"values": [0.5]}),
        _sgd_body({"candidates": [0.5], "extra": 1}),
        # the grid 2 × 6 = 12 points is over the cap of 10
        _sgd_body({"candidates": [0.1 * (i + 1) for i in range(6)]}, {"candidates": [1e-3, 1e-2]}),
        # the 'inverse' schedule has no η to tune
        _sgd_body({"candidates": [0.5, 1.0]}, schedule="inverse"),
        # η is DP-SGD's step size: no other mechanism has one
        {**fit_body("output_perturbation", epsilon=1.0), "params": {"eta": {"candidates": [1.0]}}},
    ],
)
def test_bad_step_size_candidates_are_422_and_charge_nothing(
    client: TestClient, site: SiteHandle, body: dict[str, Any]
) -> None:
    dataset = upload(client, site.headers)
    for query in ("?dry_run=true", ""):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits{query}", json=body, headers=site.headers
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert budget(client, site.headers, dataset["id"])["charges"] == []
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0


# --- random repetition (issue 28 item 2) -----------------------------------------------------


@pytest.mark.parametrize(
    ("selection", "delta", "eta"), [("papernot_steinke", 0.0, 0.5), ("liu_talwar", 1e-6, 1.0)]
)
def test_random_repetition_charges_exactly_the_request_and_releases_one_model(
    client: TestClient, site: SiteHandle, selection: str, delta: float, eta: float
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    candidates = [1e-3, 1e-2, 1e-1]
    body = _body({"candidates": candidates}, delta=delta) | {"selection": selection}
    dry = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert dry.status_code == 200, dry.text
    quote = dry.json()
    assert quote["cost"] == {"epsilon": 1.0, "delta": delta}
    tuning = quote["calibration"]["tuning"]
    assert (tuning["selection"], tuning["selection_reason"]) == (selection, "requested")
    # k = 3: μ = max(10, 6·3) = 18 runs on average; ε₀ = ε/(2 + η) (the pure bound is the
    # tighter one at ε = 1, δ ≤ 1e-6); the score takes min(½, 283/(600·ε₀)) = ½ of it
    assert tuning["repetitions"]["eta"] == eta
    assert tuning["repetitions"]["mean"] == pytest.approx(18.0, rel=1e-8)
    assert tuning["repetitions"]["released"] is False
    eps0 = 1.0 / (2 + eta)
    assert tuning["per_repetition"]["epsilon"] == pytest.approx(eps0)
    assert tuning["per_repetition"]["score_epsilon"] == pytest.approx(eps0 / 2)
    assert tuning["per_repetition"]["fit_epsilon"] == pytest.approx(eps0 / 2)
    assert tuning["accounting"]["used"] == "pure"
    assert tuning["accounting"]["epsilon"] <= 1.0
    # each candidate is calibrated on all 600 rows
    assert quote["calibration"]["n"] == 600

    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert (job["kind"], job["status"]) == ("tuned_fit", "succeeded"), job
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 1.0, "delta": delta, "state": "charged"}
    ]
    account = budget(client, site.headers, dataset["id"])
    assert account["epsilon_spent"] == pytest.approx(1.0)
    assert len(account["charges"]) == 1
    models = client.get("/v1/models", headers=site.headers).json()
    assert models["total"] == 1
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    assert model["privacy"]["epsilon"] == 1.0
    assert model["privacy"]["delta"] == delta
    record = model["privacy"]["tuning"]
    assert record["selection"] == selection
    assert record["chosen_regularization"] == candidates[record["chosen_index"]]
    assert record["repetitions"]["released"] is False
    # the number of runs is nowhere in the record
    assert "runs" not in {key for key in record if key != "repetitions"}
    assert set(record["repetitions"]) == {"law", "eta", "gamma", "mean", "pmf", "released", "why"}


def test_auto_keeps_cms_for_a_mechanism_that_needs_delta(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    body = {
        **fit_body("gaussian_objective_perturbation", epsilon=1.0, delta=1e-5),
        "regularization": {"candidates": [1e-2, 1e-1]},
    }
    dry = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert dry.status_code == 200, dry.text
    tuning = dry.json()["calibration"]["tuning"]
    assert tuning["selection"] == "cms"
    assert "δ > 0" in tuning["selection_reason"]


@pytest.mark.parametrize(
    "body",
    [
        # an unknown method
        _body({"candidates": [1e-3, 1e-2]}) | {"selection": "best"},
        # a selection without candidates
        fit_body("output_perturbation", epsilon=1.0) | {"selection": "cms"},
        # random repetition fits at δ = 0: not possible for a mechanism that needs δ > 0
        {
            **fit_body("gaussian_objective_perturbation", epsilon=1.0, delta=1e-5),
            "regularization": {"candidates": [1e-2, 1e-1]},
            "selection": "papernot_steinke",
        },
        _body({"candidates": [1e-3, 1e-2]}) | {"selection": None, "extra": 1},
    ],
)
def test_bad_selections_are_422_and_charge_nothing(
    client: TestClient, site: SiteHandle, body: dict[str, Any]
) -> None:
    dataset = upload(client, site.headers)
    for query in ("?dry_run=true", ""):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits{query}", json=body, headers=site.headers
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert budget(client, site.headers, dataset["id"])["charges"] == []
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0


# --- random repetition over Gaussian runs (noisy_gd) -----------------------------------------


def _gd_body(candidates: Any, **fields: Any) -> dict[str, Any]:
    body = fit_body("noisy_gd", epsilon=1.0, delta=1e-6, params={"iterations": 10})
    return body | {"regularization": candidates} | fields


@pytest.mark.parametrize("selection", ["papernot_steinke", "auto"])
def test_noisy_gd_random_repetition_charges_exactly_the_request_and_releases_one_model(
    client: TestClient, site: SiteHandle, selection: str
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    candidates = [1e-4, 1e-3, 1e-2]
    body = _gd_body({"candidates": candidates}, selection=selection)
    dry = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert dry.status_code == 200, dry.text
    quote = dry.json()
    assert quote["cost"] == {"epsilon": 1.0, "delta": 1e-6}
    tuning = quote["calibration"]["tuning"]
    # k = 3, n = 600: auto picks PS22's η = ½ (n·μ_r ≥ m·μ(ε, δ), see choose_selection)
    assert tuning["selection"] == "papernot_steinke"
    assert tuning["repetitions"]["eta"] == 0.5
    assert tuning["repetitions"]["mean"] == pytest.approx(18.0, rel=1e-8)
    per_run = tuning["per_repetition"]
    # each run: T = 10 Gaussian releases at z, δ_t = δ, and μ = √T/z
    assert per_run["fit_iterations"] == 10
    assert per_run["fit_delta"] == 1e-6
    assert per_run["fit_gdp_mu"] == pytest.approx(
        math.sqrt(10) / per_run["fit_noise_multiplier"], rel=1e-12
    )
    # the score takes a fifth of the run's squared GDP budget, the fit the rest:
    # μ_r² + ε_s² ≈ μ_Q² with ε_s = √(1/5)·μ_Q (≈, the score's Rényi curve is not exactly
    # Gaussian), i.e. ε_s/μ_r ≈ ½
    assert per_run["score_epsilon"] / per_run["fit_gdp_mu"] == pytest.approx(0.5, rel=0.05)
    accounting = tuning["accounting"]
    assert accounting["used"] == "rdp"
    # tight: the accounted total is the request to the solver's tolerance, never above it
    assert 1.0 - 1e-6 <= accounting["epsilon"] <= 1.0
    assert quote["calibration"]["n"] == 600
    assert quote["calibration"]["iterations"] == 10

    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert (job["kind"], job["status"]) == ("tuned_fit", "succeeded"), job
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 1.0, "delta": 1e-6, "state": "charged"}
    ]
    account = budget(client, site.headers, dataset["id"])
    assert account["epsilon_spent"] == pytest.approx(1.0)
    assert len(account["charges"]) == 1
    assert client.get("/v1/models", headers=site.headers).json()["total"] == 1
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    assert model["mechanism"] == "noisy_gd"
    assert (model["privacy"]["epsilon"], model["privacy"]["delta"]) == (1.0, 1e-6)
    record = model["privacy"]["tuning"]
    assert record["chosen_regularization"] == candidates[record["chosen_index"]]
    assert record["per_repetition"]["fit_noise_multiplier"] == per_run["fit_noise_multiplier"]
    assert record["fit_details"]["noise_multiplier"] >= per_run["fit_noise_multiplier"]
    assert record["fit_details"]["iterations"] == 10
    assert "runs" not in {key for key in record if key != "repetitions"}


def test_noisy_gd_random_repetition_without_delta_is_422_and_charges_nothing(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    body = _gd_body({"candidates": [1e-3, 1e-2]}, selection="papernot_steinke", delta=0.0)
    for query in ("?dry_run=true", ""):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits{query}", json=body, headers=site.headers
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert budget(client, site.headers, dataset["id"])["charges"] == []
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0
