"""Any numeric parameter, however extreme, gets a 4xx naming it or a fit that runs: never a
500, and a refused request never charges the ledger (issue: 500s from valid JSON)."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SiteHandle

pytestmark = pytest.mark.slow

HEADER = "age,colour,income,outcome"
PRIVATE = (
    "objective_perturbation",
    "output_perturbation",
    "gaussian_objective_perturbation",
    "generalized_objective_perturbation",
    "dp_sgd",
    "stacking_samples",
)

EXTREMES = [
    5e-324,
    1e-300,
    1e-12,
    1e-6,
    0.5,
    1.0,
    3.0,
    1e6,
    1e10,
    1e300,
    1e308,
    1.7976931348623157e308,
]
floats = st.one_of(
    st.sampled_from(EXTREMES),
    st.floats(min_value=0.0, allow_nan=False, allow_infinity=False),
    st.floats(allow_nan=False, allow_infinity=False),
)
deltas = st.one_of(
    st.sampled_from([0.0, 5e-324, 1e-300, 1e-9, 1e-6, 0.1, 0.5, 0.999999, 1.0]), floats
)
ints = st.one_of(
    st.sampled_from([0, 1, 2, 5, 10**9, 2**63, -1]),
    st.integers(min_value=-(2**70), max_value=2**70),
)


def _params(mechanism: str) -> st.SearchStrategy[dict[str, Any]]:
    if mechanism == "dp_sgd":
        return st.fixed_dictionaries(
            {},
            optional={
                "epochs": st.one_of(st.integers(1, 3), ints),
                "batch_size": st.one_of(st.integers(1, 50), ints),
                "eta": floats,
                "radius": floats,
            },
        )
    if mechanism == "generalized_objective_perturbation":
        return st.fixed_dictionaries({}, optional={"kifer_Delta": floats})
    if mechanism == "stacking_samples":
        return st.fixed_dictionaries(
            {},
            optional={
                "n_models": st.one_of(st.integers(1, 4), ints),
                "high_level_fraction": floats,
                "high_level_regularization": floats,
            },
        )
    return st.just({})


def _requests(
    epsilons: st.SearchStrategy[float],
    regularizations: st.SearchStrategy[float],
    deltas: st.SearchStrategy[float],
    params: Any = None,
) -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(PRIVATE).flatmap(
        lambda mechanism: st.fixed_dictionaries(
            {
                "mechanism": st.just(mechanism),
                "epsilon": epsilons,
                "delta": deltas,
                "regularization": regularizations,
                "params": (params or _params)(mechanism),
            },
            optional={"loss": st.sampled_from(["logistic", "huber"])},
        )
    )


def _log_uniform(low: float, high: float) -> st.SearchStrategy[float]:
    return st.floats(math.log10(low), math.log10(high)).map(lambda e: min(high, 10.0**e))


#: Anything JSON can carry.
wild_requests = _requests(floats, floats, deltas)
#: Inside every documented range (ε up to the dataset's cap of 4): each request must either run
#: or be refused before any charge with a reason (budget, a mechanism's own rule).
in_range_requests = _requests(
    _log_uniform(1e-6, 4.0),
    _log_uniform(1e-10, 1e6),
    st.one_of(st.just(0.0), _log_uniform(1e-12, 1e-6)),
    lambda mechanism: st.fixed_dictionaries({}),
)


def _dataset(client: TestClient, site: SiteHandle) -> str:
    rng = random.Random(3)
    rows = [
        f"{rng.randint(18, 90)},{rng.choice(['red', 'green'])},{rng.uniform(0, 999):.1f},"
        f"{rng.choice(['yes', 'no'])}"
        for _ in range(60)
    ]
    spec = {
        "name": "ranges",
        "label": {"column": "outcome", "positive": "yes", "negative": "no"},
        "features": [
            {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
            {"column": "colour", "type": "categorical", "categories": ["red", "green"]},
            {"column": "income", "type": "numeric", "lower": 0, "upper": 1000},
        ],
        "budget": {"epsilon": 4.0, "delta": 1e-5},
    }
    response = client.post(
        "/v1/datasets",
        files={
            "file": ("ranges.csv", ("\n".join([HEADER, *rows]) + "\n").encode(), "text/csv"),
            "spec": (None, json.dumps(spec)),
        },
        headers=site.headers,
    )
    assert response.status_code == 201, response.text
    dataset_id: str = response.json()["id"]
    return dataset_id


def _spent(client: TestClient, site: SiteHandle, dataset_id: str) -> tuple[float, float]:
    budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=site.headers).json()
    return budget["epsilon_spent"], budget["delta_spent"]


FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
    database=None,
)


def _check(
    client: TestClient, site: SiteHandle, body: dict[str, Any], dry_run: bool
) -> tuple[int, dict[str, Any]]:
    """Post the fit; no 500; a refusal is a problem document and charges nothing."""
    dataset_id = getattr(client, "_ranges_dataset", None)
    if dataset_id is None:
        dataset_id = _dataset(client, site)
        client._ranges_dataset = dataset_id  # type: ignore[attr-defined]
    before = _spent(client, site, dataset_id)
    response = client.post(
        f"/v1/datasets/{dataset_id}/fits" + ("?dry_run=true" if dry_run else ""),
        json=body,
        headers={**site.headers, "Prefer": "wait=60"},
    )
    assert response.status_code < 500, (body, response.text)
    after = _spent(client, site, dataset_id)
    answer: dict[str, Any] = response.json()
    if response.status_code >= 400 or dry_run:
        assert after == before, (body, answer)
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/problem+json"
    if response.status_code == 422:
        assert answer.get("errors"), answer  # names the parameter
    return response.status_code, answer


@FUZZ
@given(body=wild_requests, dry_run=st.booleans())
def test_fits_with_any_numbers_never_answer_500_nor_charge_a_refusal(
    client: TestClient, site: SiteHandle, body: dict[str, Any], dry_run: bool
) -> None:
    status, answer = _check(client, site, body, dry_run)
    if status in (201, 202):
        assert answer["status"] == "succeeded", (body, answer)


@FUZZ
@given(body=in_range_requests)
def test_fits_inside_the_documented_ranges_run_or_are_refused_before_charging(
    client: TestClient, site: SiteHandle, body: dict[str, Any]
) -> None:
    status, answer = _check(client, site, body, dry_run=True)
    if status == 422 and "delta" in answer["detail"]:
        return  # the mechanism's own rule: (ε, δ) mechanisms need δ > 0, pure ones δ = 0
    assert status == 200, (body, answer)  # every other in-range request can be quoted
    if answer["budget"]["sufficient"] and answer["cost"]["epsilon"] <= 0.05:
        status, answer = _check(client, site, body, dry_run=False)
        assert status in (201, 202), (body, answer)
        assert answer["status"] == "succeeded", (body, answer)
