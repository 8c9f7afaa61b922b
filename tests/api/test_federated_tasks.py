"""The federated noisy average on studies of multi-class and numeric labels (issue 29), on
SQLite and PostgreSQL.

* A multi-class study runs ``noisy_average`` end to end: quoted with the hand-derived
  calibration (L = √2, noise in dimension d·K), every member's dataset charged ε as quoted, the
  K × d model stored with the study's classes, predicted with and exported.
* A numeric study runs it with the Huber loss (its default there; L = h, noise in ℝ^d), the
  model stored with the study's bounds, predictions within them.
* A loss the label does not take (``squared`` or ``logistic`` on numeric labels, ``huber`` on
  classes) is a 422 ``unsupported-label-task`` naming the loss and the reason, dry run
  included, with nothing charged and no job.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from service.db.uow import UnitOfWorkFactory
from service.dp.federated import federated_calibrate
from tests.api._studies import epsilon_spent
from tests.api.test_datasets import assert_problem
from tests.api.test_label_tasks import (
    CLASSES,
    LOWER,
    MULTICLASS,
    NUMERIC,
    UPPER,
    _predict,
    make_rows,
)
from tests.api.test_study_tasks import dataset_of, grant, ledger_rows, study_of
from tests.conftest import MakeSite, SiteHandle

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

LAM = 0.05
D = 5  # age, the three colours and the intercept (tests/api/test_label_tasks.py)


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def _study(
    client: TestClient, coordinator: SiteHandle, make_site: MakeSite, label: dict[str, Any]
) -> tuple[dict[str, Any], list[tuple[SiteHandle, str]]]:
    a, b, c = make_site(), make_site(), make_site()
    study = study_of(client, coordinator, [a, b, c], label)
    datasets = []
    for member, seed in ((a, 31), (b, 32), (c, 33)):
        dataset = dataset_of(client, member, label, seed=seed)
        grant(client, member, study["id"], dataset["id"])
        datasets.append((member, str(dataset["id"])))
    return study, datasets


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC])
def test_noisy_average_fits_a_multiclass_or_numeric_study_charged_as_quoted(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    engine: Engine,
    uow_factory: UnitOfWorkFactory,
    label: dict[str, Any],
) -> None:
    study, datasets = _study(client, site, make_site, label)
    n, k = len(make_rows(seed=31)), len(CLASSES)
    body: dict[str, Any] = {"protocol": "noisy_average", "epsilon": 1.0, "regularization": LAM}
    url = f"/v1/studies/{study['id']}/federated-fits"
    quote = client.post(url, params={"dry_run": "true"}, json=body, headers=site.headers)
    assert quote.status_code == 200, quote.text
    quoted = quote.json()
    cal = quoted["calibration"]
    task = "multiclass" if label is MULTICLASS else "regression"
    assert cal["task"] == task
    # hand-derived: L = √2 (multinomial) or h = ½ (Huber, the default loss of a numeric study)
    # and τ the task's certificate tolerance (same for every site, no size in it)
    if label is MULTICLASS:
        assert cal["n_classes"] == k
        assert cal["lipschitz"] == math.sqrt(2.0)
        assert cal["noise_dimension"] == D * k
        assert cal["loss"] == "logistic"
    else:
        assert cal["n_classes"] == 1
        assert cal["lipschitz"] == 0.5
        assert cal["loss"] == "huber"
    expected = federated_calibrate(
        "noisy_average",
        site_sizes=[n] * 3,
        d=D,
        epsilon=1.0,
        loss=cal["loss"],
        regularization=LAM,
        task=task,  # type: ignore[arg-type]
        n_classes=k,
    )
    assert cal["certificate_tolerance"] == expected.details["certificate_tolerance"]
    lipschitz = math.sqrt(2.0) if label is MULTICLASS else 0.5
    tau = float(cal["certificate_tolerance"])
    sensitivity = (2 * lipschitz / (n * LAM) + 2 * tau / LAM) / 3
    assert expected.details["sensitivity"] == pytest.approx(sensitivity, rel=1e-9)
    # β = ε/S for ε = 1 (the noise b ∝ exp(−β‖b‖) in dimension d or dK): withheld by the quote
    # (it reveals n_min), so checked on the library against the hand S above
    assert expected.details["beta"] == pytest.approx(1.0 / sensitivity, rel=1e-9)
    assert "beta" not in cal  # depends on the smallest site's n: withheld
    assert [c["epsilon"] for c in quoted["costs"]] == [1.0, 1.0, 1.0]
    response = client.post(url, json=body, headers={**site.headers, "Prefer": "wait=60"})
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job["error"]
    for (member, dataset_id), cost in zip(datasets, quoted["costs"], strict=True):
        assert cost["dataset_id"] == dataset_id
        assert epsilon_spent(client, member, dataset_id) == pytest.approx(cost["epsilon"]) == 1.0
    assert ledger_rows(engine) == 3
    with uow_factory() as uow:
        stored = uow.models.get(job["model_id"])
    assert stored is not None
    coef = np.asarray(stored.body["coef"])
    if label is MULTICLASS:
        assert stored.body["kind"] == "multiclass"
        assert coef.shape == (k, D)
    else:
        assert stored.body["kind"] == "linear"
        assert coef.shape == (D,)
    member = datasets[1][0]
    model = client.get(f"/v1/models/{job['model_id']}", headers=member.headers).json()
    assert model["mechanism"] == "noisy_average"
    assert model["task"] == task
    assert model["label"] == label
    record = model["privacy"]
    assert record["calibration"]["task"] == task
    predictions = _predict(client, member, job["model_id"])
    if label is MULTICLASS:
        assert {p["predicted_class"] for p in predictions} <= set(CLASSES)
    else:
        assert all(LOWER <= p["value"] <= UPPER for p in predictions)
    exported = client.get(f"/v1/models/{job['model_id']}/export", headers=site.headers)
    assert exported.status_code == 200, exported.text
    assert exported.json()["task"] == task


@pytest.mark.parametrize(
    ("label", "loss"),
    [(NUMERIC, "squared"), (NUMERIC, "logistic"), (MULTICLASS, "huber")],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_loss_the_label_does_not_take_is_a_422_with_nothing_charged(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    engine: Engine,
    label: dict[str, Any],
    loss: str,
    dry_run: bool,
) -> None:
    study, _ = _study(client, site, make_site, label)
    response = client.post(
        f"/v1/studies/{study['id']}/federated-fits",
        params={"dry_run": "true"} if dry_run else None,
        json={"protocol": "noisy_average", "epsilon": 1.0, "regularization": LAM, "loss": loss},
        headers=site.headers,
    )
    problem = assert_problem(response, 422, "unsupported-label-task")
    assert problem["errors"][0]["loc"] == ["body", "loss"]
    assert f"not {loss!r}" in problem["detail"]
    reason = "derivative is unbounded" if label is NUMERIC else "multinomial logistic loss"
    assert reason in problem["detail"]
    assert ledger_rows(engine) == 0
    with engine.connect() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM job")).scalar_one() == 0
