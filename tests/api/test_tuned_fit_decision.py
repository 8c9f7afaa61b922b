"""``selection: "auto"`` weighs the automatic λ against tuning over HTTP (docs/design.md §3,
"Tuning that declines"), on SQLite and PostgreSQL.

* Small n: random repetition's runs would cost the excess-risk bound a factor κ > 1.5, so no
  selection runs: the automatic λ (the λ a fit with ``regularization: "auto"`` gets) is fitted
  once on all rows, charged exactly the request's ε, and the quote, the job and the record say
  so with κ, the threshold and the λ.
* Larger n: κ ≤ 1.5, the tuning runs with the automatic λ among the candidates, marked.
* The quote (dry run) says which will happen; the job stores the decision and runs it.
* A request naming a method, a mechanism without pure runs, and bad input are unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.dp import FitResult
from service.dp.analysis.regularization import ESTIMATION_WEIGHT
from service.dp.analysis.selection_choice import MAX_COST_FACTOR
from service.runtime.worker import run_job
from tests.api.conftest import HeldRunner
from tests.api.test_label_tasks import MULTICLASS, uploaded
from tests.conftest import SiteHandle
from tests.unit.jobs._flow import budget, fit_body, toy_csv, upload

PROBLEM_JSON = "application/problem+json"
WAIT = {"Prefer": "wait=30"}
CANDIDATES = [1e-3, 1e-2, 1e-1]

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


def _body(epsilon: float, candidates: Any = None, **fields: Any) -> dict[str, Any]:
    return fit_body("objective_perturbation", epsilon=epsilon, **fields) | {
        "regularization": {"candidates": CANDIDATES if candidates is None else candidates}
    }


def _quote(client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]) -> Any:
    response = client.post(
        f"/v1/datasets/{dataset_id}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert response.status_code == 200, response.text
    return response.json()


def _run(client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any]) -> Any:
    response = client.post(
        f"/v1/datasets/{dataset_id}/fits", json=body, headers={**site.headers, **WAIT}
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert (job["kind"], job["status"]) == ("tuned_fit", "succeeded"), job
    return job


def _automatic_lambda(
    client: TestClient, site: SiteHandle, dataset_id: str, epsilon: float
) -> tuple[float, dict[str, Any]]:
    """The λ and rule a plain fit with ``regularization: "auto"`` gets (its dry run)."""
    quote = _quote(
        client,
        site,
        dataset_id,
        fit_body("objective_perturbation", epsilon=epsilon) | {"regularization": "auto"},
    )
    return float(quote["regularization"]), quote["regularization_rule"]


def _hand_kappa(n: int, d: int, epsilon: float, k: int) -> float:
    """κ = √(K(ε_t)/K(ε)), K = 2A/n + m₂/n², objective perturbation's m₂(ε) = 4d(d+1)/ε²
    (Gamma(d, 2/ε) norm: E‖b‖² = d(d+1)(2/ε)²), ε_t the runs' budget of PS22's η = ½ law
    (k ≤ 3: miss probability ≤ 0.15), restated from its formula: at δ = 0 the whole selection
    is charged the pure bound (2 + η)ε₀ (PS22 Thm 2), so each repetition gets ε₀ = ε/2.5 (no
    dependence on the law's γ); of ε₀ the noisy error count takes the share
    f = clamp(283/(n·ε₀), 0.02, 0.5) (its standard deviation √2/ε_s ≈ 0.5 % of the rows) and
    the fit the rest, ε_t = (1 − f)·ε₀ (e.g. n = 600, ε = 1: ε₀ = 0.4, f = ½, ε_t = 0.2;
    n = 2000, ε = 5: ε₀ = 2, f = 0.07075, ε_t = 1.8585)."""
    eps0 = epsilon / 2.5
    share = min(0.5, max(0.02, 283.0 / (n * eps0)))
    run_epsilon = (1.0 - share) * eps0

    def bound(eps: float) -> float:
        return 2 * ESTIMATION_WEIGHT / n + 4 * d * (d + 1) / (eps * eps) / n**2

    return math.sqrt(bound(run_epsilon) / bound(epsilon))


def test_a_small_dataset_declines_to_tune_and_fits_the_automatic_lambda_once(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    body = _body(1.0)  # selection omitted: auto
    lam, rule = _automatic_lambda(client, site, dataset["id"], 1.0)
    quote = _quote(client, site, dataset["id"], body)
    assert quote["cost"] == {"epsilon": 1.0, "delta": 0.0}
    decision = quote["calibration"]["tuning"]
    d = int(quote["calibration"]["d"])
    assert decision["selection"] == "automatic_lambda"
    assert decision["requested_selection"] == "auto"
    assert decision["tuned"] is False
    assert decision["candidates"] == decision["requested_candidates"] == CANDIDATES
    assert decision["automatic_regularization"] == decision["chosen_regularization"] == lam
    assert decision["automatic_regularization_is_candidate"] is False
    assert decision["regularization_rule"] == rule
    assert decision["cost_factor_threshold"] == MAX_COST_FACTOR == 1.5
    assert decision["cost_factor"] == pytest.approx(_hand_kappa(600, d, 1.0, k=3), rel=1e-9)
    assert decision["cost_factor"] > MAX_COST_FACTOR
    assert f"κ = {decision['cost_factor']:.3g} > 1.5" in decision["selection_reason"]
    # one fit on all 600 rows at the whole ε, at the automatic λ
    assert quote["calibration"]["n"] == 600
    assert quote["regularization"] == lam
    assert "auto declined to tune" in quote["composition"]

    job = _run(client, site, dataset["id"], body)
    # the job stores the decision its quote showed, and ran it
    assert job["params"]["selection"] == "auto"
    assert job["params"]["tuning_decision"] == {
        key: value for key, value in decision.items() if key != "chosen_regularization"
    }
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 1.0, "delta": 0.0, "state": "charged"}
    ]
    account = budget(client, site.headers, dataset["id"])
    assert (account["epsilon_spent"], account["delta_spent"]) == (1.0, 0.0)
    assert len(account["charges"]) == 1
    assert client.get("/v1/models", headers=site.headers).json()["total"] == 1
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    privacy = model["privacy"]
    assert (privacy["epsilon"], privacy["delta"]) == (1.0, 0.0)
    record = privacy["tuning"]
    assert record["selection"] == "automatic_lambda"
    assert record["tuned"] is False
    assert record["chosen_regularization"] == record["automatic_regularization"] == lam
    assert record["cost_factor"] == decision["cost_factor"]
    assert record["cost_factor_threshold"] == 1.5
    assert record["reason"] == decision["selection_reason"]
    assert record["epsilon_split"] == {"fit": 1.0, "selection": 0.0, "total": 1.0}
    assert record["method"].startswith("automatic λ only")
    # no held-out part, no repetition: nothing of a selection in the record
    assert not {"part_sizes", "chosen_index", "repetitions"} & set(record)


def test_a_larger_dataset_tunes_with_the_automatic_lambda_among_the_candidates(
    client: TestClient, site: SiteHandle
) -> None:
    # at ε = 5 (d = 6, k = 3) κ crosses 1.5 between n = 1000 (1.70) and n = 1500 (1.49)
    dataset = upload(client, site.headers, raw=toy_csv(n=2000, seed=4))
    small = upload(client, site.headers, raw=toy_csv(n=1000, seed=4))
    assert _quote(client, site, small["id"], _body(5.0))["calibration"]["tuning"]["tuned"] is False
    body = _body(5.0)
    lam, _ = _automatic_lambda(client, site, dataset["id"], 5.0)
    assert lam not in CANDIDATES
    quote = _quote(client, site, dataset["id"], body)
    assert quote["cost"] == {"epsilon": 5.0, "delta": 0.0}
    decision = quote["calibration"]["tuning"]
    d = int(quote["calibration"]["d"])
    assert decision["tuned"] is True
    # κ is weighed for the requested k = 3, then the method is chosen for k = 4
    assert decision["cost_factor"] == pytest.approx(_hand_kappa(2000, d, 5.0, k=3), rel=1e-9)
    assert decision["cost_factor"] <= MAX_COST_FACTOR
    assert decision["requested_candidates"] == CANDIDATES
    assert decision["candidates"] == [*CANDIDATES, lam]
    assert decision["automatic_regularization"] == lam
    assert decision["automatic_regularization_is_candidate"] is True
    assert decision["selection"] in ("cms", "papernot_steinke", "liu_talwar")
    assert [point["regularization"] for point in decision["grid"]] == [*CANDIDATES, lam]

    job = _run(client, site, dataset["id"], body)
    assert job["params"]["tuning_decision"]["selection"] == decision["selection"]
    assert job["params"]["tuning_decision"]["candidates"] == [*CANDIDATES, lam]
    assert job["charges"] == [
        {"dataset_id": dataset["id"], "epsilon": 5.0, "delta": 0.0, "state": "charged"}
    ]
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 5.0
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    record = model["privacy"]["tuning"]
    assert record["candidates"] == [*CANDIDATES, lam]
    assert record["automatic_regularization"] == lam
    assert record["automatic_regularization_is_candidate"] is True
    assert record["selection"] == decision["selection"]
    assert record["chosen_regularization"] in record["candidates"]


def test_the_automatic_lambda_already_among_the_candidates_is_marked_not_repeated(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=2000, seed=4))
    lam, _ = _automatic_lambda(client, site, dataset["id"], 5.0)
    quote = _quote(client, site, dataset["id"], _body(5.0, [lam, 1e-1]))
    decision = quote["calibration"]["tuning"]
    assert decision["candidates"] == decision["requested_candidates"] == [lam, 1e-1]
    assert decision["automatic_regularization_is_candidate"] is True


def test_a_multiclass_dataset_weighs_the_task_rule(client: TestClient, site: SiteHandle) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    quote = _quote(
        client,
        site,
        dataset["id"],
        {"mechanism": "objective_perturbation", "epsilon": 1.0, "regularization": "auto"},
    )
    body = {
        "mechanism": "objective_perturbation",
        "epsilon": 1.0,
        "regularization": {"candidates": CANDIDATES},
    }
    decision = _quote(client, site, dataset["id"], body)["calibration"]["tuning"]
    assert decision["automatic_regularization"] == quote["regularization"]
    assert decision["regularization_rule"] == quote["regularization_rule"]
    assert decision["selection"] == "automatic_lambda"
    job = _run(client, site, dataset["id"], body)
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 1.0
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    assert model["privacy"]["tuning"]["chosen_regularization"] == quote["regularization"]


@pytest.mark.parametrize(
    "body",
    [
        # a method named: today's behaviour
        _body(1.0) | {"selection": "papernot_steinke"},
        _body(1.0) | {"selection": "cms"},
        # no automatic λ for this mechanism's tuning (output perturbation)
        fit_body("output_perturbation", epsilon=1.0) | {"regularization": {"candidates": [1e-2]}},
    ],
)
def test_a_named_method_or_another_mechanism_does_not_weigh_the_automatic_lambda(
    client: TestClient, site: SiteHandle, body: dict[str, Any]
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    quote = _quote(client, site, dataset["id"], body)
    decision = quote["calibration"]["tuning"]
    assert decision["selection"] != "automatic_lambda"
    assert decision["candidates"] == body["regularization"]["candidates"]
    assert not {"automatic_regularization", "cost_factor", "tuned"} & set(decision)


@pytest.mark.parametrize(
    "candidates",
    [[1e-3, 1e-3], [0.0, 1e-2], [1e-3] + [1e-2 * (i + 1) for i in range(20)], []],
)
def test_bad_candidates_on_a_dataset_that_would_decline_are_422_and_charge_nothing(
    client: TestClient, site: SiteHandle, candidates: list[float]
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    for query in ("?dry_run=true", ""):
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits{query}",
            json=_body(1.0, candidates),
            headers=site.headers,
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert budget(client, site.headers, dataset["id"])["charges"] == []
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0


def _submit_held(client: TestClient, site: SiteHandle, dataset_id: str, body: Any) -> Any:
    response = client.post(f"/v1/datasets/{dataset_id}/fits", json=body, headers=site.headers)
    assert response.status_code == 202, response.text
    return response.json()


def _set_params(app: FastAPI, job_id: str, params: dict[str, Any]) -> None:
    with app.state.uow_factory() as uow:
        job = uow.jobs.get(job_id)
        assert job is not None
        job.params = params
        uow.commit()


def test_the_worker_runs_the_stored_decision_one_fit_at_the_automatic_lambda(
    app: FastAPI, client: TestClient, site: SiteHandle, held: HeldRunner
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    lam, _ = _automatic_lambda(client, site, dataset["id"], 1.0)
    job = _submit_held(client, site, dataset["id"], _body(1.0))
    assert job["params"]["tuning_decision"]["selection"] == "automatic_lambda"
    seen: list[tuple[int, float, float, float]] = []

    def spying_fit(*args: Any, **kwargs: Any) -> FitResult:
        from service.dp import fit as dp_fit

        seen.append((args[0].n, kwargs["regularization"], kwargs["epsilon"], kwargs["delta"]))
        return dp_fit(*args, **kwargs)

    assert run_job(app.state.uow_factory, job["id"], fit=spying_fit).status == "succeeded"
    # exactly one fit: all 600 rows, the automatic λ, the whole (ε, δ)
    assert seen == [(600, lam, 1.0, 0.0)]


def _must_not_fit(*_: Any, **__: Any) -> FitResult:
    raise AssertionError("a job whose decision does not hold was fitted")


@pytest.mark.parametrize("tamper", ["selection", "cost_factor"])
def test_a_job_whose_stored_decision_differs_fails_and_releases_nothing(
    app: FastAPI, client: TestClient, site: SiteHandle, held: HeldRunner, tamper: str
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    job = _submit_held(client, site, dataset["id"], _body(1.0))
    params = dict(job["params"])
    decision = dict(params["tuning_decision"])
    decision[tamper] = "papernot_steinke" if tamper == "selection" else 1.0
    _set_params(app, job["id"], params | {"tuning_decision": decision})

    assert run_job(app.state.uow_factory, job["id"], fit=_must_not_fit).status == "failed"
    failed = client.get(f"/v1/jobs/{job['id']}", headers=site.headers).json()
    assert failed["model_id"] is None
    assert failed["error"]["type"].endswith("/plan-mismatch")
    assert client.get("/v1/models", headers=site.headers).json()["total"] == 0
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 1.0


def test_a_job_stored_without_a_decision_tunes_as_before(
    app: FastAPI, client: TestClient, site: SiteHandle, held: HeldRunner
) -> None:
    dataset = upload(client, site.headers, raw=toy_csv(n=600, seed=4))
    job = _submit_held(client, site, dataset["id"], _body(1.0))
    params = {k: v for k, v in job["params"].items() if k != "tuning_decision"}
    _set_params(app, job["id"], params)  # a row written before the decision was stored

    assert run_job(app.state.uow_factory, job["id"]).status == "succeeded"
    finished = client.get(f"/v1/jobs/{job['id']}", headers=site.headers).json()
    model = client.get(f"/v1/models/{finished['model_id']}", headers=site.headers).json()
    record = model["privacy"]["tuning"]
    assert record["selection"] != "automatic_lambda"
    assert record["candidates"] == CANDIDATES
    assert "automatic_regularization" not in record


def test_a_declined_tuning_on_a_wide_small_dataset_fits_autos_projection(
    client: TestClient, site: SiteHandle
) -> None:
    from service.dp.analysis.regularization import auto_regularization
    from tests.api.test_auto_fits import wide_upload

    dataset = wide_upload(client, site)  # n = 400, d = 31
    body = _body(1.0)
    lam, _ = _automatic_lambda(client, site, dataset["id"], 1.0)
    quote = _quote(client, site, dataset["id"], body)
    decision = quote["calibration"]["tuning"]
    assert decision["selection"] == "automatic_lambda"
    # κ and the candidates weigh the unprojected automatic λ; the one fit is projected by
    # auto's rule: nε = 400, k = ⌈0.14142·400^(2/3)⌉ = ⌈7.68⌉ = 8, 3·8 < 31, at the
    # automatic λ for d = 8
    projected = auto_regularization("objective_perturbation", n=400, d=8, epsilon=1.0)
    assert decision["automatic_regularization"] == lam
    assert decision["projection_rule"]["projection_dim"] == 8
    assert decision["fitted_regularization"] == pytest.approx(projected.regularization)
    assert decision["chosen_regularization"] == decision["fitted_regularization"]
    assert quote["regularization"] == decision["fitted_regularization"]
    assert quote["calibration"]["noise_dimension"] == 8
    assert "projected to k = 8" in quote["composition"]

    job = _run(client, site, dataset["id"], body)
    assert job["params"]["tuning_decision"] == {
        key: value for key, value in decision.items() if key != "chosen_regularization"
    }
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    assert len(model["coefficients"]) == 31
    record = model["privacy"]["tuning"]
    assert record["projection_rule"] == decision["projection_rule"]
    assert record["chosen_regularization"] == decision["fitted_regularization"]
    assert model["privacy"]["calibration"]["noise_dimension"] == 8
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == 1.0
