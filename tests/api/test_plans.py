"""``POST /v1/datasets/{id}/plans``: the planner spends nothing, reads only public data, and
refuses a private reference dataset."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from service.dp import calibrate
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
