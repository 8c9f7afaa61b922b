"""Typed mechanism options over HTTP (issue 27): the OpenAPI document has each mechanism's
options with their types, defaults and bounds; a fit or plan body's ``params`` are read
against the named mechanism's options (an unknown option is a 422 naming it, nothing stored
or charged); the wire format is unchanged (params omitted, ``{"candidates": [...]}`` for η)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.schemas.fits import FitCreate
from service.api.schemas.options import check_params, options_model
from service.api.schemas.plans import PlanCreate
from service.dp import MECHANISMS
from service.dp.core.options import Capabilities, MechanismOptions, option
from service.dp.mechanisms import non_private
from service.openapi import live_spec
from tests.conftest import SiteHandle
from tests.unit.jobs._flow import budget, fit_body, upload

PROBLEM_JSON = "application/problem+json"
REF = "#/components/schemas/"


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    found: dict[str, Any] = live_spec()["components"]["schemas"]
    return found


def _resolve(schemas: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node["$ref"]
    assert ref.startswith(REF)
    found: dict[str, Any] = schemas[ref.removeprefix(REF)]
    return found


@pytest.mark.parametrize(("body", "options_suffix"), [("FitCreate", "Tunable"), ("PlanCreate", "")])
def test_the_bodies_are_unions_by_mechanism_with_typed_options(
    schemas: dict[str, Any], body: str, options_suffix: str
) -> None:
    union = schemas[body]
    mapping = union["discriminator"]["mapping"]
    assert union["discriminator"]["propertyName"] == "mechanism"
    assert set(mapping) == set(MECHANISMS)
    assert [v["$ref"] for v in union["oneOf"]] == list(mapping.values())
    for name, ref in mapping.items():
        variant = _resolve(schemas, {"$ref": ref})
        assert variant["properties"]["mechanism"]["const"] == name
        assert variant["additionalProperties"] is False
        assert "params" not in variant.get("required", [])
        options = _resolve(schemas, variant["properties"]["params"])
        assert options["additionalProperties"] is False
        assert set(options["properties"]) == {
            f.name for f in dataclasses.fields(MECHANISMS[name].options)
        }
        for option_name, prop in options["properties"].items():
            assert prop.get("description"), (name, option_name)
        tunable = options_suffix and MECHANISMS[name].capabilities.tunable_options
        assert options["title"].endswith(f"{'Tunable' if tunable else ''}Options")


def test_dp_sgd_options_in_the_schema(schemas: dict[str, Any]) -> None:
    props = schemas["DpSgdTunableOptions"]["properties"]
    assert props["epochs"] | {"description": ""} == {
        "default": 1,
        "description": "",
        "maximum": 10_000,
        "minimum": 1,
        "title": "Epochs",
        "type": "integer",
    }
    assert props["schedule"]["enum"] == ["constant", "inverse_sqrt", "inverse"]
    assert props["schedule"]["default"] == "inverse_sqrt"
    assert props["h"]["default"] == 0.5
    assert props["h"]["exclusiveMinimum"] == 0
    # a default that depends on the problem is stated in words, not as a value
    assert "default" not in props["batch_size"]
    assert "min(50, n)" in props["batch_size"]["description"]
    assert "default" not in props["eta"]
    eta = props["eta"]["anyOf"]
    assert {"type": "number", "exclusiveMinimum": 0} in eta
    assert {"$ref": f"{REF}OptionCandidates"} in eta
    # a plan does not tune: its η is a number only
    plan_eta = schemas["DpSgdOptions"]["properties"]["eta"]
    assert plan_eta == {**plan_eta, "type": "number", "exclusiveMinimum": 0}
    assert props["radius"]["default"] is None


def test_other_mechanisms_options_in_the_schema(schemas: dict[str, Any]) -> None:
    samples = schemas["StackingSamplesOptions"]["properties"]
    assert (samples["n_models"]["default"], samples["n_models"]["minimum"]) == (5, 1)
    fraction = samples["high_level_fraction"]
    assert (fraction["default"], fraction["exclusiveMinimum"], fraction["exclusiveMaximum"]) == (
        0.5,
        0,
        1,
    )
    assert samples["meta_features"]["enum"] == ["sigmoid", "centered_sigmoid"]
    kifer = schemas["GeneralizedObjectivePerturbationOptions"]["properties"]["kifer_Delta"]
    assert kifer["type"] == "number"
    assert kifer["minimum"] == 0
    assert "default" not in kifer
    op = schemas["ObjectivePerturbationOptions"]["properties"]
    assert set(op) == {"h", "projection_dim", "projection_kind", "projection_seed"}
    dp_sgd = schemas["DpSgdTunableOptions"]["properties"]
    for name in ("projection_kind", "projection_seed"):  # the same option, word for word
        assert op[name] == dp_sgd[name]
    dim = [o for o in op["projection_dim"]["anyOf"] if o.get("type") == "integer"]
    assert [(o["minimum"], o["maximum"]) for o in dim] == [(1, 1_000_000)]


def _problem(response: Any) -> dict[str, Any]:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    found: dict[str, Any] = response.json()
    return found


@pytest.mark.parametrize(
    ("mechanism", "params", "loc"),
    [
        ("dp_sgd", {"noise_multiplier": 1.0}, ["body", "params", "noise_multiplier"]),
        ("objective_perturbation", {"epochs": 2}, ["body", "params", "epochs"]),
        ("dp_sgd", {"epochs": "2"}, ["body", "params", "epochs"]),
        ("dp_sgd", {"schedule": "linear"}, ["body", "params", "schedule"]),
        (
            "stacking_samples",
            {"high_level_fraction": 1.0},
            ["body", "params", "high_level_fraction"],
        ),
        ("output_perturbation", {"eta": {"candidates": [1.0]}}, ["body", "params", "eta"]),
    ],
)
def test_a_bad_option_is_a_422_naming_it_and_charges_nothing(
    client: TestClient, site: SiteHandle, mechanism: str, params: dict[str, Any], loc: list[str]
) -> None:
    dataset = upload(client, site.headers)
    body = fit_body(mechanism, epsilon=0.5, params=params)
    for query in ("?dry_run=true", ""):
        problem = _problem(
            client.post(
                f"/v1/datasets/{dataset['id']}/fits{query}", json=body, headers=site.headers
            )
        )
        assert [e["loc"] for e in problem["errors"]] == [loc]
        assert "input" not in problem["errors"][0]
    state = budget(client, site.headers, dataset["id"])
    assert state["charges"] == []
    assert state["epsilon_spent"] == 0.0
    assert client.get("/v1/jobs", headers=site.headers).json()["total"] == 0


def test_a_plan_names_its_bad_option_and_takes_no_candidates(
    client: TestClient, site: SiteHandle
) -> None:
    dataset = upload(client, site.headers)
    path = f"/v1/datasets/{dataset['id']}/plans"
    base = {"mechanism": "dp_sgd", "epsilons": [0.5, 1.0], "regularizations": [0.01]}
    for params, loc in (
        ({"epoch": 2}, ["body", "params", "epoch"]),
        ({"eta": {"candidates": [0.1, 1.0]}}, ["body", "params", "eta"]),
    ):
        problem = _problem(client.post(path, json={**base, "params": params}, headers=site.headers))
        assert {tuple(e["loc"][:3]) for e in problem["errors"]} == {tuple(loc)}
    ok = client.post(path, json={**base, "params": {"epochs": 2}}, headers=site.headers)
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(
    "body",
    [
        {k: v for k, v in fit_body("objective_perturbation", epsilon=0.5).items() if k != "params"},
        fit_body("objective_perturbation", epsilon=0.5, params={}),
        fit_body("objective_perturbation", epsilon=0.5, loss="huber", params={"h": 0.25}),
        # every default written out, as a generated client sends them
        fit_body(
            "dp_sgd",
            epsilon=0.5,
            params={"h": 0.5, "epochs": 1, "schedule": "inverse", "radius": None},
        ),
        fit_body(
            "stacking_samples",
            epsilon=0.5,
            params={
                "h": 0.5,
                "n_models": 5,
                "meta_features": "sigmoid",
                "high_level_intercept": True,
            },
        ),
        fit_body(
            "dp_sgd", epsilon=0.5, regularization=0.01, params={"eta": {"candidates": [0.1, 1.0]}}
        ),
    ],
)
def test_existing_requests_keep_working(
    client: TestClient, site: SiteHandle, body: dict[str, Any]
) -> None:
    dataset = upload(client, site.headers)
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits?dry_run=true", json=body, headers=site.headers
    )
    assert response.status_code == 200, response.text


# ---- a mechanism added to the registry alone -------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class FakeOptions(MechanismOptions):
    """A stand-in mechanism's options."""

    alpha: float = option(0.25, "A fake option.", gt=0.0, lt=1.0)


class _Fake:
    name = "fake_mechanism"
    options = FakeOptions
    capabilities = Capabilities(tunable_options=("alpha",))
    validate_params = non_private.MECHANISM.validate_params
    calibrate = non_private.MECHANISM.calibrate
    run = non_private.MECHANISM.run


@pytest.fixture
def fake_mechanism() -> Iterator[str]:
    MECHANISMS["fake_mechanism"] = _Fake()
    try:
        yield "fake_mechanism"
    finally:
        del MECHANISMS["fake_mechanism"]


def test_a_new_mechanism_gets_its_schema_from_its_module_alone(fake_mechanism: str) -> None:
    model = options_model(MECHANISMS[fake_mechanism], tunable=True)
    assert model.__name__ == "FakeMechanismTunableOptions"
    union, definitions = FitCreate.union_schema(REF + "{model}")
    assert union["discriminator"]["mapping"][fake_mechanism] == f"{REF}FitCreateFakeMechanism"
    alpha = definitions["FakeMechanismTunableOptions"]["properties"]["alpha"]
    assert alpha["anyOf"][0] == {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}
    assert alpha["default"] == 0.25
    _plan, plan_definitions = PlanCreate.union_schema(REF + "{model}")
    assert plan_definitions["FakeMechanismOptions"]["properties"]["alpha"]["type"] == "number"
    check_params(fake_mechanism, {"alpha": {"candidates": [0.1]}}, tunable=True)
    for params in ({"beta": 1.0}, {"alpha": 1.0}, {"alpha": {"candidates": [0.1]}}):
        with pytest.raises(ValueError, match="params"):
            check_params(fake_mechanism, params, tunable=False)
