"""``POST /v1/datasets/{id}/plans``: the planner spends nothing, reads only public data, and
refuses a private reference dataset. A plan of ``mechanism: auto`` says what the fit at each
of its ε would do: without a public reference, the private baseline's slice and the choice,
λ, noise and band at ε less the slice, exactly as the dry run of that fit."""

from __future__ import annotations

import io
import math
import struct
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from service.dp import calibrate
from tests.api.test_label_tasks import MULTICLASS, NUMERIC, uploaded
from tests.conftest import MakeSite, SiteHandle
from tests.unit.jobs._flow import TOY_FEATURES, budget, toy_csv, toy_spec, upload

PROBLEM_JSON = "application/problem+json"


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test here runs on SQLite and on PostgreSQL (marked ``postgres``)."""
    return any_db_url


def _plan(
    client: TestClient, site: SiteHandle, dataset_id: str, body: dict[str, Any], **h: str
) -> Any:
    return client.post(f"/v1/datasets/{dataset_id}/plans", json=body, headers={**site.headers, **h})


def test_noise_and_bound_from_public_quantities(client: TestClient, site: SiteHandle) -> None:
    dataset = upload(client, site.headers)
    body = {
        "mechanism": "output_perturbation",
        "epsilons": [0.5, 0.1, 1.0],
        "regularizations": [0.01],
    }
    response = _plan(client, site, dataset["id"], body)
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["spent"] == {"epsilon": 0.0, "delta": 0.0}
    assert [p["epsilon"] for p in plan["points"]] == [0.1, 0.5, 1.0]
    n, d = 200, len(TOY_FEATURES)
    for point in plan["points"]:
        expected = calibrate(
            "output_perturbation",
            n=n,
            d=d,
            epsilon=point["epsilon"],
            delta=0.0,
            loss="logistic",
            regularization=0.01,
        ).expected_noise_norm
        assert expected is not None
        assert point["expected_noise_norm"] == pytest.approx(expected)
        # ((c + λ)/2) d(d + 1) (2/(nλε))²: Gamma(d, 2/(nλε)) noise, c = 1/4
        beta = 2 / (n * 0.01 * point["epsilon"])
        assert point["excess_risk_bound"] == pytest.approx(
            (0.25 + 0.01) / 2 * d * (d + 1) * beta**2
        )
    bounds = [p["excess_risk_bound"] for p in plan["points"]]
    assert bounds == sorted(bounds, reverse=True)
    assert budget(client, site.headers, dataset["id"])["charges"] == []


def test_simulation_on_a_public_reference_answers_the_target(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    reference = upload(
        client, site.headers, raw=toy_csv(n=600, seed=3), spec=toy_spec(allow_non_private=True)
    )
    body = {
        "mechanism": "objective_perturbation",
        "epsilons": [0.05, 5.0],
        "regularizations": [0.01],
        "reference_dataset_id": reference["id"],
        "repeats": 5,
        "target_accuracy": 0.7,
        "target_probability": 0.8,
        "seed": 1,
    }
    response = _plan(client, site, dataset["id"], body)
    assert response.status_code == 200, response.text
    plan = response.json()
    low, high = (p["simulated_accuracy"] for p in plan["points"])
    assert low["draws"] == high["draws"] == 5
    assert high["mean"] > low["mean"]
    assert high["mean"] > 0.75
    assert plan["target"]["smallest_epsilon"] == 5.0
    picture = _plan(client, site, dataset["id"], body, Accept="image/svg+xml")
    assert picture.status_code == 200
    assert picture.headers["content-type"].startswith("image/svg+xml")
    assert picture.text.startswith("<svg")
    assert "polyline" in picture.text
    png = _plan(client, site, dataset["id"], body, Accept="image/png")
    assert png.status_code == 200, png.text
    assert png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n")
    # IHDR: width and height, big-endian, right after the signature and the chunk header
    assert struct.unpack(">II", png.content[16:24]) == (640, 400)
    assert Image.open(io.BytesIO(png.content)).size == (640, 400)
    # JSON stays the default, and is chosen when preferred
    both = _plan(client, site, dataset["id"], body, Accept="image/png;q=0.5, application/json")
    assert both.headers["content-type"].startswith("application/json")
    for ds in (dataset, reference):
        assert budget(client, site.headers, ds["id"])["charges"] == []


@pytest.mark.parametrize(
    "change",
    [
        {"mechanism": "nope"},
        {"mechanism": "non_private"},
        {"epsilons": []},
        {"epsilons": [0.0]},
        {"epsilons": [0.1] * 41},
        {"regularizations": [-1.0]},
        {"target_accuracy": 0.8},  # no reference to simulate on
        {"repeats": 1},
    ],
)
def test_bad_plans_are_422(client: TestClient, site: SiteHandle, change: dict[str, Any]) -> None:
    dataset = upload(client, site.headers)
    body = {"mechanism": "output_perturbation", "epsilons": [0.5], **change}
    response = _plan(client, site, dataset["id"], body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)


def test_a_private_or_foreign_reference_is_422(
    client: TestClient, site: SiteHandle, make_site: MakeSite
) -> None:
    dataset = upload(client, site.headers)
    private = upload(client, site.headers)
    other = make_site("other")
    theirs = upload(client, other.headers, spec=toy_spec(allow_non_private=True))
    for ref in (private["id"], theirs["id"], "0" * 32):
        body = {"mechanism": "output_perturbation", "epsilons": [0.5], "reference_dataset_id": ref}
        response = _plan(client, site, dataset["id"], body)
        assert response.status_code == 422, response.text
    for ref in (private["id"], theirs["id"]):
        body = {"mechanism": "output_perturbation", "epsilons": [0.5], "reference_dataset_id": ref}
        for accept in ("image/png", "image/svg+xml"):
            picture = _plan(client, site, dataset["id"], body, Accept=accept)
            assert picture.status_code == 422, picture.text
            assert picture.headers["content-type"].startswith(PROBLEM_JSON)


def test_the_openapi_document_offers_json_svg_and_png(client: TestClient) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/v1/datasets/{dataset_id}/plans"]
    content = operation["post"]["responses"]["200"]["content"]
    assert set(content) == {"application/json", "image/svg+xml", "image/png"}
    assert content["image/png"]["schema"] == {"type": "string", "format": "binary"}


# ---- mechanism auto: a plan point is the fit's dry run at its ε ------------------------------

#: C of the private baseline's share ρ = clamp(C/(n·ε·τ), 1 %, 5 %), τ = 0.01, per task: the
#: positive-label count (sd √2/(nρε)), the class histogram (scale 2/(ρε)) and the label's sums
#: (service/dp/analysis/baseline.py, baseline_tasks.py).
SHARE_CONSTANT = {
    "binary": math.sqrt(2.0),
    "multiclass": 2.0 * math.sqrt(2.0),
    "regression": 136**0.5,
}


def _dry_run(
    client: TestClient, site: SiteHandle, dataset_id: str, epsilon: float, delta: float
) -> dict[str, Any]:
    body = {"mechanism": "auto", "epsilon": epsilon, "delta": delta}
    response = client.post(
        f"/v1/datasets/{dataset_id}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert response.status_code == 200, response.text
    quote: dict[str, Any] = response.json()
    return quote


@pytest.mark.parametrize(
    ("task", "label"),
    [("binary", None), ("multiclass", MULTICLASS), ("regression", NUMERIC)],
)
def test_an_auto_plan_point_is_the_dry_run_of_the_fit_at_its_epsilon(
    client: TestClient, site: SiteHandle, task: str, label: dict[str, Any] | None
) -> None:
    dataset = upload(client, site.headers) if label is None else uploaded(client, site, label)
    delta = 1e-6
    body = {"mechanism": "auto", "epsilons": [0.5, 20.0], "delta": delta}
    response = _plan(client, site, dataset["id"], body)
    assert response.status_code == 200, response.text
    plan = response.json()
    assert plan["spent"] == {"epsilon": 0.0, "delta": 0.0}
    n = plan["n"]
    shares = []
    for point in plan["points"]:
        eps = point["epsilon"]
        quote = _dry_run(client, site, dataset["id"], eps, delta)
        # the choice, λ (exactly) and noise at ε − ρε, and the slice and band, as the fit's
        assert point["mechanism"] == quote["mechanism"]
        assert point["regularization"] == quote["regularization"]
        assert point["expected_noise_norm"] == pytest.approx(quote["expected_noise_norm"])
        assert point["private_baseline"] == quote["expected_accuracy"]["private_baseline"]
        assert point["expected_accuracy"] == quote["expected_accuracy"]
        assert point["spent_epsilon"] == quote["cost"]["epsilon"] == eps
        # the slice by hand: ρ = clamp(C/(n·ε·0.01), 1 %, 5 %) of ε, the fit at the rest
        share = min(0.05, max(0.01, SHARE_CONSTANT[task] / (n * eps * 0.01)))
        slice_ = point["private_baseline"]
        assert slice_["share"] == pytest.approx(share, rel=1e-12)
        assert slice_["epsilon"] == pytest.approx(share * eps, rel=1e-12)
        assert slice_["requested_epsilon"] == eps
        assert slice_["fit_epsilon"] == pytest.approx(eps - share * eps, rel=1e-12)
        assert slice_["fit_epsilon"] + slice_["epsilon"] <= eps
        shares.append(share)
    assert shares[0] == 0.05  # a small n·ε: the cap
    assert budget(client, site.headers, dataset["id"])["charges"] == []


def test_an_auto_plan_with_a_public_reference_or_a_named_mechanism_has_no_slice(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = uploaded(client, site, MULTICLASS)
    named = {"mechanism": "output_perturbation", "epsilons": [1.0], "regularizations": ["auto"]}
    response = _plan(client, site, dataset["id"], named)
    assert response.status_code == 200, response.text
    [point] = response.json()["points"]
    assert "private_baseline" not in point
    assert point["spent_epsilon"] == 1.0
    # a private dataset as the named reference is refused, nothing is planned on it
    private = uploaded(client, site, MULTICLASS)
    body = {"mechanism": "auto", "epsilons": [1.0], "reference_dataset_id": private["id"]}
    refused = _plan(client, site, dataset["id"], body)
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"].startswith(PROBLEM_JSON)
    # the site's public reference: the fit spends no slice, and neither does the plan
    uploaded(client, site, MULTICLASS, allow_non_private=True)
    response = _plan(client, site, dataset["id"], {"mechanism": "auto", "epsilons": [1.0]})
    assert response.status_code == 200, response.text
    [point] = response.json()["points"]
    quote = _dry_run(client, site, dataset["id"], 1.0, 0.0)
    assert "private_baseline" not in point
    assert "private_baseline" not in (quote["expected_accuracy"] or {})
    assert point["mechanism"] == quote["mechanism"]
    assert point["regularization"] == quote["regularization"]
    assert point["spent_epsilon"] == quote["cost"]["epsilon"] == 1.0
    assert budget(client, site.headers, dataset["id"])["charges"] == []
