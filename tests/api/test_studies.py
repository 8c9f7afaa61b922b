"""Studies and contributions over HTTP (issue 5 items 1-2, docs/design.md §5).

* ``POST /v1/studies``: the caller is the coordinator and a member; an empty study, unknown or
  malformed member ids and a bad spec are 422s that store nothing; the admin gets 403 (and
  a study is a 404 to it).
* Members read the study (members, contributions, results); a site outside it gets 404 on
  every verb, and ``GET /v1/studies`` lists only the caller's studies.
* Contributions: a model the member owns or a grant on its dataset within the dataset's caps;
  another site's model or dataset is 404; a spec that differs is a 422 saying what differs;
  contributing the same thing twice is 409; a member withdraws its own unused contribution.

Every test runs on SQLite and PostgreSQL (the new tables' constraints hold on both).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api._studies import (
    FEATURE_NAMES,
    FEATURES,
    LABEL,
    N_WEIGHTS,
    contribute,
    create_study,
    spec,
    upload_dataset,
    upload_model,
)
from tests.conftest import MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def db_url(any_db_url: str) -> str:
    """Every test runs on SQLite and on PostgreSQL."""
    return any_db_url


@pytest.fixture
def trio(make_site: MakeSite) -> tuple[SiteHandle, SiteHandle, SiteHandle]:
    """Coordinator, member, outsider."""
    return make_site(name="coordinator"), make_site(name="member"), make_site(name="outsider")


def _errors(response: Any) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = response.json().get("errors", [])
    return errors


# --- creating and reading --------------------------------------------------------------


def test_create_study_makes_the_caller_coordinator_and_members_read_it(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, outsider = trio
    study = create_study(client, coordinator, [member, coordinator])  # self listed: deduplicated
    assert study["coordinator"] == coordinator.id
    roles = {m["site_id"]: m["role"] for m in study["members"]}
    assert roles == {coordinator.id: "coordinator", member.id: "member"}
    assert study["feature_names"] == FEATURE_NAMES
    assert study["spec"]["label"] == LABEL
    assert [f["column"] for f in study["spec"]["features"]] == ["age", "color"]
    assert study["contributions"] == []
    assert study["results"] == []

    for site in (coordinator, member):
        got = client.get(f"/v1/studies/{study['id']}", headers=site.headers)
        assert got.status_code == 200, got.text
        assert got.json()["id"] == study["id"]
        listed = client.get("/v1/studies", headers=site.headers).json()
        assert listed["total"] == 1
        assert listed["items"][0]["id"] == study["id"]

    hidden = client.get(f"/v1/studies/{study['id']}", headers=outsider.headers)
    assert hidden.status_code == 404
    assert client.get("/v1/studies", headers=outsider.headers).json()["total"] == 0


def test_outsider_gets_404_for_every_study_operation(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, outsider = trio
    study = create_study(client, coordinator, [member])
    mine = upload_model(client, member, [0.1] * N_WEIGHTS)
    contribution = contribute(client, member, study["id"], {"model_id": mine["id"]})
    theirs = upload_model(client, outsider, [0.2] * N_WEIGHTS)
    base = f"/v1/studies/{study['id']}"
    responses = [
        client.get(base, headers=outsider.headers),
        client.post(
            f"{base}/contributions", json={"model_id": theirs["id"]}, headers=outsider.headers
        ),
        client.delete(f"{base}/contributions/{contribution['id']}", headers=outsider.headers),
        client.post(f"{base}/aggregations", json={"method": "average"}, headers=outsider.headers),
    ]
    assert [r.status_code for r in responses] == [404, 404, 404, 404]
    # Nothing changed: the member's contribution is still there, nothing else was added.
    after = client.get(base, headers=member.headers).json()
    assert [c["id"] for c in after["contributions"]] == [contribution["id"]]
    assert after["results"] == []


def test_unknown_and_malformed_study_ids_are_404(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, _, _ = trio
    for study_id in ("0" * 32, "not-an-id"):
        assert client.get(f"/v1/studies/{study_id}", headers=coordinator.headers).status_code == 404


def test_admin_neither_reads_nor_creates_studies(
    client: TestClient,
    trio: tuple[SiteHandle, SiteHandle, SiteHandle],
    admin_headers: dict[str, str],
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    as_admin = client.get(f"/v1/studies/{study['id']}", headers=admin_headers)
    unknown = client.get(f"/v1/studies/{'0' * 32}", headers=admin_headers)
    assert as_admin.status_code == 404
    assert as_admin.json()["detail"] == unknown.json()["detail"] == "study not found"
    assert client.get("/v1/studies", headers=admin_headers).status_code == 403
    response = client.post(
        "/v1/studies",
        json={"name": "x", "members": [member.id], "spec": spec()},
        headers=admin_headers,
    )
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("members", "loc"),
    [
        ("self", ["body", "members"]),
        ("unknown", ["body", "members", 1]),
        ("malformed", ["body", "members", 0]),
    ],
)
def test_empty_study_and_unknown_members_are_422_and_store_nothing(
    client: TestClient,
    trio: tuple[SiteHandle, SiteHandle, SiteHandle],
    members: str,
    loc: list[Any],
) -> None:
    coordinator, member, _ = trio
    ids = {
        "self": [coordinator.id],
        "unknown": [member.id, "f" * 32],
        "malformed": ["nope", member.id],
    }[members]
    response = client.post(
        "/v1/studies",
        json={"name": "x", "members": ids, "spec": spec()},
        headers=coordinator.headers,
    )
    assert response.status_code == 422, response.text
    assert loc in [e["loc"] for e in _errors(response)]
    assert client.get("/v1/studies", headers=coordinator.headers).json()["total"] == 0


def test_no_members_at_all_is_422(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, _, _ = trio
    response = client.post(
        "/v1/studies",
        json={"name": "x", "members": [], "spec": spec()},
        headers=coordinator.headers,
    )
    assert response.status_code == 422


def test_study_spec_follows_the_dataset_spec_rules(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    unbounded = [{"column": "age", "type": "numeric"}]
    response = client.post(
        "/v1/studies",
        json={"name": "x", "members": [member.id], "spec": spec(features=unbounded)},
        headers=coordinator.headers,
    )
    assert response.status_code == 422, response.text
    assert "public bounds" in response.json()["detail"]
    assert ["body", "spec", "features", 0] in [e["loc"] for e in _errors(response)]

    label_is_feature = spec(label={"column": "age", "positive": "yes"})
    response = client.post(
        "/v1/studies",
        json={"name": "x", "members": [member.id], "spec": label_is_feature},
        headers=coordinator.headers,
    )
    assert response.status_code == 422
    assert client.get("/v1/studies", headers=coordinator.headers).json()["total"] == 0


# --- contributions ---------------------------------------------------------------------


def test_member_contributes_an_owned_model_and_everyone_in_the_study_sees_it(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    model = upload_model(client, member, [0.5, -0.25, 0.0, 0.25, 1.0])
    contribution = contribute(client, member, study["id"], {"model_id": model["id"]})
    assert contribution["kind"] == "model"
    assert contribution["model_id"] == model["id"]
    assert contribution["site_id"] == member.id
    assert contribution["used"] is False
    seen = client.get(f"/v1/studies/{study['id']}", headers=coordinator.headers).json()
    assert [c["id"] for c in seen["contributions"]] == [contribution["id"]]


def test_another_sites_model_or_dataset_is_404(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, outsider = trio
    study = create_study(client, coordinator, [member])
    foreign_model = upload_model(client, coordinator, [0.1] * N_WEIGHTS)
    foreign_dataset = upload_dataset(client, outsider)
    url = f"/v1/studies/{study['id']}/contributions"
    by_member = client.post(url, json={"model_id": foreign_model["id"]}, headers=member.headers)
    assert by_member.status_code == 404
    grant = {"dataset_id": foreign_dataset["id"], "epsilon_cap": 1.0, "delta_cap": 0.0}
    assert client.post(url, json=grant, headers=member.headers).status_code == 404
    assert client.post(url, json={"model_id": "0" * 32}, headers=member.headers).status_code == 404
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert seen["contributions"] == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("bounds", "feature 'age': numeric with bounds [18.0, 100.0]"),
        ("categories", "feature 'color'"),
        ("missing", "missing features the study declares: 'color'"),
        ("extra", "features the study does not declare: 'height'"),
        ("order", "feature order: color, age"),
        ("label", "positive class: 'no'"),
        ("label_column", "label column: 'result'"),
    ],
)
def test_a_model_whose_spec_differs_is_422_saying_what_differs(
    client: TestClient,
    trio: tuple[SiteHandle, SiteHandle, SiteHandle],
    change: str,
    expected: str,
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    features = copy.deepcopy(FEATURES)
    label = dict(LABEL)
    n = N_WEIGHTS
    if change == "bounds":
        features[0]["upper"] = 100
    elif change == "categories":
        features[1]["categories"] = ["red", "blue", "green"]
    elif change == "missing":
        features = features[:1]
        n = 2
    elif change == "extra":
        features.append({"column": "height", "type": "numeric", "lower": 0, "upper": 250})
        n = N_WEIGHTS + 1
    elif change == "order":
        features = [features[1], features[0]]
    elif change == "label":
        label["positive"] = "no"
    elif change == "label_column":
        label["column"] = "result"
    model = upload_model(client, member, [0.1] * n, features=features, label=label)
    response = client.post(
        f"/v1/studies/{study['id']}/contributions",
        json={"model_id": model["id"]},
        headers=member.headers,
    )
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "does not match the study's" in detail
    assert expected in detail, detail
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert seen["contributions"] == []


def test_contributing_the_same_model_twice_is_409(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    model = upload_model(client, member, [0.1] * N_WEIGHTS)
    contribute(client, member, study["id"], {"model_id": model["id"]})
    again = client.post(
        f"/v1/studies/{study['id']}/contributions",
        json={"model_id": model["id"]},
        headers=member.headers,
    )
    assert again.status_code == 409


def test_dataset_grant_within_the_caps_is_recorded(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    dataset = upload_dataset(client, member, epsilon=2.0, delta=1e-6)
    url = f"/v1/studies/{study['id']}/contributions"
    too_much = {"dataset_id": dataset["id"], "epsilon_cap": 2.5, "delta_cap": 0.0}
    response = client.post(url, json=too_much, headers=member.headers)
    assert response.status_code == 422, response.text
    assert "within the dataset's budget caps" in response.json()["detail"]
    too_much_delta = {"dataset_id": dataset["id"], "epsilon_cap": 1.0, "delta_cap": 1e-5}
    assert client.post(url, json=too_much_delta, headers=member.headers).status_code == 422

    grant = contribute(
        client,
        member,
        study["id"],
        {"dataset_id": dataset["id"], "epsilon_cap": 1.5, "delta_cap": 1e-6},
    )
    assert grant["kind"] == "dataset"
    assert grant["dataset_id"] == dataset["id"]
    assert grant["epsilon_cap"] == pytest.approx(1.5)
    assert grant["delta_cap"] == pytest.approx(1e-6)
    # A grant is only recorded: nothing is spent.
    budget = client.get(f"/v1/datasets/{dataset['id']}/budget", headers=member.headers).json()
    assert budget["epsilon_spent"] == 0.0
    again = {"dataset_id": dataset["id"], "epsilon_cap": 0.5, "delta_cap": 0.0}
    assert client.post(url, json=again, headers=member.headers).status_code == 409


def test_a_dataset_whose_spec_differs_is_422(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    other = copy.deepcopy(FEATURES)
    other[0]["lower"] = 0
    dataset = upload_dataset(client, member, features=other)
    response = client.post(
        f"/v1/studies/{study['id']}/contributions",
        json={"dataset_id": dataset["id"], "epsilon_cap": 1.0, "delta_cap": 0.0},
        headers=member.headers,
    )
    assert response.status_code == 422
    assert "feature 'age'" in response.json()["detail"]


def test_bad_contribution_bodies_are_422(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    url = f"/v1/studies/{study['id']}/contributions"
    for body in (
        {},
        {"model_id": "a" * 32, "dataset_id": "b" * 32},
        {"dataset_id": "b" * 32, "epsilon_cap": 0},
        {"dataset_id": "b" * 32, "epsilon_cap": 1.0, "delta_cap": 1.0},
    ):
        assert client.post(url, json=body, headers=member.headers).status_code == 422, body


# --- withdrawal ------------------------------------------------------------------------


def test_member_withdraws_its_own_unused_contribution_only(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    model = upload_model(client, member, [0.1] * N_WEIGHTS)
    contribution = contribute(client, member, study["id"], {"model_id": model["id"]})
    url = f"/v1/studies/{study['id']}/contributions/{contribution['id']}"
    assert client.delete(url, headers=coordinator.headers).status_code == 403
    assert client.delete(url, headers=member.headers).status_code == 204
    assert client.delete(url, headers=member.headers).status_code == 404
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert seen["contributions"] == []
    # Withdrawn, it can be contributed again.
    contribute(client, member, study["id"], {"model_id": model["id"]})


def test_withdrawing_a_contribution_an_aggregation_used_is_409(
    client: TestClient, trio: tuple[SiteHandle, SiteHandle, SiteHandle]
) -> None:
    coordinator, member, _ = trio
    study = create_study(client, coordinator, [member])
    model = upload_model(client, member, [0.1] * N_WEIGHTS)
    contribution = contribute(client, member, study["id"], {"model_id": model["id"]})
    response = client.post(
        f"/v1/studies/{study['id']}/aggregations",
        json={"method": "average"},
        headers=coordinator.headers,
    )
    assert response.status_code == 202, response.text
    url = f"/v1/studies/{study['id']}/contributions/{contribution['id']}"
    withdrawn = client.delete(url, headers=member.headers)
    assert withdrawn.status_code == 409
    assert "used by an aggregation" in withdrawn.json()["detail"]
    seen = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert [c["used"] for c in seen["contributions"]] == [True]
