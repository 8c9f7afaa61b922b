"""``"mechanism": "auto"`` and the majority-baseline warning over HTTP (issue 28 items 3–5).

Auto is resolved at submission from public quantities: the dry run and the job say what was
chosen and why (every candidate's predicted figures), the charge is the request's ε, and the
model's record repeats the choice. Without a public baseline, auto spends a public slice of
that ε on a noisy count of the positive labels, and the record carries the count, the band at
its baseline and any warning. Contradictory requests are 422s with nothing charged. A fit
expected to do worse than the majority class (the site's public reference dataset gives the
baseline) carries a ``below_majority_baseline`` warning in the quote, the job and the record.
Every test runs on SQLite and on PostgreSQL (the twin is heavy, tests/conftest.py).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.dp import calibrate
from service.dp.analysis.baseline import count_noise_sd, reference_majority
from service.dp.analysis.regularization import auto_regularization
from tests.conftest import SiteHandle
from tests.unit.jobs._flow import budget, fit_body, toy_spec, upload, wait_job

PROBLEM_JSON = "application/problem+json"
N = 200


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def skewed_csv(n: int = N, seed: int = 0) -> bytes:
    """The toy columns with a rare positive class: y = yes iff x1 > 1 (about 16 % yes), a
    linear rule, so a precise fit beats the majority class and a noisy one does not."""
    rng = np.random.default_rng(seed)
    lines = ["x1,x2,color,y"]
    for _ in range(n):
        x1 = float(rng.normal())
        x2 = float(rng.uniform(0.0, 10.0))
        color = str(rng.choice(["red", "green", "blue"]))
        lines.append(f"{x1:.4f},{x2:.4f},{color},{'yes' if x1 > 1.0 else 'no'}")
    return ("\n".join(lines) + "\n").encode()


def _fit(
    client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any], dry: bool
) -> Any:
    suffix = "?dry_run=true" if dry else ""
    return client.post(f"/v1/datasets/{dataset_id}/fits{suffix}", json=body, headers=site.headers)


def _untouched(client: TestClient, site: SiteHandle, dataset_id: str) -> None:
    state = budget(client, site.headers, dataset_id)
    assert state["epsilon_spent"] == 0.0
    assert state["charges"] == []
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0


def _auto(**fields: Any) -> dict[str, Any]:
    body = fit_body("auto", epsilon=1.0, delta=1e-6)
    del body["regularization"]
    body.update(fields)
    return body


def test_auto_dry_run_names_the_choice_and_every_candidate(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)

    response = _fit(client, site, dataset["id"], _auto(), dry=True)

    assert response.status_code == 200, response.text
    quote = response.json()
    auto = quote["auto"]
    chosen = auto["chosen"]
    assert quote["mechanism"] == chosen["mechanism"] != "auto"
    scored = [c for c in auto["candidates"] if "predicted_accuracy" in c]
    # the rule stated: the first in the order of preference unless a later one is clearly
    # better on the same draws (service/dp/analysis/auto.py; the paired test is unit-tested)
    assert "order of preference" in auto["rule"]
    best = next(
        c
        for c in scored
        if (c["mechanism"], c["regularization"]) == (chosen["mechanism"], chosen["regularization"])
    )
    assert best["predicted_accuracy"]["mean"] == auto["predicted_accuracy"]
    if best is not scored[0]:  # a switch needs a gain above the minimum
        assert best["predicted_accuracy"]["mean"] > scored[0]["predicted_accuracy"]["mean"] + 0.01
    # λ omitted: each mechanism's automatic λ at the fit's ε (the request's less the private
    # count's 5 %), the grid for DP-SGD; δ > 0, so the Gaussian mechanisms are candidates
    fit_epsilon = quote["expected_accuracy"]["private_baseline"]["fit_epsilon"]
    for c in auto["candidates"]:
        if c["mechanism"] == "dp_sgd":
            assert c["regularization"] in {1e-4, 1e-3, 1e-2, 1e-1}
        else:
            rule = auto_regularization(
                c["mechanism"], n=N, d=dataset["n_features"], epsilon=fit_epsilon, delta=1e-6
            )
            assert c["regularization"] == rule.regularization
    assert any(c["mechanism"] == "gaussian_objective_perturbation" for c in scored)
    # the quoted cost is the chosen mechanism's own calibration at the fit's ε and δ, plus
    # the count's ε: the request's ε
    calibration = calibrate(
        chosen["mechanism"],
        n=N,
        d=dataset["n_features"],
        epsilon=fit_epsilon,
        delta=1e-6,
        regularization=chosen["regularization"],
    )
    assert quote["cost"] == {"epsilon": 1.0, "delta": calibration.delta}
    assert quote["expected_accuracy"]["majority_baseline"] is None  # no public source
    assert quote["warnings"] == []
    _untouched(client, site, dataset["id"])
    # deterministic in the public inputs: the same answer again
    again = _fit(client, site, dataset["id"], _auto(), dry=True).json()
    assert again["auto"] == auto


def test_auto_with_a_given_lambda_and_delta_zero_keeps_to_them(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)

    quote = _fit(
        client, site, dataset["id"], _auto(delta=0.0, regularization=0.01), dry=True
    ).json()

    candidates = quote["auto"]["candidates"]
    assert {c["regularization"] for c in candidates} == {0.01}
    gaussian = [c for c in candidates if c["mechanism"] == "gaussian_objective_perturbation"]
    assert gaussian
    assert all("delta" in c["excluded"] for c in gaussian)
    assert quote["auto"]["chosen"]["mechanism"] != "gaussian_objective_perturbation"
    assert quote["cost"]["delta"] == 0.0


def test_auto_fit_charges_epsilon_and_records_the_choice(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    quote = _fit(client, site, dataset["id"], _auto(), dry=True).json()

    response = _fit(client, site, dataset["id"], _auto(), dry=False)

    assert response.status_code == 202, response.text
    job = response.json()
    assert job["params"]["requested_mechanism"] == "auto"
    assert job["params"]["mechanism"] == quote["mechanism"]
    assert job["params"]["auto"] == quote["auto"]
    assert job["warnings"] == []
    done = wait_job(client, site.headers, job["id"])
    assert done["status"] == "succeeded", done
    model = client.get(f"/v1/models/{done['model_id']}", headers=site.headers).json()
    record = model["privacy"]
    assert record["mechanism"] == quote["mechanism"]
    assert record["requested_mechanism"] == "auto"
    assert record["auto"]["chosen"] == quote["auto"]["chosen"]
    # no public baseline: the record's band is the one re-simulated at the private count's
    # baseline (the quote's had none yet)
    assert quote["expected_accuracy"]["majority_baseline"] is None
    assert record["expected_accuracy"]["baseline_source"] == "private_count"
    assert record["expected_accuracy"]["majority_baseline"] == reference_majority(
        record["private_baseline"]["majority_baseline"]
    )
    state = budget(client, site.headers, dataset["id"])
    assert state["epsilon_spent"] == pytest.approx(1.0)


def test_auto_without_a_public_baseline_pays_a_private_count_within_the_request(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    # n = 200, ε = 1: the share √2/(n·ε·0.01) = 0.71 is capped at 5 %: the count gets 0.05,
    # the fit 0.95 (service/dp/analysis/baseline.py), both charged in the one job
    quote = _fit(client, site, dataset["id"], _auto(), dry=True).json()

    plan = quote["expected_accuracy"]["private_baseline"]
    assert quote["expected_accuracy"]["baseline_source"] == "private_count"
    assert plan["epsilon"] == pytest.approx(0.05, rel=1e-12)
    assert plan["fit_epsilon"] == pytest.approx(0.95, rel=1e-12)
    assert plan["requested_epsilon"] == 1.0
    assert quote["auto"]["simulated_epsilon"] == pytest.approx(0.95, rel=1e-12)  # chosen at 0.95
    assert quote["cost"]["epsilon"] == 1.0

    job = _fit(client, site, dataset["id"], _auto(), dry=False).json()
    assert job["params"]["epsilon"] == pytest.approx(0.95, rel=1e-12)
    assert job["params"]["private_baseline"] == plan
    [charge] = job["charges"]
    assert charge["epsilon"] == 1.0  # the fit's 0.95 and the count's 0.05
    done = wait_job(client, site.headers, job["id"])
    assert done["status"] == "succeeded", done
    record = client.get(f"/v1/models/{done['model_id']}", headers=site.headers).json()["privacy"]
    assert record["epsilon"] == pytest.approx(0.95, rel=1e-12)  # the model's own release
    count = record["private_baseline"]
    assert count["epsilon"] == pytest.approx(0.05, rel=1e-12)
    assert count["scale"] == pytest.approx(20.0)
    assert count["sensitivity"] == 1
    assert isinstance(count["noisy_positive_count"], int)
    assert "majority" not in json.dumps(count["guarantee"])  # no private value in words
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == pytest.approx(1.0)
    # a named mechanism pays no slice: no baseline, no count, the fit at the whole ε
    plain = _fit(
        client, site, dataset["id"], fit_body("objective_perturbation", epsilon=1.0), dry=True
    ).json()
    assert plain["expected_accuracy"] is None
    assert plain["cost"]["epsilon"] == 1.0
    assert plain["calibration"]["epsilon"] == 1.0


def test_auto_below_its_private_baseline_is_warned_in_the_record(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers, raw=skewed_csv(seed=5))
    # ε = 0.05 on 200 rows: the count gets ε_b = 0.0025, its fraction's sd √Var/n ≈ 2.8, so
    # the threshold baseline + 1.645·sd is above 1 and every band is below it
    response = _fit(client, site, dataset["id"], _auto(epsilon=0.05), dry=False)
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["warnings"] == []  # at submission no baseline is known yet
    assert job["charges"][0]["epsilon"] == 0.05

    done = wait_job(client, site.headers, job["id"])

    assert done["status"] == "succeeded", done
    record = client.get(f"/v1/models/{done['model_id']}", headers=site.headers).json()["privacy"]
    [warning] = record["warnings"]
    assert warning["code"] == "below_majority_baseline"
    assert "estimated privately" in warning["message"]
    expected = record["expected_accuracy"]
    assert expected["baseline_sd"] == pytest.approx(
        count_noise_sd(N, record["private_baseline"]["epsilon"])
    )
    assert expected["warning_threshold"] > 1.0 > expected["mean"]
    assert record["private_baseline"]["epsilon"] == pytest.approx(0.0025, rel=1e-12)


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"regularization": {"candidates": [0.01, 0.1]}}, "regularization"),
        ({"params": {"eta": {"candidates": [0.1, 1.0]}}}, "eta"),
        ({"params": {"epochs": 3}}, "params"),
        ({"params": {"kifer_Delta": 2.0}}, "params"),
        ({"epsilon": None}, "epsilon"),
    ],
)
@pytest.mark.parametrize("dry", [True, False])
def test_auto_with_contradicting_options_is_422_and_charges_nothing(
    client: TestClient, site: SiteHandle, fields: dict[str, Any], loc: str, dry: bool
) -> None:
    dataset = upload(client, site.headers)

    response = _fit(client, site, dataset["id"], _auto(**fields), dry=dry)

    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    assert loc in response.text
    _untouched(client, site, dataset["id"])


def test_a_concrete_mechanism_without_lambda_takes_the_public_rule(
    client: TestClient, site: SiteHandle
) -> None:
    # mechanism auto chooses λ with the mechanism; a named mechanism without λ gets the
    # public rule's λ (service.dp.analysis.regularization), not auto's grid
    dataset = upload(client, site.headers)
    body = fit_body("objective_perturbation")
    del body["regularization"]

    response = _fit(client, site, dataset["id"], body, dry=True)

    assert response.status_code == 200, response.text
    quote = response.json()
    assert quote["mechanism"] == "objective_perturbation"
    assert quote["auto"] is None
    assert quote["regularization_rule"]["mechanism"] == "objective_perturbation"
    assert quote["regularization"] == quote["regularization_rule"]["regularization"]


def _with_public_reference(
    client: TestClient, site: SiteHandle, public_rows: int = N
) -> tuple[str, str]:
    """A private dataset and the site's public reference with the same spec."""
    public = upload(
        client,
        site.headers,
        raw=skewed_csv(n=public_rows, seed=1),
        spec=toy_spec(allow_non_private=True),
    )
    private = upload(client, site.headers, raw=skewed_csv(seed=2), spec=toy_spec())
    return private["id"], public["id"]


def test_noisy_fit_below_the_majority_baseline_is_warned_everywhere(
    client: TestClient, site: SiteHandle
) -> None:
    dataset_id, public_id = _with_public_reference(client, site)
    # ε·n·λ = 0.02·200·1e-4: the output noise norm 2d/(nλε) ≈ 3000 swamps every coefficient
    body = fit_body("output_perturbation", epsilon=0.02, regularization=1e-4)

    quote = _fit(client, site, dataset_id, body, dry=True).json()

    expected = quote["expected_accuracy"]
    assert expected["baseline_source"] == "public_reference_dataset"
    assert expected["reference_dataset_id"] == public_id
    # the baseline is the public rows' majority frequency, counted here by hand
    labels = [line.endswith(",yes") for line in skewed_csv(seed=1).decode().split("\n")[1:-1]]
    assert expected["majority_baseline"] == pytest.approx(1 - sum(labels) / len(labels))
    assert expected["mean"] < expected["majority_baseline"]
    [warning] = quote["warnings"]
    assert warning["code"] == "below_majority_baseline"

    job = _fit(client, site, dataset_id, body, dry=False).json()
    assert [w["code"] for w in job["warnings"]] == ["below_majority_baseline"]
    done = wait_job(client, site.headers, job["id"])
    assert done["warnings"] == job["warnings"]
    model = client.get(f"/v1/models/{done['model_id']}", headers=site.headers).json()
    assert model["privacy"]["warnings"] == job["warnings"]


def test_a_precise_fit_carries_no_warning_and_auto_uses_the_public_reference(
    client: TestClient, site: SiteHandle
) -> None:
    dataset_id, public_id = _with_public_reference(client, site)

    body = fit_body("objective_perturbation", epsilon=200.0, regularization=1e-4)
    quote = _fit(client, site, dataset_id, body, dry=True).json()
    auto = _fit(client, site, dataset_id, _auto(epsilon=200.0), dry=True).json()

    assert (
        quote["expected_accuracy"]["mean"] > quote["expected_accuracy"]["majority_baseline"] + 0.02
    )
    assert quote["warnings"] == []
    assert auto["auto"]["reference"] == "public_reference_dataset"
    assert auto["auto"]["reference_dataset_id"] == public_id
    assert auto["warnings"] == []


def test_the_planner_states_the_majority_baseline_of_its_reference(
    client: TestClient, site: SiteHandle
) -> None:
    dataset_id, public_id = _with_public_reference(client, site)
    body = {
        "mechanism": "output_perturbation",
        "epsilons": [0.02, 500.0],
        "regularizations": [1e-4],
        "reference_dataset_id": public_id,
        "repeats": 4,
        "seed": 3,
    }

    response = client.post(f"/v1/datasets/{dataset_id}/plans", json=body, headers=site.headers)

    assert response.status_code == 200, response.text
    plan = response.json()
    labels = [line.endswith(",yes") for line in skewed_csv(seed=1).decode().split("\n")[1:-1]]
    assert plan["majority_baseline"] == pytest.approx(1 - sum(labels) / len(labels))
    low, high = plan["points"]
    assert low["below_majority_baseline"] is True
    assert high["below_majority_baseline"] is (
        high["simulated_accuracy"]["mean"] < plan["majority_baseline"]
    )
    without = client.post(
        f"/v1/datasets/{dataset_id}/plans",
        json={"mechanism": "output_perturbation", "epsilons": [1.0]},
        headers=site.headers,
    ).json()
    assert without["majority_baseline"] is None


def test_a_declared_public_prior_gives_the_baseline_and_the_warning(
    client: TestClient, site: SiteHandle
) -> None:
    # no public reference; the spec declares P(yes) = 0.16, so the baseline is 0.84
    spec = {**toy_spec(), "positive_fraction": 0.16}
    dataset = upload(client, site.headers, raw=skewed_csv(seed=4), spec=spec)
    assert (
        client.get(f"/v1/datasets/{dataset['id']}", headers=site.headers).json()["spec"][
            "positive_fraction"
        ]
        == 0.16
    )
    noisy = fit_body("output_perturbation", epsilon=0.02, regularization=1e-4)

    quote = _fit(client, site, dataset["id"], noisy, dry=True).json()

    expected = quote["expected_accuracy"]
    assert expected["baseline_source"] == "spec_prior"
    assert expected["majority_baseline"] == pytest.approx(0.84)
    assert expected["reference"] == "synthetic"
    assert [w["code"] for w in quote["warnings"]] == ["below_majority_baseline"]
    _untouched(client, site, dataset["id"])


@pytest.mark.parametrize("prior", [0.0, 1.0, -0.5, "half"])
def test_a_prior_outside_zero_one_is_refused(
    client: TestClient, site: SiteHandle, prior: Any
) -> None:
    response = client.post(
        "/v1/datasets",
        files={
            "file": ("toy.csv", skewed_csv(), "text/csv"),
            "spec": (None, json.dumps({**toy_spec(), "positive_fraction": prior})),
        },
        headers=site.headers,
    )
    assert response.status_code == 422, response.text
    assert "positive_fraction" in response.text


def test_a_retried_auto_fit_finds_its_job_even_once_the_dataset_is_deleted(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    headers = {**site.headers, "Idempotency-Key": "auto-fit-1"}
    path = f"/v1/datasets/{dataset['id']}/fits"

    first = client.post(path, json=_auto(), headers=headers)
    assert first.status_code == 202, first.text
    again = client.post(path, json=_auto(), headers=headers)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert wait_job(client, site.headers, first.json()["id"])["status"] == "succeeded"
    deleted = client.delete(f"/v1/datasets/{dataset['id']}", headers=site.headers)
    assert deleted.status_code in {200, 204}, deleted.text

    after = client.post(path, json=_auto(), headers=headers)

    assert after.json()["id"] == first.json()["id"], after.text
    assert after.headers["Idempotent-Replayed"] == "true"
    state = budget(client, site.headers, dataset["id"])
    assert len(state["charges"]) == 1


def test_an_auto_plan_uses_the_public_reference_by_default(
    client: TestClient, site: SiteHandle
) -> None:
    dataset_id, public_id = _with_public_reference(client, site)
    body = {"mechanism": "auto", "epsilons": [0.02, 200.0], "delta": 1e-6}

    response = client.post(f"/v1/datasets/{dataset_id}/plans", json=body, headers=site.headers)

    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["mechanism"] == "auto"
    assert plan["reference_dataset_id"] == public_id
    labels = [line.endswith(",yes") for line in skewed_csv(seed=1).decode().split("\n")[1:-1]]
    assert plan["majority_baseline"] == pytest.approx(1 - sum(labels) / len(labels))
    low, high = plan["points"]
    # each point names auto's choice at its ε, and the cost is that mechanism's own
    for point in (low, high):
        assert point["mechanism"] in {
            "transfer",
            "objective_perturbation",
            "generalized_objective_perturbation",
            "output_perturbation",
            "gaussian_objective_perturbation",
            "noisy_gd",
            "dp_sgd",
        }
        assert point["spent_epsilon"] == point["epsilon"]
    assert high["simulated_accuracy"]["mean"] > plan["majority_baseline"]
    assert high["below_majority_baseline"] is False
    assert budget(client, site.headers, dataset_id)["charges"] == []
    too_many = client.post(
        f"/v1/datasets/{dataset_id}/plans",
        json={**body, "epsilons": [0.1 * (i + 1) for i in range(9)]},
        headers=site.headers,
    )
    assert too_many.status_code == 422


def test_an_auto_plan_without_a_public_baseline_chooses_as_the_fit_would(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    body = {"mechanism": "auto", "epsilons": [1.0], "delta": 1e-6}

    response = client.post(f"/v1/datasets/{dataset['id']}/plans", json=body, headers=site.headers)

    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["majority_baseline"] is None
    assert any("private count" in note for note in plan["notes"])
    [point] = plan["points"]
    # the dry run of the same auto fit: the same choice, at ε less the count's 5 %
    quote = _fit(client, site, dataset["id"], _auto(), dry=True).json()
    assert point["mechanism"] == quote["auto"]["chosen"]["mechanism"]
    assert point["regularization"] == quote["auto"]["chosen"]["regularization"]
    assert point["epsilon"] == 1.0
    assert point["spent_epsilon"] == quote["cost"]["epsilon"] == 1.0
    assert budget(client, site.headers, dataset["id"])["charges"] == []


def test_an_auto_plan_draws_as_svg(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/plans",
        json={"mechanism": "auto", "epsilons": [0.5, 2.0]},
        headers={**site.headers, "Accept": "image/svg+xml"},
    )
    assert response.status_code == 200, response.text
    assert response.text.startswith("<svg")


def test_auto_on_a_dataset_too_wide_to_simulate_is_422_and_a_fit_has_no_band(
    client: TestClient, site: SiteHandle
) -> None:
    categories = [f"c{i}" for i in range(300)]  # 300 one-hot columns + x1 + intercept
    spec = {
        "name": "wide",
        "label": {"column": "y", "positive": "yes"},
        "features": [
            {"column": "x1", "type": "numeric", "lower": -3, "upper": 3},
            {"column": "cat", "type": "categorical", "categories": categories},
        ],
        "budget": {"epsilon": 5.0, "delta": 1e-5},
    }
    rng = np.random.default_rng(5)
    rows = [f"{rng.normal():.3f},c{i % 300},{'yes' if i % 3 else 'no'}" for i in range(400)]
    raw = ("x1,cat,y\n" + "\n".join(rows) + "\n").encode()
    dataset = upload(client, site.headers, raw=raw, spec=spec)
    assert dataset["n_features"] > 256

    refused = _fit(client, site, dataset["id"], _auto(), dry=False)
    plain = _fit(client, site, dataset["id"], fit_body("objective_perturbation"), dry=True)

    assert refused.status_code == 422, refused.text
    assert "at most 256" in refused.text
    assert plain.status_code == 200, plain.text
    assert plain.json()["expected_accuracy"] is None
    _untouched(client, site, dataset["id"])


def test_auto_transfers_towards_the_public_model_when_that_predicts_best(
    client: TestClient, site: SiteHandle
) -> None:
    # 200 private rows and 2,000 public ones: at ε = 0.5 objective perturbation's coefficient
    # noise is ≈ (2d/ε′)/(n(λ + Δ)) ≈ 48/0.9 ≈ 50 against a source pulled to by η = 0.1,
    # where it is ≈ 48/21 ≈ 2.3: transfer predicts far better than any private-only candidate
    dataset_id, public_id = _with_public_reference(client, site, public_rows=2000)
    body = _auto(epsilon=0.5, delta=0.0)

    quote = _fit(client, site, dataset_id, body, dry=True).json()

    transfer = [c for c in quote["auto"]["candidates"] if c["mechanism"] == "transfer"]
    assert {c["params"]["transfer_strength"] for c in transfer} == {1e-3, 1e-2, 1e-1}
    # n·ε = 10: objective perturbation's noise swamps every fit that is not pulled towards
    # the public rows' own model, so transfer is the choice
    assert quote["mechanism"] == "transfer"
    assert quote["auto"]["source"]["reference_dataset_id"] == public_id
    assert quote["cost"] == {"epsilon": 0.5, "delta": 0.0}
    job = _fit(client, site, dataset_id, body, dry=False).json()
    source = job["params"]["params"]["source"]
    assert len(source) == 6
    done = wait_job(client, site.headers, job["id"])
    assert done["status"] == "succeeded", done
    record = client.get(f"/v1/models/{done['model_id']}", headers=site.headers).json()["privacy"]
    assert record["mechanism"] == "transfer"
    assert record["epsilon"] == 0.5
    assert (
        record["calibration"]["transfer_strength"] == job["params"]["params"]["transfer_strength"]
    )
    assert budget(client, site.headers, dataset_id)["epsilon_spent"] == pytest.approx(0.5)


def test_transfer_is_not_a_mechanism_a_request_can_name(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    body = fit_body(
        "transfer", params={"transfer_strength": 0.1, "source": [0.0] * 6}, regularization=0.01
    )
    response = _fit(client, site, dataset["id"], body, dry=False)
    assert response.status_code == 422, response.text
    _untouched(client, site, dataset["id"])


def test_an_auto_plan_may_choose_transfer(client: TestClient, site: SiteHandle) -> None:
    dataset_id, _ = _with_public_reference(client, site, public_rows=2000)
    response = client.post(
        f"/v1/datasets/{dataset_id}/plans",
        json={"mechanism": "auto", "epsilons": [0.5]},
        headers=site.headers,
    )
    assert response.status_code == 200, response.text
    [point] = response.json()["points"]
    assert point["mechanism"] == "transfer"
    assert point["spent_epsilon"] == 0.5


def wide_upload(client: TestClient, site: SiteHandle, n: int = 400, m: int = 30) -> Any:
    """n rows of m correlated numeric columns in [0, 1] (one latent factor and noise) and a
    label from the factor: d = m + 1 encoded columns with the intercept."""
    rng = np.random.default_rng(7)
    factor = rng.uniform(0.0, 1.0, n)
    X = np.clip(factor[:, None] * 0.7 + rng.uniform(0.0, 0.3, (n, m)), 0.0, 1.0)
    lines = [",".join([*(f"x{j}" for j in range(m)), "y"])]
    for row, f in zip(X, factor, strict=True):
        lines.append(",".join([*(f"{v:.4f}" for v in row), "yes" if f > 0.5 else "no"]))
    spec = {
        "name": "wide",
        "label": {"column": "y", "positive": "yes"},
        "features": [
            {"column": f"x{j}", "type": "numeric", "lower": 0, "upper": 1} for j in range(m)
        ],
        "budget": {"epsilon": 5.0, "delta": 1e-5},
    }
    return upload(client, site.headers, raw=("\n".join(lines) + "\n").encode(), spec=spec)


def test_auto_projects_a_wide_small_dataset_by_the_public_rule(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = wide_upload(client, site)
    assert dataset["n_features"] == 31
    body = _auto(delta=0.0)
    quote = _fit(client, site, dataset["id"], body, dry=True).json()
    # n = 400, ε = 1: the count takes 0.05, the fit 0.95 (as above); nε = 380 →
    # k = ⌈0.14142·380^(2/3)⌉ = ⌈0.14142·52.47⌉ = ⌈7.42⌉ = 8, and 3·8 = 24 < 31: projected,
    # λ the automatic λ at d = 8
    lam = auto_regularization("objective_perturbation", n=400, d=8, epsilon=0.95)
    assert quote["mechanism"] == "objective_perturbation"
    assert quote["auto"]["chosen"]["params"] == {"projection_dim": 8}
    assert quote["auto"]["chosen"]["regularization"] == pytest.approx(lam.regularization)
    rule = quote["auto"]["projection_rule"]
    assert rule["projection_dim"] == 8
    assert rule["inputs"] == {"n": 400, "d": 31, "epsilon": pytest.approx(0.95)}
    assert rule["unprojected"]["params"] == {}
    assert quote["calibration"]["noise_dimension"] == 8

    job = _fit(client, site, dataset["id"], body, dry=False).json()
    assert job["params"]["params"]["projection_dim"] == 8
    done = wait_job(client, site.headers, job["id"])
    assert done["status"] == "succeeded", done
    model = client.get(f"/v1/models/{done['model_id']}", headers=site.headers).json()
    assert model["privacy"]["auto"]["projection_rule"] == rule
    assert len(model["coefficients"]) == 31  # folded back to the dataset's columns
    assert budget(client, site.headers, dataset["id"])["epsilon_spent"] == pytest.approx(1.0)


def test_an_auto_plan_shows_the_projection_its_fit_would_use(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = wide_upload(client, site)
    body = {"mechanism": "auto", "epsilons": [1.0], "delta": 0.0}

    response = client.post(f"/v1/datasets/{dataset['id']}/plans", json=body, headers=site.headers)

    assert response.status_code == 200, response.text
    [point] = response.json()["points"]
    quote = _fit(client, site, dataset["id"], _auto(delta=0.0), dry=True).json()
    assert point["projection_rule"] == quote["auto"]["projection_rule"]
    assert point["projection_rule"]["projection_dim"] == 8
    assert point["regularization"] == quote["auto"]["chosen"]["regularization"]
    assert budget(client, site.headers, dataset["id"])["charges"] == []
