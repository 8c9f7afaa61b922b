"""The label's negative class outside dataset uploads (issue 18 item 4).

A dataset spec's ``label`` (with ``negative``) is also what a study's shared spec and an
uploaded model take, so the Adult example's ``{label, features}`` can be sent as a study spec
as it is: the negative class is kept with the label, checked by the same rules (it differs
from the positive class), and the earlier form without it still works.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api._studies import FEATURES, N_WEIGHTS, create_study, spec, upload_model
from tests.conftest import MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ADULT_SPEC = Path(__file__).resolve().parents[2] / "datasets" / "adult" / "spec.json"
BOTH = {"column": "outcome", "positive": "yes", "negative": "no"}


def test_a_study_keeps_the_negative_class_of_its_label(
    client: TestClient, site: SiteHandle, make_site: MakeSite
) -> None:
    study = create_study(client, site, [make_site()], study_spec=spec(label=BOTH))
    assert study["spec"]["label"] == BOTH


def test_the_adult_example_label_and_features_make_a_study_spec(
    client: TestClient, site: SiteHandle, make_site: MakeSite
) -> None:
    adult = json.loads(ADULT_SPEC.read_text())
    study_spec = {"label": adult["label"], "features": adult["features"]}
    study = create_study(client, site, [make_site()], study_spec=study_spec)
    assert study["spec"]["label"] == {"column": "income", "positive": ">50K", "negative": "<=50K"}


def test_an_uploaded_model_keeps_the_negative_class_in_its_export(
    client: TestClient, site: SiteHandle
) -> None:
    model = upload_model(client, site, [0.5] * N_WEIGHTS, label=BOTH)
    doc = client.get(f"/v1/models/{model['id']}/export", headers=site.headers).json()
    assert doc["label"] == BOTH


@pytest.mark.parametrize("path", ["/v1/models", "/v1/studies"])
def test_a_negative_class_equal_to_the_positive_one_is_a_422(
    client: TestClient, site: SiteHandle, make_site: MakeSite, path: str
) -> None:
    label = {"column": "outcome", "positive": "yes", "negative": "yes"}
    body: dict[str, Any]
    if path == "/v1/models":
        body = {"label": label, "features": FEATURES, "weights": [0.5] * N_WEIGHTS}
    else:
        body = {"name": "s", "members": [make_site().id], "spec": spec(label=label)}
    response = client.post(path, json=body, headers=site.headers)
    assert response.status_code == 422, response.text
    assert "must differ from the positive class" in response.json()["detail"]
    assert any(e["loc"][-1] == "negative" for e in response.json()["errors"])
