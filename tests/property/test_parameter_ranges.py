"""Any numeric parameter, however extreme, gets a 4xx naming it or a fit that runs: never a
500, and a refused request never charges the ledger (issue: 500s from valid JSON)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from service.domain.ranges import MAX_REGULARIZATION, MIN_REGULARIZATION
from tests.api._studies import (
    FEATURE_NAMES,
    contribute,
    create_study,
    upload_dataset,
    upload_model,
)
from tests.conftest import MakeSite, SiteHandle

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


#: Examples per property: the default tier (``make test``) runs every property briefly, its
#: ``_at_length`` twin in the heavy tier (CI) runs it at length; derandomised, so each tier
#: draws the same examples every run.
DEFAULT_EXAMPLES, HEAVY_EXAMPLES = 25, 120

FUZZ = settings(
    max_examples=HEAVY_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
    database=None,
    # No explain phase: it reruns a failing example hundreds of times against a live app.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)


def in_both_tiers(
    test: Callable[..., None], **strategies: st.SearchStrategy[Any]
) -> tuple[Callable[..., None], Callable[..., None]]:
    """``test`` under ``@given(**strategies)`` twice: with :data:`DEFAULT_EXAMPLES` for the
    default tier and, marked heavy, with :data:`HEAVY_EXAMPLES`."""
    brief = settings(FUZZ, max_examples=DEFAULT_EXAMPLES)(given(**strategies)(test))
    at_length = settings(FUZZ, max_examples=HEAVY_EXAMPLES)(given(**strategies)(test))
    return brief, pytest.mark.heavy(at_length)


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


def _fits_with_any_numbers_never_answer_500_nor_charge_a_refusal(
    client: TestClient, site: SiteHandle, body: dict[str, Any], dry_run: bool
) -> None:
    status, answer = _check(client, site, body, dry_run)
    if status in (201, 202):
        assert answer["status"] == "succeeded", (body, answer)


(
    test_fits_with_any_numbers_never_answer_500_nor_charge_a_refusal,
    test_fits_with_any_numbers_never_answer_500_nor_charge_a_refusal_at_length,
) = in_both_tiers(
    _fits_with_any_numbers_never_answer_500_nor_charge_a_refusal,
    body=wild_requests,
    dry_run=st.booleans(),
)


def _fits_inside_the_documented_ranges_run_or_are_refused_before_charging(
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


(
    test_fits_inside_the_documented_ranges_run_or_are_refused_before_charging,
    test_fits_inside_the_documented_ranges_run_or_are_refused_before_charging_at_length,
) = in_both_tiers(
    _fits_inside_the_documented_ranges_run_or_are_refused_before_charging, body=in_range_requests
)


# --- studies: aggregations and federated fits -------------------------------------------------


@dataclass
class Consortium:
    """A coordinator with its own dataset (target of ``transfer``, holdout of ``feature``), two
    members each granting a dataset and contributing an uploaded model."""

    coordinator: SiteHandle
    members: tuple[SiteHandle, SiteHandle]
    study_id: str
    own_dataset: str
    granted: tuple[str, str]
    models: tuple[str, str]

    def ledger(self, client: TestClient) -> list[object]:
        """Every dataset's spend and every grant's, as their owners and the study see them."""
        owners = [
            (self.coordinator, self.own_dataset),
            *zip(self.members, self.granted, strict=True),
        ]
        study = client.get(f"/v1/studies/{self.study_id}", headers=self.coordinator.headers)
        assert study.status_code == 200, study.text
        return [
            *(_spent(client, site, dataset) for site, dataset in owners),
            *(
                (c["epsilon_spent"], c["delta_spent"])
                for c in study.json()["contributions"]
                if c["kind"] == "dataset"
            ),
        ]


#: The budgets are the server's largest (ε 10, δ 1e-3) so that many accepted requests run.
EPS_CAP, DELTA_CAP = 10.0, 1e-3


@pytest.fixture
def consortium(client: TestClient, make_site: MakeSite) -> Consortium:
    coordinator, a, b = (make_site(name=n) for n in ("coordinator", "member-a", "member-b"))
    study = create_study(client, coordinator, [a, b])
    own = upload_dataset(client, coordinator, seed=7, epsilon=EPS_CAP, delta=DELTA_CAP)["id"]
    granted, models = [], []
    for seed, (site, weights) in enumerate(
        ((a, [0.5, -1.0, 0.25, 0.0, 2.0]), (b, [1.5, 1.0, -0.25, 1.0, -2.0])), start=8
    ):
        dataset = upload_dataset(
            client, site, seed=seed, allow_non_private=True, epsilon=EPS_CAP, delta=DELTA_CAP
        )["id"]
        contribute(
            client,
            site,
            study["id"],
            {"dataset_id": dataset, "epsilon_cap": EPS_CAP, "delta_cap": DELTA_CAP},
        )
        model = upload_model(client, site, weights)["id"]
        contribute(client, site, study["id"], {"model_id": model})
        granted.append(dataset)
        models.append(model)
    return Consortium(
        coordinator=coordinator,
        members=(a, b),
        study_id=study["id"],
        own_dataset=own,
        granted=(granted[0], granted[1]),
        models=(models[0], models[1]),
    )


def _post_study(
    client: TestClient, world: Consortium, path: str, body: dict[str, Any], dry_run: bool = False
) -> tuple[int, dict[str, Any]]:
    """POST to the study as its coordinator; no 500; a refusal (and a dry run) charges nothing;
    an accepted request has run to success."""
    before = world.ledger(client)
    response = client.post(
        f"/v1/studies/{world.study_id}/{path}" + ("?dry_run=true" if dry_run else ""),
        json=body,
        headers={**world.coordinator.headers, "Prefer": "wait=60"},
    )
    assert response.status_code < 500, (body, response.text)
    answer: dict[str, Any] = response.json()
    event(f"{body.get('method') or body.get('protocol')}: {response.status_code}")
    after = world.ledger(client)
    if response.status_code >= 400 or dry_run:
        assert after == before, (body, answer)
    if response.status_code >= 400:
        assert response.headers["content-type"] == "application/problem+json", answer
    if response.status_code == 422:
        assert answer.get("errors"), answer  # names the parameter
    if response.status_code in (201, 202):
        assert answer["status"] == "succeeded", (body, answer)
    return response.status_code, answer


small_ints = st.one_of(st.integers(1, 12), ints)
names = st.sampled_from([*FEATURE_NAMES, "color", "no-such-feature"])
wild_floats = st.lists(floats, min_size=1, max_size=3)


def _aggregations(world: Consortium) -> st.SearchStrategy[dict[str, Any]]:
    model_ids = st.lists(st.sampled_from([*world.models, "0" * 32]), min_size=1, max_size=3)
    average = st.fixed_dictionaries(
        {"method": st.just("average")},
        optional={"models": model_ids, "weights": wild_floats},
    )
    transfer = st.fixed_dictionaries(
        {
            "method": st.just("transfer"),
            "target_dataset_id": st.just(world.own_dataset),
            "epsilon": floats,
            "transfer_strength": floats,
        },
        optional={
            "regularization": floats,
            "loss": st.sampled_from(["logistic", "huber"]),
            "source_models": model_ids,
            "feature_groups": st.lists(
                st.lists(names, min_size=1, max_size=3, unique=True), min_size=1, max_size=3
            ),
            "importance": wild_floats,
            "meta_features": st.sampled_from(["sigmoid", "centered_sigmoid"]),
        },
    )
    feature = st.fixed_dictionaries(
        {
            "method": st.just("feature"),
            "holdout_dataset_id": st.just(world.own_dataset),
            "epsilon": floats,
        },
        optional={
            "delta": deltas,
            "mechanism": st.sampled_from(["objective_perturbation", "output_perturbation"]),
            "regularization": floats,
            "meta_features": st.sampled_from(["linear", "sigmoid"]),
            "loss": st.sampled_from(["logistic", "huber"]),
            "source_models": model_ids,
        },
    )
    return st.one_of(average, transfer, feature)


def _aggregations_with_any_numbers_never_answer_500_nor_charge_a_refusal(
    client: TestClient, consortium: Consortium, data: st.DataObject
) -> None:
    body = data.draw(_aggregations(consortium), label="body")
    _post_study(client, consortium, "aggregations", body)


(
    test_aggregations_with_any_numbers_never_answer_500_nor_charge_a_refusal,
    test_aggregations_with_any_numbers_never_answer_500_nor_charge_a_refusal_at_length,
) = in_both_tiers(
    _aggregations_with_any_numbers_never_answer_500_nor_charge_a_refusal, data=st.data()
)


#: Each protocol's own options, valid and not; ``h`` goes with the Huber loss.
_PROTOCOL_PARAMS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "noisy_average": {},
    "psgd": {
        "iterations": small_ints,
        "step_size": st.sampled_from(["nesterov", "constant", "decreasing", "fast"]),
    },
    "admm": {
        "perturbation": st.sampled_from(["none", "dual", "primal"]),
        "iterations": small_ints,
        "penalty": floats,
        "topology": st.sampled_from(["complete", "ring", "star"]),
        "delta_prime": deltas,
        "noise": st.sampled_from(["laplace", "gaussian"]),
        "zcdp_conversion": st.sampled_from(["cks", "bun_steinke"]),
    },
    "distributed_lasso": {
        "noise": st.booleans(),
        "iterations": small_ints,
        "step_size": floats,
        "accelerated": st.booleans(),
        "clip": floats,
        "zcdp_conversion": st.sampled_from(["cks", "bun_steinke"]),
    },
}


def _federated(protocol: str, loss: str | None) -> st.SearchStrategy[dict[str, Any]]:
    params = dict(_PROTOCOL_PARAMS[protocol])
    if loss == "huber":
        params["h"] = floats
    body = st.fixed_dictionaries(
        {"protocol": st.just(protocol)},
        optional={
            "epsilon": floats,
            "delta": deltas,
            "regularization": floats,
            "params": st.fixed_dictionaries({}, optional=params),
        },
    )
    return body if loss is None else body.map(lambda b: {**b, "loss": loss})


federated_requests = st.tuples(
    st.sampled_from(sorted(_PROTOCOL_PARAMS)),
    st.sampled_from([None, "logistic", "huber", "squared"]),
).flatmap(lambda pair: _federated(*pair))


def _federated_fits_with_any_numbers_never_answer_500_nor_charge_a_refusal(
    client: TestClient, consortium: Consortium, body: dict[str, Any], dry_run: bool
) -> None:
    _post_study(client, consortium, "federated-fits", body, dry_run=dry_run)


(
    test_federated_fits_with_any_numbers_never_answer_500_nor_charge_a_refusal,
    test_federated_fits_with_any_numbers_never_answer_500_nor_charge_a_refusal_at_length,
) = in_both_tiers(
    _federated_fits_with_any_numbers_never_answer_500_nor_charge_a_refusal,
    body=federated_requests,
    dry_run=st.booleans(),
)


#: Any positive finite double: the documented range of PSGD's, ADMM's and the Lasso's own
#: real-valued options (penalty, step size, clip, Huber h).
positive = st.one_of(
    st.sampled_from([x for x in EXTREMES if x > 0]),
    st.floats(min_value=5e-324, allow_infinity=False, allow_nan=False),
)
#: Small enough that many accepted requests fit in the budgets.
cheap_epsilons = _log_uniform(1e-6, 0.05)
in_range_lambdas = _log_uniform(MIN_REGULARIZATION, MAX_REGULARIZATION)
in_range_deltas = st.one_of(st.just(0.0), _log_uniform(1e-12, 1e-6))


def _in_range_aggregations(world: Consortium) -> st.SearchStrategy[dict[str, Any]]:
    # Documented: non-negative and finite, not all zero.
    weights = st.lists(st.floats(0, allow_infinity=False), min_size=2, max_size=2).filter(any)
    average = st.fixed_dictionaries(
        {"method": st.just("average"), "models": st.just(list(world.models)), "weights": weights}
    )
    transfer = st.fixed_dictionaries(
        {
            "method": st.just("transfer"),
            "target_dataset_id": st.just(world.own_dataset),
            "epsilon": cheap_epsilons,
            "transfer_strength": st.one_of(st.just(0.0), _log_uniform(1e-12, 1e6)),
            "regularization": in_range_lambdas,
            "loss": st.sampled_from(["logistic", "huber"]),
        },
        optional={
            "feature_groups": st.just([["age", "intercept"], ["color"]]),
            "importance": st.lists(positive, min_size=2, max_size=2),
            "meta_features": st.sampled_from(["sigmoid", "centered_sigmoid"]),
        },
    ).filter(lambda b: "feature_groups" in b or not {"importance", "meta_features"} & set(b))
    feature = st.fixed_dictionaries(
        {
            "method": st.just("feature"),
            "holdout_dataset_id": st.just(world.own_dataset),
            "epsilon": cheap_epsilons,
            "delta": in_range_deltas,
            "mechanism": st.sampled_from(["objective_perturbation", "output_perturbation"]),
            "regularization": in_range_lambdas,
            "meta_features": st.sampled_from(["linear", "sigmoid"]),
            "loss": st.sampled_from(["logistic", "huber"]),
        }
    )
    return st.one_of(average, transfer, feature)


def _aggregations_inside_the_documented_ranges_run_or_are_refused_before_charging(
    client: TestClient, consortium: Consortium, data: st.DataObject
) -> None:
    body = data.draw(_in_range_aggregations(consortium), label="body")
    status, answer = _post_study(client, consortium, "aggregations", body)
    if status == 422 and ("delta" in answer["detail"] or "share q_k·ε" in answer["detail"]):
        return  # pure ε mechanisms take δ = 0; PST-H: each group's share q_k·ε ≥ 1e-6
    assert status in (201, 202), (body, answer)  # every other in-range request runs


(
    test_aggregations_inside_the_documented_ranges_run_or_are_refused_before_charging,
    test_aggregations_inside_the_documented_ranges_run_or_are_refused_before_charging_at_length,
) = in_both_tiers(
    _aggregations_inside_the_documented_ranges_run_or_are_refused_before_charging, data=st.data()
)
