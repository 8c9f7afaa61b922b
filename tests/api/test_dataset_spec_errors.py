"""Every problem with an upload's spec has one problem type (issue 18 item 6).

Whether pydantic finds it (a negative ε, a string, δ ≥ 1, a missing field, text that is not
JSON) or the domain does (an infinite ε, ε over the server's maximum, bounds in the wrong
order), the answer is ``422`` ``invalid-dataset-spec`` with every invalid part in ``errors``,
located under ``spec``; nothing is stored.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from service.api.uploads import MAX_SPEC_BYTES
from service.main import create_app
from service.settings import Settings
from tests.api.test_datasets import (
    assert_nothing_stored,
    assert_problem,
    base_spec,
    csv_bytes,
    upload,
)
from tests.conftest import SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BOUNDS = base_spec()["features"]


def _budget(epsilon: str, delta: str = "1e-6") -> str:
    """The spec as JSON text with a literal ε and δ (JSON cannot carry NaN or inf otherwise)."""
    text = json.dumps(base_spec(budget={"epsilon": "EPS", "delta": "DELTA"}))
    return text.replace('"EPS"', epsilon).replace('"DELTA"', delta)


def _features(**age: Any) -> str:
    features = [dict(BOUNDS[0], **age), *BOUNDS[1:]]
    return json.dumps(base_spec(features=features))


#: (id, spec text, the locations ``errors`` must list)
CASES: list[tuple[str, str, list[list[Any]]]] = [
    ("epsilon-negative", _budget("-1"), [["spec", "budget", "epsilon"]]),
    ("epsilon-inf", _budget("1e999"), [["spec", "budget", "epsilon"]]),
    ("epsilon-Infinity", _budget("Infinity"), [["spec", "budget", "epsilon"]]),
    ("epsilon-minus-inf", _budget("-Infinity"), [["spec", "budget", "epsilon"]]),
    ("epsilon-nan", _budget("NaN"), [["spec", "budget", "epsilon"]]),
    ("epsilon-string", _budget('"1.0"'), [["spec", "budget", "epsilon"]]),
    ("epsilon-zero", _budget("0"), [["spec", "budget", "epsilon"]]),
    ("epsilon-over-maximum", _budget("1e300"), [["spec", "budget", "epsilon"]]),
    ("delta-negative", _budget("1", "-1e-9"), [["spec", "budget", "delta"]]),
    ("delta-one", _budget("1", "1"), [["spec", "budget", "delta"]]),
    ("delta-nan", _budget("1", "NaN"), [["spec", "budget", "delta"]]),
    (
        "epsilon-and-delta",
        _budget("-1", "2"),
        [["spec", "budget", "epsilon"], ["spec", "budget", "delta"]],
    ),
    ("bounds-inverted", _features(lower=90, upper=18), [["spec", "features", 0]]),
    ("bounds-equal", _features(lower=18, upper=18), [["spec", "features", 0]]),
    ("bound-infinite", _features(upper=1e999), [["spec", "features", 0]]),
    ("bound-missing", _features(upper=None), [["spec", "features", 0]]),
    ("bound-string", _features(lower="18"), [["spec", "features", 0, "numeric", "lower"]]),
    (
        "label-classes-equal",
        json.dumps(base_spec(label={"column": "outcome", "positive": "yes", "negative": "yes"})),
        [["spec", "label", "negative"]],
    ),
    ("not-json", "{'name': SECRET-7731", [["spec"]]),
    ("not-an-object", "[1, 2]", [["spec"]]),
]


@pytest.mark.parametrize(
    ("spec", "locations"), [pytest.param(*case[1:], id=case[0]) for case in CASES]
)
def test_every_spec_error_has_the_same_type_and_lists_its_parts(
    spec: str,
    locations: list[list[Any]],
    client: TestClient,
    site: SiteHandle,
    engine: Engine,
) -> None:
    body = assert_problem(upload(client, site, csv_bytes(), spec), 422, "invalid-dataset-spec")
    assert body["title"] == "Invalid dataset spec"
    listed = [e["loc"] for e in body["errors"]]
    for location in locations:
        assert any(loc[: len(location)] == location for loc in listed), (location, listed)
    assert all(loc[0] == "spec" for loc in listed), listed
    assert all(isinstance(e["msg"], str) and e["msg"] for e in body["errors"])
    assert_nothing_stored(client, site, engine)


def test_the_pair_of_the_issue_gets_one_type(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    minus_one = upload(client, site, csv_bytes(), _budget("-1")).json()
    infinite = upload(client, site, csv_bytes(), _budget("1e999")).json()
    assert minus_one["type"] == infinite["type"]
    assert minus_one["type"].endswith("/invalid-dataset-spec")
    assert minus_one["errors"][0]["loc"] == infinite["errors"][0]["loc"]
    assert_nothing_stored(client, site, engine)


def test_a_spec_part_that_is_not_utf8_is_a_spec_error(
    client: TestClient, site: SiteHandle, engine: Engine
) -> None:
    response = client.post(
        "/v1/datasets",
        files={"spec": (None, b"\xff\xfe{}"), "file": ("a.csv", csv_bytes(), "text/csv")},
        headers=site.headers,
    )
    body = assert_problem(response, 422, "invalid-dataset-spec")
    assert body["errors"] == [{"loc": ["spec"], "msg": "the 'spec' part must be UTF-8 JSON"}]
    assert_nothing_stored(client, site, engine)


def test_a_spec_part_over_its_size_limit_is_a_spec_error(
    settings: Settings, site: SiteHandle, client: TestClient, engine: Engine
) -> None:
    roomy = settings.model_copy(update={"max_request_bytes": 4 * MAX_SPEC_BYTES})
    spec = json.dumps(base_spec(name="x" * MAX_SPEC_BYTES))
    with TestClient(create_app(roomy)) as big_client:
        response = upload(big_client, site, csv_bytes(), spec)
    body = assert_problem(response, 422, "invalid-dataset-spec")
    assert str(MAX_SPEC_BYTES) in body["detail"]
    assert body["errors"][0]["loc"] == ["spec"]
    assert_nothing_stored(client, site, engine)
