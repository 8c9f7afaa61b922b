"""A node offers a multi-class or regression model to a coordinator's study (issue 29).

``POST /v1/models/{id}/offers`` on the node uploads the model to the coordinator
(``POST /v1/models`` there) and contributes it to the study. Here the node's coordinator link
is the same app, reached through the test client with the member's key at the coordinator (the
HTTP link, service.runtime.node_link, sends the same requests; tests/e2e/test_nodes.py runs it
between real servers for a binary model). Checked, on SQLite and PostgreSQL:

* the coordinator's copy is the node's model: the same weights (K rows, or the vector in the
  label's [−1, 1] units), label, preprocessing and predictions, with the node's record as an
  unverified claim; nothing is charged on the node;
* the coordinator averages two nodes' models entry by entry;
* a study of another label task refuses the contribution, and the node answers 502 with the
  coordinator's reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.domain.errors import UpstreamError
from service.dp.noise.draws import round_to_grid
from tests.api._studies import create_study, epsilon_spent
from tests.api.test_label_tasks import (
    CLASSES,
    FEATURES,
    LOWER,
    MULTICLASS,
    NUMERIC,
    UPPER,
    _predict,
    uploaded,
)
from tests.conftest import MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


class ClientLink:
    """The node's ``ModelLink`` to a coordinator served by the same test client."""

    def __init__(self, client: TestClient, headers: Mapping[str, str]) -> None:
        self.client = client
        self.headers = dict(headers)
        self.bodies: list[dict[str, Any]] = []

    def _post(self, path: str, body: Mapping[str, Any]) -> str:
        response = self.client.post(path, json=dict(body), headers=self.headers)
        if response.status_code >= 400:
            detail = response.json().get("detail")
            raise UpstreamError(f"the coordinator answered {response.status_code}: {detail}")
        return str(response.json()["id"])

    def upload_model(self, body: Mapping[str, Any]) -> str:
        self.bodies.append(dict(body))
        return self._post("/v1/models", body)

    def contribute_model(self, *, study_id: str, model_id: str) -> str:
        return self._post(f"/v1/studies/{study_id}/contributions", {"model_id": model_id})


def node_model(client: TestClient, site: SiteHandle, label: Mapping[str, Any]) -> dict[str, Any]:
    """A model the site fitted on its own dataset (objective perturbation, or AdaSSP)."""
    dataset = uploaded(client, site, label)
    mechanism = "objective_perturbation" if label is MULTICLASS else "adassp"
    response = client.post(
        f"/v1/datasets/{dataset['id']}/fits",
        json={"mechanism": mechanism, "epsilon": 1.0, "delta": 1e-6, "regularization": 0.05},
        headers={**site.headers, "Prefer": "wait=30"},
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    model: dict[str, Any] = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    model["dataset_spent"] = epsilon_spent(client, site, dataset["id"])
    return model


def offer(client: TestClient, site: SiteHandle, model_id: str, study_id: str) -> Any:
    client.app.state.coordinator_link = ClientLink(client, site.headers)  # type: ignore[attr-defined]
    return client.post(
        f"/v1/models/{model_id}/offers", json={"study_id": study_id}, headers=site.headers
    )


@pytest.mark.parametrize(
    "label",
    [
        pytest.param(MULTICLASS, id="multiclass"),
        # two AdaSSP fits: a few seconds, so in the heavy tier (multi-class guards the default)
        pytest.param(NUMERIC, id="regression", marks=pytest.mark.heavy),
    ],
)
def test_a_node_offers_a_model_of_its_task_and_the_coordinator_averages_them(
    client: TestClient, site: SiteHandle, make_site: MakeSite, label: dict[str, Any]
) -> None:
    a, b = make_site(), make_site()
    study = create_study(client, site, [a, b], study_spec={"label": label, "features": FEATURES})
    copies = []
    for member in (a, b):
        local = node_model(client, member, label)
        response = offer(client, member, local["id"], study["id"])
        assert response.status_code == 201, response.text
        out = response.json()
        assert out["model_id"] == local["id"]
        # what leaves the node: the released weights and public spec, the record's statement
        sent = client.app.state.coordinator_link.bodies[-1]  # type: ignore[attr-defined]
        assert set(sent) == {"label", "features", "row_norm", "weights", "loss", "privacy_claim"}
        assert sent["weights"] == local["model"]["coef"]
        assert sent["label"] == local["label"]
        assert sent["features"] == local["preprocessing"]["features"]
        assert sent["privacy_claim"] == {
            "epsilon": local["privacy"]["epsilon"],
            "delta": local["privacy"]["delta"],
            "mechanism": local["mechanism"],
            "description": f"fitted on a PrivFit node (its model {local['id']}); the node's "
            f"privacy record: {local['privacy']['statement']}",
        }
        copy = client.get(f"/v1/models/{out['coordinator_model_id']}", headers=member.headers)
        copy_model = copy.json()
        assert copy_model["source"] == "upload"
        for key in ("task", "model", "label", "preprocessing", "loss", "feature_names"):
            assert copy_model[key] == local[key], key
        assert copy_model["privacy"]["verified"] is False
        assert copy_model["privacy"]["claim"]["epsilon"] == local["privacy"]["epsilon"]
        assert local["id"] in copy_model["privacy"]["claim"]["description"]
        assert _predict(client, member, copy_model["id"]) == _predict(client, member, local["id"])
        # post-processing of a release: the node's dataset is charged nothing more
        dataset_id = local["dataset_id"]
        assert epsilon_spent(client, member, dataset_id) == local["dataset_spent"]
        copies.append(np.asarray(copy_model["model"]["coef"]))
    assert copies[0].shape == ((len(CLASSES), 5) if label is MULTICLASS else (5,))

    response = client.post(
        f"/v1/studies/{study['id']}/aggregations", json={"method": "average"}, headers=site.headers
    )
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    result = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    assert result["task"] == ("multiclass" if label is MULTICLASS else "regression")
    expected = round_to_grid(0.5 * copies[0] + 0.5 * copies[1])
    assert np.array_equal(np.asarray(result["model"]["coef"]), expected)
    predictions = _predict(client, site, job["model_id"])
    if label is MULTICLASS:
        assert {p["predicted_class"] for p in predictions} <= set(CLASSES)
    else:
        assert all(LOWER <= p["value"] <= UPPER for p in predictions)


def test_a_study_of_another_task_refuses_the_offer_with_the_coordinators_reason(
    client: TestClient, site: SiteHandle, make_site: MakeSite
) -> None:
    member = make_site()
    study = create_study(
        client, site, [member], study_spec={"label": NUMERIC, "features": FEATURES}
    )
    local = node_model(client, member, MULTICLASS)
    response = offer(client, member, local["id"], study["id"])
    assert response.status_code == 502, response.text
    problem = response.json()
    assert "the coordinator answered 422" in problem["detail"]
    assert "label" in problem["detail"]
    contributions = client.get(f"/v1/studies/{study['id']}", headers=site.headers).json()
    assert contributions["contributions"] == []
