"""``POST /v1/datasets/{id}/fits``: every mechanism over HTTP, dry runs, validation, tenancy.

A fit is validated on public quantities before anything is spent (422), charged atomically
with its queued job (202 + ``Location``), or only quoted (``?dry_run=true``, 200, nothing
spent). Every refusal leaves the ledger and the job list exactly as they were.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.domain.records.base import json_safe
from service.dp import MECHANISMS, calibrate
from tests.conftest import MakeSite, SiteHandle
from tests.unit.jobs._flow import (
    TOY_FEATURES,
    budget,
    fit_body,
    toy_csv,
    toy_spec,
    upload,
    wait_job,
)


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


PROBLEM_JSON = "application/problem+json"

#: A request for every mechanism of ``service.dp.MECHANISMS`` with its own parameters.
MECHANISM_BODIES: dict[str, dict[str, Any]] = {
    "non_private": fit_body("non_private", epsilon=None),
    "output_perturbation": fit_body("output_perturbation", epsilon=0.5),
    "objective_perturbation": fit_body("objective_perturbation", epsilon=0.5),
    "generalized_objective_perturbation": fit_body(
        "generalized_objective_perturbation", epsilon=0.5, params={"kifer_Delta": 2.0}
    ),
    "gaussian_objective_perturbation": fit_body(
        "gaussian_objective_perturbation", epsilon=0.5, delta=1e-6
    ),
    "dp_sgd": fit_body(
        "dp_sgd",
        epsilon=0.6,
        loss="huber",
        params={"epochs": 3, "batch_size": 10, "schedule": "constant", "eta": 0.5, "h": 0.5},
    ),
    "noisy_gd": fit_body("noisy_gd", epsilon=0.5, delta=1e-5, params={"iterations": 20}),
    "stacking_samples": fit_body(
        "stacking_samples", epsilon=0.5, params={"n_models": 3, "high_level_fraction": 0.4}
    ),
    "stacking_features": fit_body(
        "stacking_features",
        epsilon=0.5,
        params={"feature_groups": [[0, 1], [2, 3, 4], [5]], "importance": [0.5, 0.3, 0.2]},
    ),
}

#: The toy dataset's public n and d (the calibration's inputs).
N, D = 200, len(TOY_FEATURES)


def _calibration(body: dict[str, Any]) -> Any:
    return calibrate(
        body["mechanism"],
        n=N,
        d=D,
        epsilon=math.inf if body["epsilon"] is None else body["epsilon"],
        delta=body["delta"],
        loss=body["loss"],
        regularization=body["regularization"],
        **body["params"],
    )


def _expected_cost(body: dict[str, Any]) -> tuple[float, float]:
    if body["mechanism"] == "non_private":
        return 0.0, 0.0
    calibration = _calibration(body)
    return calibration.epsilon, calibration.delta


def _jobs_total(client: TestClient, site: SiteHandle) -> int:
    response = client.get("/v1/jobs", headers=site.headers)
    assert response.status_code == 200, response.text
    total: int = response.json()["total"]
    return total


def _assert_untouched(client: TestClient, site: SiteHandle, dataset_id: str) -> None:
    state = budget(client, site.headers, dataset_id)
    assert state["epsilon_spent"] == 0.0
    assert state["delta_spent"] == 0.0
    assert state["charges"] == []
    assert _jobs_total(client, site) == 0


def test_the_table_covers_every_mechanism() -> None:
    """Every mechanism that fits a class label (the toy dataset's); the regression-only ones
    are refused on it (below)."""
    binary = {name for name, m in MECHANISMS.items() if "binary" in m.capabilities.tasks}
    assert set(MECHANISM_BODIES) == binary


@pytest.mark.parametrize(
    "mechanism",
    sorted(name for name, m in MECHANISMS.items() if "binary" not in m.capabilities.tasks),
)
def test_a_regression_mechanism_on_a_class_label_is_a_422_that_charges_nothing(
    client: TestClient, site: SiteHandle, mechanism: str
) -> None:
    dataset = upload(client, site.headers)
    body = fit_body(mechanism, epsilon=0.5, delta=1e-6)
    response = client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert "does not fit binary labels" in response.text
    _assert_untouched(client, site, dataset["id"])


@pytest.mark.parametrize("mechanism", sorted(MECHANISM_BODIES))
def test_every_mechanism_fits_through_http(
    client: TestClient, site: SiteHandle, mechanism: str
) -> None:
    dataset = upload(client, site.headers, spec=toy_spec(allow_non_private=True))
    assert (dataset["n_rows"], dataset["n_features"]) == (N, D)
    body = MECHANISM_BODIES[mechanism]
    epsilon, delta = _expected_cost(body)

    response = client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)

    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert "Idempotent-Replayed" not in response.headers
    assert job["kind"] == "fit"
    assert job["dataset_id"] == dataset["id"]
    assert job["params"]["mechanism"] == mechanism
    assert job["params"]["params"] == body["params"]
    assert job["status"] in {"queued", "running", "succeeded"}
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": epsilon, "delta": delta, "state": "charged"}
    ]

    finished = wait_job(client, site.headers, response.headers["Location"].rsplit("/", 1)[1])
    assert finished["status"] == "succeeded", finished
    assert finished["error"] is None
    assert finished["progress"] == 1.0
    assert finished["attempt"] == 1
    assert finished["started_at"] is not None
    assert finished["finished_at"] is not None
    assert finished["model_id"]

    model = client.get(f"/v1/models/{finished['model_id']}", headers=site.headers)
    assert model.status_code == 200, model.text
    assert model.json()["privacy"]["mechanism"] == mechanism

    state = budget(client, site.headers, dataset["id"])
    assert state["epsilon_spent"] == pytest.approx(epsilon, abs=1e-9)
    assert state["delta_spent"] == pytest.approx(delta, abs=1e-15)
    assert [c["job_id"] for c in state["charges"]] == [job["id"]]
    assert state["charges"][0]["state"] == "charged"


def test_dp_sgd_charges_what_its_epochs_really_spend(client: TestClient, site: SiteHandle) -> None:
    """ε is split over the passes and rounded down: the ledger gets E·ε_pass, never more."""
    dataset = upload(client, site.headers)
    body = fit_body("dp_sgd", epsilon=1.0, params={"epochs": 3, "batch_size": 20})
    spent = _calibration(body).epsilon
    assert 0.999 < spent <= 1.0

    response = client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)

    assert response.status_code == 202, response.text
    assert response.json()["charges"][0]["epsilon"] == spent
    assert wait_job(client, site.headers, response.json()["id"])["status"] == "succeeded"
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == pytest.approx(
        spent, abs=1e-9
    )


def test_noisy_gd_charges_exactly_the_request(client: TestClient, site: SiteHandle) -> None:
    """The PLD accountant lands at ε_PLD ≤ ε: the ledger records the request itself, and the
    model's record names the accountant and the numbers it found."""
    dataset = upload(client, site.headers)
    body = fit_body("noisy_gd", epsilon=0.7, delta=1e-6, params={"iterations": 10})

    response = client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)

    assert response.status_code == 202, response.text
    assert response.json()["charges"][0]["epsilon"] == 0.7
    assert response.json()["charges"][0]["delta"] == 1e-6
    finished = wait_job(client, site.headers, response.json()["id"])
    assert finished["status"] == "succeeded", finished
    state = budget(client, site.headers, dataset["id"])
    assert (state["epsilon_spent"], state["delta_spent"]) == (0.7, 1e-6)
    model = client.get(f"/v1/models/{finished['model_id']}", headers=site.headers).json()
    assert model["privacy"]["mechanism"] == "noisy_gd"
    assert "dp_accounting" in json.dumps(model)


def test_non_private_needs_a_dataset_that_allows_it(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers, spec=toy_spec(allow_non_private=False))

    for dry_run in ("false", "true"):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits?dry_run={dry_run}",
            json=MECHANISM_BODIES["non_private"],
            headers=site.headers,
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
        assert "allow_non_private" in response.json()["detail"]
    _assert_untouched(client, site, dataset["id"])


def test_non_private_claims_nothing_and_costs_nothing(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers, spec=toy_spec(allow_non_private=True))

    quote = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true",
        json=MECHANISM_BODIES["non_private"],
        headers=site.headers,
    )

    assert quote.status_code == 200, quote.text
    assert quote.json()["private"] is False
    assert quote.json()["cost"] == {"epsilon": 0.0, "delta": 0.0}


@pytest.mark.parametrize(
    "body",
    [
        MECHANISM_BODIES["objective_perturbation"],
        MECHANISM_BODIES["output_perturbation"],
        MECHANISM_BODIES["gaussian_objective_perturbation"],
        MECHANISM_BODIES["dp_sgd"],
        MECHANISM_BODIES["stacking_features"],
        # λ small enough for objective perturbation's Δ > 0 branch
        fit_body("objective_perturbation", epsilon=0.1, regularization=1e-4),
    ],
    ids=lambda body: f"{body['mechanism']}-{body['regularization']}",
)
def test_dry_run_quotes_the_exact_cost_and_calibration_and_spends_nothing(
    client: TestClient, site: SiteHandle, body: dict[str, Any]
) -> None:
    dataset = upload(client, site.headers)
    expected = _calibration(body)

    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )

    assert response.status_code == 200, response.text
    assert "Location" not in response.headers
    quote = response.json()
    assert quote["dry_run"] is True
    assert quote["mechanism"] == body["mechanism"]
    assert quote["private"] is True
    assert quote["cost"] == {"epsilon": expected.epsilon, "delta": expected.delta}
    assert quote["expected_noise_norm"] == expected.expected_noise_norm
    if not body["mechanism"].startswith("stacking"):  # stacking draws several noise vectors
        assert isinstance(quote["expected_noise_norm"], float)
        assert quote["expected_noise_norm"] > 0
    assert quote["composition"] == expected.composition
    assert quote["calibration"] == json_safe(dict(expected.details))
    assert quote["calibration"]["n"] == N
    assert quote["calibration"]["d"] == D
    assert quote["budget"] == {
        "remaining_epsilon": 5.0,
        "remaining_delta": 1e-5,
        "sufficient": True,
    }
    _assert_untouched(client, site, dataset["id"])


def test_dry_run_says_when_the_budget_would_not_cover_the_fit(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, spec=toy_spec(epsilon=0.3))
    body = fit_body(epsilon=0.5)

    quote = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert quote.status_code == 200, quote.text
    assert quote.json()["budget"] == {
        "remaining_epsilon": 0.3,
        "remaining_delta": 1e-5,
        "sufficient": False,
    }

    refused = client.post(f"/v1/datasets/{dataset['id']}/fits", json=body, headers=site.headers)
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["type"].endswith("budget-exhausted")
    assert problem["remaining_epsilon"] == 0.3
    assert "0.3" in problem["detail"]
    _assert_untouched(client, site, dataset["id"])


BAD_BODIES: dict[str, dict[str, Any]] = {
    "unknown mechanism": fit_body("laplace_magic"),
    "epsilon zero": fit_body(epsilon=0.0),
    "epsilon negative": fit_body(epsilon=-1.0),
    "epsilon missing": {k: v for k, v in fit_body().items() if k != "epsilon"},
    "epsilon null": fit_body(epsilon=None),
    "epsilon not a number": fit_body(epsilon="lots"),
    "delta one": fit_body(delta=1.0),
    "delta negative": fit_body(delta=-1e-9),
    "regularization zero": fit_body(regularization=0.0),
    "regularization missing for dp_sgd (no auto rule)": {
        k: v for k, v in fit_body("dp_sgd").items() if k != "regularization"
    },
    "regularization auto for stacking": fit_body("stacking_samples", regularization="auto"),
    "regularization text": fit_body(regularization="automatic"),
    "unknown loss": fit_body(loss="squared"),
    "unknown param": fit_body(params={"noise_multiplier": 1.0}),
    "unknown body field": {**fit_body(), "seed": 7},
    "huber h zero": fit_body(loss="huber", params={"h": 0.0}),
    "huber h negative": fit_body(loss="huber", params={"h": -0.5}),
    "huber h text": fit_body(loss="huber", params={"h": "wide"}),
    "gaussian objective without delta": fit_body("gaussian_objective_perturbation", delta=0.0),
    "kifer Delta too small": fit_body(
        "generalized_objective_perturbation", epsilon=0.01, params={"kifer_Delta": 0.0}
    ),
    "noisy_gd without delta": fit_body("noisy_gd", delta=0.0),
    "noisy_gd zero iterations": fit_body("noisy_gd", delta=1e-5, params={"iterations": 0}),
    "noisy_gd unknown schedule": fit_body("noisy_gd", delta=1e-5, params={"step_size": "adam"}),
    "dp_sgd zero epochs": fit_body("dp_sgd", params={"epochs": 0}),
    "dp_sgd batch larger than n": fit_body("dp_sgd", params={"batch_size": N + 1}),
    "dp_sgd eta with inverse schedule": fit_body(
        "dp_sgd", params={"schedule": "inverse", "eta": 0.1}
    ),
    "stacking overlapping groups": fit_body(
        "stacking_features", params={"feature_groups": [[0, 1], [1, 2]]}
    ),
    "stacking column out of range": fit_body(
        "stacking_features", params={"feature_groups": [[0, D]]}
    ),
    "stacking too many models": fit_body("stacking_samples", params={"n_models": N}),
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
def test_bad_requests_are_422_and_charge_nothing(
    client: TestClient, site: SiteHandle, name: str
) -> None:
    dataset = upload(client, site.headers)

    for dry_run in ("false", "true"):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits?dry_run={dry_run}",
            json=BAD_BODIES[name],
            headers=site.headers,
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
        assert response.json()["status"] == 422
    _assert_untouched(client, site, dataset["id"])


def test_another_sites_dataset_is_404_and_charges_nothing(
    client: TestClient, make_site: MakeSite
) -> None:
    owner, other = make_site(), make_site()
    dataset = upload(client, owner.headers)

    def problem(dataset_id: str, dry_run: str, body: dict[str, Any]) -> tuple[Any, ...]:
        response = client.post(
            f"/v1/datasets/{dataset_id}/fits?dry_run={dry_run}", json=body, headers=other.headers
        )
        assert response.status_code == 404, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
        found = response.json()
        return found["type"], found["title"], found["detail"]

    for dry_run in ("false", "true"):
        for body in (fit_body(), BAD_BODIES["unknown mechanism"]):
            # indistinguishable from an id that does not exist
            assert problem(dataset["id"], dry_run, body) == problem("0" * 32, dry_run, body)
    _assert_untouched(client, owner, dataset["id"])
    assert _jobs_total(client, other) == 0


def test_unknown_and_malformed_dataset_ids_are_404(client: TestClient, site: SiteHandle) -> None:
    for dataset_id in ("0" * 32, "not-an-id", "x" * 300):
        response = client.post(
            f"/v1/datasets/{dataset_id}/fits", json=fit_body(), headers=site.headers
        )
        assert response.status_code == 404, response.text
    assert _jobs_total(client, site) == 0


def test_a_deleted_dataset_takes_no_fit(client: TestClient, make_site: MakeSite) -> None:
    """Its owner is told it was deleted (409); to anyone else it does not exist (404)."""
    owner, other = make_site(), make_site()
    dataset = upload(client, owner.headers)
    deleted = client.delete(f"/v1/datasets/{dataset['id']}", headers=owner.headers)
    assert deleted.status_code in {200, 204}, deleted.text

    for dry_run in ("false", "true"):
        url = f"/v1/datasets/{dataset['id']}/fits?dry_run={dry_run}"
        response = client.post(url, json=fit_body(), headers=owner.headers)
        assert response.status_code == 409, response.text
        assert response.json()["type"].endswith("dataset-deleted")
        assert client.post(url, json=fit_body(), headers=other.headers).status_code == 404
    assert _jobs_total(client, owner) == 0
    assert budget(client, owner.headers, dataset["id"])["charges"] == []


def test_fits_need_a_site_key(
    client: TestClient, site: SiteHandle, admin_headers: dict[str, str]
) -> None:
    dataset = upload(client, site.headers)
    url = f"/v1/datasets/{dataset['id']}/fits"

    assert client.post(url, json=fit_body()).status_code == 401
    bad_key = {"Authorization": "Bearer not-a-key"}
    assert client.post(url, json=fit_body(), headers=bad_key).status_code == 401
    assert client.post(url, json=fit_body(), headers=admin_headers).status_code in {403, 404}
    _assert_untouched(client, site, dataset["id"])


def test_a_fit_is_audited_with_its_job_and_a_refused_one_leaves_no_trace(
    client: TestClient, site: SiteHandle, admin_headers: dict[str, str]
) -> None:
    """The job, its charge and its ``fit.submitted`` event are written together; a fit the
    budget cannot cover writes none of them."""
    dataset = upload(client, site.headers, spec=toy_spec(epsilon=0.7))
    accepted = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=fit_body(epsilon=0.5), headers=site.headers
    )
    assert accepted.status_code == 202, accepted.text
    refused = client.post(
        f"/v1/datasets/{dataset['id']}/fits", json=fit_body(epsilon=0.5), headers=site.headers
    )
    assert refused.status_code == 409, refused.text

    events = client.get(
        "/v1/audit-events", params={"action": "fit.submitted"}, headers=admin_headers
    ).json()["items"]
    assert [(e["subject_type"], e["subject_id"]) for e in events] == [
        ("job", accepted.json()["id"])
    ]
    assert events[0]["actor_site_id"] == site.id
    assert events[0]["details"] == {
        "dataset_id": dataset["id"],
        "mechanism": "objective_perturbation",
        "epsilon": 0.5,
        "delta": 0.0,
    }
    assert _jobs_total(client, site) == 1
    assert [c["epsilon"] for c in budget(client, site.headers, dataset["id"])["charges"]] == [0.5]


def test_an_objective_perturbation_fit_whose_certificate_is_out_of_reach_is_422(
    client: TestClient, site: SiteHandle
) -> None:
    """2000 rows of one feature, the Huber loss, λ = 1e-8 and ε = 10 (Δ = c/(n(e⁵ − 1)) − λ
    ≈ 3.4e-6): the Huber derivative's rounding at coefficients up to 1/(λ + Δ) is beyond the
    certificate's τ, so no released model could be certified; refused from public numbers,
    before any charge (issue 25 §3)."""
    spec = toy_spec(epsilon=10.0)
    spec["features"] = spec["features"][:1]
    dataset = upload(client, site.headers, raw=toy_csv(2000), spec=spec)
    body = fit_body(epsilon=10.0, loss="huber", regularization=1e-8)
    for dry_run in ("false", "true"):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits?dry_run={dry_run}", json=body, headers=site.headers
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
        assert "no minimiser can be certified" in response.json()["detail"]
    _assert_untouched(client, site, dataset["id"])
    # the logistic loss is fine there, and its record states the failure probability
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true",
        json={**body, "loss": "logistic"},
        headers=site.headers,
    )
    assert response.status_code == 200, response.text
    assert "not charged as δ" in response.text
