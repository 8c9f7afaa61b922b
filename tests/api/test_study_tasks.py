"""Studies of multi-class and numeric labels (issue 29), on SQLite and PostgreSQL.

* A study declares any of the three label forms; a dataset or model joins only with the same
  form: the same task, the same classes in the same order, the same bounds. A mismatch is a
  422 naming the field (``label task``, ``label classes``, ``label bounds``), nothing stored.
* ``average`` averages multi-class models' (K, d) matrices and regression models' vectors
  entry by entry, exactly as computed by hand (then the release grid), charging nothing.
* ``feature`` with linear meta-features fits the study's task on the N·K (or N) site-model
  scores, charged as quoted; ``feature`` with sigmoid meta-features, PST-H (``transfer`` with
  feature groups), the binary federated protocols and node offers refuse a study of these
  labels with ``unsupported-label-task`` and the reason, nothing charged (dry runs too).
* ``transfer`` fits a multi-class study (the centred multinomial objective perturbation, a
  K × d model) and a numeric one (the centred Huber residual fit) end to end: quoted with the
  hand-derived calibration at λ + η, charged as quoted to the target alone, stored with the
  study's label, predicted with and exported; a target of another label form, or a loss the
  task does not take, is a 422 with nothing charged.
* ``distributed_lasso`` fits a study of numeric labels end to end: charged as quoted, the
  calibration the binary one (no new sensitivity), predictions within the public bounds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import mpmath as mp  # type: ignore[import-untyped]
import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from service.db.uow import UnitOfWorkFactory
from service.dp.federated import federated_calibrate
from service.dp.noise.draws import round_to_grid
from tests.api._studies import contribute, create_study, epsilon_spent
from tests.api.test_datasets import assert_problem
from tests.api.test_label_tasks import (
    CLASSES,
    FEATURES,
    LOWER,
    MULTICLASS,
    NUMERIC,
    ROWS,
    UPPER,
    _fit,
    _predict,
    csv_bytes,
    make_rows,
    upload,
)
from tests.conftest import MakeSite, SiteHandle
from tests.unit.dp._budget import objective_budget
from tests.unit.dp._cks import cks_infimum

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def study_of(
    client: TestClient, coordinator: SiteHandle, members: list[SiteHandle], label: Mapping[str, Any]
) -> dict[str, Any]:
    return create_study(
        client, coordinator, members, study_spec={"label": dict(label), "features": FEATURES}
    )


def dataset_of(
    client: TestClient,
    site: SiteHandle,
    label: Mapping[str, Any],
    *,
    seed: int = 3,
    **overrides: Any,
) -> dict[str, Any]:
    response = upload(client, site, label, csv_bytes(make_rows(seed=seed)), **overrides)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def ledger_rows(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT COUNT(*) FROM ledger_charge")).scalar_one())


def grant(client: TestClient, site: SiteHandle, study_id: str, dataset_id: str) -> None:
    contribute(
        client, site, study_id, {"dataset_id": dataset_id, "epsilon_cap": 2.0, "delta_cap": 1e-6}
    )


# ---- the label form of a study ---------------------------------------------------------------


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC])
def test_a_study_declares_a_multiclass_or_numeric_label(
    client: TestClient, site: SiteHandle, make_site: MakeSite, label: dict[str, Any]
) -> None:
    member = make_site()
    study = study_of(client, site, [member], label)
    assert study["spec"]["label"] == label
    dataset = dataset_of(client, member, label)
    grant(client, member, study["id"], dataset["id"])
    again = client.get(f"/v1/studies/{study['id']}", headers=member.headers).json()
    assert [c["dataset_id"] for c in again["contributions"]] == [dataset["id"]]


def test_a_study_label_of_mixed_forms_is_a_422_naming_the_field(
    client: TestClient, site: SiteHandle, make_site: MakeSite, engine: Engine
) -> None:
    member = make_site()
    response = client.post(
        "/v1/studies",
        json={
            "name": "mixed",
            "members": [member.id],
            "spec": {"label": {**NUMERIC, "classes": CLASSES}, "features": FEATURES},
        },
        headers=site.headers,
    )
    body = assert_problem(response, 422, "invalid-input")
    assert ["body", "spec", "label", "lower"] in [e["loc"] for e in body["errors"]]
    with engine.connect() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM study")).scalar_one() == 0


@pytest.mark.parametrize(
    ("study_label", "dataset_label", "field"),
    [
        (MULTICLASS, {**MULTICLASS, "classes": ["high", "mid", "low"]}, "label classes"),
        (NUMERIC, {**NUMERIC, "upper": 50.0}, "label bounds"),
        (NUMERIC, MULTICLASS, "label task"),
        (MULTICLASS, NUMERIC, "label task"),
    ],
)
def test_a_dataset_of_another_label_form_is_refused_naming_the_field(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    engine: Engine,
    study_label: dict[str, Any],
    dataset_label: dict[str, Any],
    field: str,
) -> None:
    member = make_site()
    study = study_of(client, site, [member], study_label)
    dataset = dataset_of(client, member, dataset_label)
    response = client.post(
        f"/v1/studies/{study['id']}/contributions",
        json={"dataset_id": dataset["id"], "epsilon_cap": 1.0, "delta_cap": 0.0},
        headers=member.headers,
    )
    body = assert_problem(response, 422, "invalid-input")
    assert field in body["detail"]
    # (the label column differs too when the task does: each difference is listed)
    assert all(e["loc"] == ["body", "dataset_id"] for e in body["errors"])
    assert [e["msg"] for e in body["errors"] if e["msg"].startswith("label ")][-1].startswith(field)
    again = client.get(f"/v1/studies/{study['id']}", headers=site.headers).json()
    assert again["contributions"] == []
    assert ledger_rows(engine) == 0


# ---- averaging -------------------------------------------------------------------------------


def _fitted(
    client: TestClient, site: SiteHandle, label: Mapping[str, Any], mechanism: str, seed: int
) -> tuple[str, str]:
    """(dataset id, model id) of a private fit at (1, 1e-6)."""
    dataset = dataset_of(client, site, label, seed=seed)
    body: dict[str, Any] = {
        "mechanism": mechanism,
        "epsilon": 1.0,
        "delta": 1e-6,
        "regularization": 0.05,
    }
    if mechanism != "adassp":
        body["loss"] = "huber" if label is NUMERIC else "logistic"
    response = _fit(client, site, dataset["id"], body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    return dataset["id"], str(job["model_id"])


@pytest.mark.parametrize(
    ("label", "mechanism", "weights"),
    [
        (MULTICLASS, "objective_perturbation", [1.0, 3.0]),
        (NUMERIC, "adassp", None),
    ],
)
def test_average_combines_multiclass_matrices_and_regression_vectors_entry_by_entry(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    engine: Engine,
    uow_factory: UnitOfWorkFactory,
    label: dict[str, Any],
    mechanism: str,
    weights: list[float] | None,
) -> None:
    a, b = make_site(), make_site()
    study = study_of(client, site, [a, b], label)
    fitted = [_fitted(client, s, label, mechanism, seed) for s, seed in ((a, 5), (b, 6))]
    for member, (_, model_id) in zip((a, b), fitted, strict=True):
        contribute(client, member, study["id"], {"model_id": model_id})
    spent = [epsilon_spent(client, s, d) for s, (d, _) in zip((a, b), fitted, strict=True)]
    charges = ledger_rows(engine)
    body: dict[str, Any] = {"method": "average"}
    if weights is not None:
        body["weights"] = weights
    response = client.post(
        f"/v1/studies/{study['id']}/aggregations", json=body, headers=site.headers
    )
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] == "succeeded"
    with uow_factory() as uow:
        sources = [uow.models.get(m) for _, m in fitted]
        result = uow.models.get(job["model_id"])
    assert result is not None
    assert all(s is not None for s in sources)
    coefs = [np.asarray(s.body["coef"]) for s in sources if s is not None]
    pi = np.array([0.25, 0.75]) if weights else np.array([0.5, 0.5])
    expected = round_to_grid(pi[0] * coefs[0] + pi[1] * coefs[1])
    kind = "multiclass" if label is MULTICLASS else "linear"
    assert result.body["kind"] == kind
    assert np.asarray(result.body["coef"]).shape == coefs[0].shape
    assert np.array_equal(np.asarray(result.body["coef"]), expected)
    # post-processing: nothing charged, every dataset's spend unchanged
    assert ledger_rows(engine) == charges
    assert [epsilon_spent(client, s, d) for s, (d, _) in zip((a, b), fitted, strict=True)] == spent
    model = client.get(f"/v1/models/{job['model_id']}", headers=a.headers).json()
    assert model["task"] == ("multiclass" if label is MULTICLASS else "regression")
    assert model["label"] == label
    predictions = _predict(client, a, job["model_id"])
    if label is MULTICLASS:
        assert {p["predicted_class"] for p in predictions} <= set(CLASSES)
    else:
        assert all(LOWER <= p["value"] <= UPPER for p in predictions)


# ---- what stays binary -------------------------------------------------------------------


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC])
@pytest.mark.parametrize("method", ["feature", "transfer"])
@pytest.mark.parametrize("dry_run", [False, True])
def test_sigmoid_stacking_and_pst_h_refuse_these_studies_with_the_reason(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    engine: Engine,
    label: dict[str, Any],
    method: str,
    dry_run: bool,
) -> None:
    member = make_site()
    study = study_of(client, site, [member], label)
    own = dataset_of(client, site, label)
    body: dict[str, Any] = {"method": method, "epsilon": 1.0}
    if method == "feature":
        body.update(holdout_dataset_id=own["id"], meta_features="sigmoid")
    else:
        body.update(
            target_dataset_id=own["id"],
            transfer_strength=0.1,
            feature_groups=[["age"], ["color"]],
        )
    response = client.post(
        f"/v1/studies/{study['id']}/aggregations",
        params={"dry_run": "true"} if dry_run else None,
        json=body,
        headers=site.headers,
    )
    problem = assert_problem(response, 422, "unsupported-label-task")
    assert f"the {method} method" in problem["detail"]
    assert "is available for studies of binary labels only (" in problem["detail"]
    assert "average the models instead" in problem["detail"]
    assert "probability" in problem["detail"]  # the reason: a binary label's probabilities
    assert "not yet" not in problem["detail"]
    field = "meta_features" if method == "feature" else "feature_groups"
    assert problem["errors"][0]["loc"] == ["body", field]
    assert epsilon_spent(client, site, own["id"]) == 0.0
    assert ledger_rows(engine) == 0


@pytest.mark.parametrize(
    ("label", "mechanism", "loss"),
    [
        (MULTICLASS, "objective_perturbation", "logistic"),
        (NUMERIC, "output_perturbation", "huber"),
    ],
)
def test_linear_stacking_fits_the_study_task_on_the_site_models_scores(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    uow_factory: UnitOfWorkFactory,
    label: dict[str, Any],
    mechanism: str,
    loss: str,
) -> None:
    a, b = make_site(), make_site()
    study = study_of(client, site, [a, b], label)
    site_mechanism = "adassp" if label is NUMERIC else mechanism
    for member, seed in ((a, 11), (b, 12)):
        _, model_id = _fitted(client, member, label, site_mechanism, seed)
        contribute(client, member, study["id"], {"model_id": model_id})
    holdout = dataset_of(client, site, label, seed=13)
    body = {
        "method": "feature",
        "holdout_dataset_id": holdout["id"],
        "epsilon": 1.0,
        "delta": 1e-6,
        "mechanism": mechanism,
        "loss": loss,
        "regularization": 0.05,
        "meta_features": "linear",
    }
    url = f"/v1/studies/{study['id']}/aggregations"
    quote = client.post(url, params={"dry_run": "true"}, json=body, headers=site.headers)
    assert quote.status_code == 200, quote.text
    calibration = quote.json()["calibration"]
    # the meta level has one feature per site-model score: N·K (multi-class) or N
    k = len(CLASSES) if label is MULTICLASS else 1
    assert calibration["d"] == 2 * k
    assert calibration["task"] == ("multiclass" if label is MULTICLASS else "regression")
    response = client.post(url, json=body, headers={**site.headers, "Prefer": "wait=30"})
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job["error"]
    assert epsilon_spent(client, site, holdout["id"]) == pytest.approx(
        quote.json()["cost"]["epsilon"]
    )
    with uow_factory() as uow:
        result = uow.models.get(job["model_id"])
    assert result is not None
    coef = np.asarray(result.body["coef"])
    if label is MULTICLASS:
        assert result.body["kind"] == "multiclass"
        assert coef.shape == (len(CLASSES), 5)
    else:
        assert result.body["kind"] == "linear"
        assert coef.shape == (5,)
    predictions = _predict(client, b, job["model_id"])
    if label is MULTICLASS:
        assert {p["predicted_class"] for p in predictions} <= set(CLASSES)
    else:
        assert all(LOWER <= p["value"] <= UPPER for p in predictions)


@pytest.mark.parametrize(
    ("label", "protocol"),
    [
        (MULTICLASS, "psgd"),
        (MULTICLASS, "admm"),
        (MULTICLASS, "distributed_lasso"),
        (NUMERIC, "psgd"),
        (NUMERIC, "admm"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_protocol_that_does_not_fit_the_label_is_refused_with_nothing_charged(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    engine: Engine,
    label: dict[str, Any],
    protocol: str,
    dry_run: bool,
) -> None:
    a, b = make_site(), make_site()
    study = study_of(client, site, [a, b], label)
    for member, seed in ((a, 7), (b, 8)):
        grant(client, member, study["id"], dataset_of(client, member, label, seed=seed)["id"])
    response = client.post(
        f"/v1/studies/{study['id']}/federated-fits",
        params={"dry_run": "true"} if dry_run else None,
        json={"protocol": protocol, "epsilon": 1.0, "delta": 1e-6, "regularization": 0.05},
        headers=site.headers,
    )
    problem = assert_problem(response, 422, "unsupported-label-task")
    assert f"the {protocol} protocol" in problem["detail"]
    assert problem["errors"][0]["loc"] == ["body", "protocol"]
    expected = "noisy_average or distributed_lasso" if label is NUMERIC else "use noisy_average"
    assert expected in problem["detail"]
    assert ledger_rows(engine) == 0
    with engine.connect() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM job")).scalar_one() == 0


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC])
def test_a_node_offer_to_such_a_study_is_refused(
    client: TestClient, site: SiteHandle, make_site: MakeSite, label: dict[str, Any]
) -> None:
    member = make_site()
    study = study_of(client, site, [member], label)
    response = client.post(
        f"/v1/studies/{study['id']}/remote-contributions",
        json={
            "node_dataset_id": "0" * 32,
            "preprocessing": {},
            "label": label,
            "n_features": 5,
            "epsilon_cap": 1.0,
            "delta_cap": 0.0,
        },
        headers=member.headers,
    )
    assert "site node" in assert_problem(response, 422, "unsupported-label-task")["detail"]
    listed = client.get(f"/v1/studies/{study['id']}/remote-contributions", headers=site.headers)
    assert listed.status_code == 200
    assert listed.json()["items"] == []


# ---- the distributed Lasso on numeric labels -------------------------------------------------


def test_the_distributed_lasso_fits_a_study_of_numeric_labels_charged_as_quoted(
    client: TestClient, site: SiteHandle, make_site: MakeSite
) -> None:
    a, b = make_site(), make_site()
    study = study_of(client, site, [a, b], NUMERIC)
    datasets = []
    for member, seed in ((a, 9), (b, 10)):
        dataset = dataset_of(client, member, NUMERIC, seed=seed)
        grant(client, member, study["id"], dataset["id"])
        datasets.append((member, dataset["id"]))
    body = {
        "protocol": "distributed_lasso",
        "epsilon": 1.0,
        "delta": 1e-6,
        "regularization": 0.01,
        "params": {"iterations": 20},
    }
    url = f"/v1/studies/{study['id']}/federated-fits"
    quote = client.post(url, params={"dry_run": "true"}, json=body, headers=site.headers)
    assert quote.status_code == 200, quote.text
    quoted = quote.json()
    # no new sensitivity: the calibration of ±1 labels, with the task named in the record
    binary = federated_calibrate(
        "distributed_lasso",
        site_sizes=[len(ROWS)] * 2,
        d=5,
        epsilon=1.0,
        delta=1e-6,
        loss="squared",
        regularization=0.01,
        iterations=20,
    )
    assert quoted["calibration"]["task"] == "regression"
    assert quoted["calibration"]["sigma"] == binary.details["sigma"]
    # hand-derived σ: each of T = 20 rounds releases a sum of gradients clipped to C = 1, so a
    # replaced row moves it by Δ = 2C = 2 and the round is ρ₁ = Δ²/(2σ²)-zCDP; T rounds
    # compose to ρ = Tρ₁. The CKS conversion (the protocol's default) gives (ε, δ)-DP with
    # ε(ρ) = min_{α>1} αρ + (ln(1/δ) + (α − 1)ln(1 − 1/α) − ln α)/(α − 1); the largest ρ
    # with ε(ρ) ≤ 1 at δ = 10⁻⁶ is ρ ≈ 0.0243560, so σ = Δ/√(2ρ/T) ≈ 40.5254
    rho = _largest_cks_rho(1.0, 1e-6)
    assert float(rho) == pytest.approx(0.0243559703595, rel=1e-9)
    sigma = 2.0 / math.sqrt(2.0 * float(rho) / 20)
    assert quoted["calibration"]["sigma"] == pytest.approx(sigma, rel=1e-6)
    assert quoted["calibration"]["sensitivity"] == binary.details["sensitivity"] == 2.0
    response = client.post(url, json=body, headers={**site.headers, "Prefer": "wait=30"})
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job
    for (member, dataset_id), cost in zip(datasets, quoted["costs"], strict=True):
        assert cost["dataset_id"] == dataset_id
        assert epsilon_spent(client, member, dataset_id) == pytest.approx(cost["epsilon"]) == 1.0
    model = client.get(f"/v1/models/{job['model_id']}", headers=b.headers).json()
    assert model["task"] == "regression"
    assert model["label"] == NUMERIC
    assert model["privacy"]["calibration"]["task"] == "regression"
    assert all(LOWER <= p["value"] <= UPPER for p in _predict(client, b, job["model_id"]))


def _largest_cks_rho(epsilon: float, delta: float) -> Any:
    """The largest ρ whose CKS ε at δ (:func:`tests.unit.dp._cks.cks_infimum`, increasing in ρ)
    is ≤ ε, by bisection in 30-digit mpmath."""
    with mp.workdps(30):
        lo, hi = mp.mpf(0), mp.mpf(epsilon)
        for _ in range(100):
            mid = (lo + hi) / 2
            if cks_infimum(mid, delta) <= epsilon:
                lo = mid
            else:
                hi = mid
        return lo


# ---- transfer on multi-class and numeric labels ----------------------------------------------

TRANSFER_ETA, TRANSFER_LAM = 0.5, 0.05


def _transfer_study(
    client: TestClient, site: SiteHandle, make_site: MakeSite, label: dict[str, Any]
) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    """A study of ``label`` with two members' contributed private models and the
    coordinator's own target dataset: (study, source model ids, target)."""
    a, b = make_site(), make_site()
    study = study_of(client, site, [a, b], label)
    mechanism = "objective_perturbation"
    models = []
    for member, seed in ((a, 21), (b, 22)):
        _, model_id = _fitted(client, member, label, mechanism, seed)
        contribute(client, member, study["id"], {"model_id": model_id})
        models.append(model_id)
    return study, models, dataset_of(client, site, label, seed=23)


@pytest.mark.parametrize("label", [MULTICLASS, NUMERIC])
def test_transfer_fits_a_multiclass_or_numeric_study_charged_as_quoted(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    engine: Engine,
    uow_factory: UnitOfWorkFactory,
    label: dict[str, Any],
) -> None:
    study, sources, target = _transfer_study(client, site, make_site, label)
    n = len(make_rows(seed=23))
    body: dict[str, Any] = {
        "method": "transfer",
        "target_dataset_id": target["id"],
        "epsilon": 1.0,
        "transfer_strength": TRANSFER_ETA,
        "regularization": TRANSFER_LAM,
    }
    if label is NUMERIC:
        body["loss"] = "huber"
    url = f"/v1/studies/{study['id']}/aggregations"
    quote = client.post(url, params={"dry_run": "true"}, json=body, headers=site.headers)
    assert quote.status_code == 200, quote.text
    quoted = quote.json()
    cal = quoted["calibration"]
    assert cal["task"] == ("multiclass" if label is MULTICLASS else "regression")
    assert cal["transfer_strength"] == TRANSFER_ETA
    assert cal["regularization"] == TRANSFER_LAM
    assert cal["calibration_strong_convexity"] == pytest.approx(TRANSFER_LAM + TRANSFER_ETA)
    # hand-derived: the Jacobian part at λ + η = 0.55 (Δ = 0: it is far below ε₁/2), the
    # noise rate from the task's gradient sensitivity (2√2 for K classes, 2h = 1 for Huber h = ½)
    k = len(CLASSES)
    ridge = TRANSFER_LAM + TRANSFER_ETA
    if label is MULTICLASS:
        jacobian = (k - 1) * math.log1p(1.0 / (k * n * ridge))
        eps1 = objective_budget(1.0, n, 5 * k)
        beta = (eps1 - jacobian) / (2.0 * math.sqrt(2.0))
    else:
        jacobian = math.log1p(1.0 / (n * ridge))
        eps1 = objective_budget(1.0, n, 5)
        beta = eps1 - jacobian
    assert cal["Delta"] == 0.0
    assert cal["jacobian_epsilon"] == pytest.approx(jacobian, rel=1e-12)
    assert cal["beta"] == pytest.approx(beta, rel=1e-12)
    assert quoted["cost"]["epsilon"] == 1.0
    charges = ledger_rows(engine)
    response = client.post(url, json=body, headers={**site.headers, "Prefer": "wait=30"})
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job["error"]
    # charged as quoted, to the target alone (the sources are post-processed)
    assert ledger_rows(engine) == charges + 1
    assert epsilon_spent(client, site, target["id"]) == pytest.approx(quoted["cost"]["epsilon"])
    with uow_factory() as uow:
        result = uow.models.get(job["model_id"])
        source_models = [uow.models.get(m) for m in sources]
    assert result is not None
    coef = np.asarray(result.body["coef"])
    if label is MULTICLASS:
        assert result.body["kind"] == "multiclass"
        assert coef.shape == (k, 5)
    else:
        assert result.body["kind"] == "linear"
        assert coef.shape == (5,)
    assert all(m is not None and np.shape(m.body["coef"]) == coef.shape for m in source_models)
    model = client.get(f"/v1/models/{job['model_id']}", headers=site.headers).json()
    assert model["mechanism"] == "transfer"
    assert model["task"] == cal["task"]
    assert model["label"] == label
    record = model["privacy"]
    assert record["calibration"]["transfer_strength"] == TRANSFER_ETA
    assert record["calibration"]["task"] == cal["task"]
    assert record["calibration"]["calibration_strong_convexity"] == pytest.approx(ridge)
    assert "beta" not in record["calibration"]  # depends on the target's n: not shown
    what = "multinomial" if label is MULTICLASS else "Huber-residual"
    assert what in record["composition"]["within_job"]
    # the coordinator predicts with and exports it (every member reads it: test_aggregations)
    predictions = _predict(client, site, job["model_id"])
    if label is MULTICLASS:
        assert {p["predicted_class"] for p in predictions} <= set(CLASSES)
    else:
        assert all(LOWER <= p["value"] <= UPPER for p in predictions)
    exported = client.get(f"/v1/models/{job['model_id']}/export", headers=site.headers)
    assert exported.status_code == 200, exported.text
    assert exported.json()["task"] == cal["task"]


def test_a_strong_transfer_returns_the_average_of_the_multiclass_sources(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    uow_factory: UnitOfWorkFactory,
) -> None:
    study, sources, target = _transfer_study(client, site, make_site, MULTICLASS)
    body = {
        "method": "transfer",
        "target_dataset_id": target["id"],
        "epsilon": 1.0,
        "transfer_strength": 1e6,
        "regularization": TRANSFER_LAM,
    }
    response = client.post(
        f"/v1/studies/{study['id']}/aggregations",
        json=body,
        headers={**site.headers, "Prefer": "wait=30"},
    )
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["status"] == "succeeded", job["error"]
    with uow_factory() as uow:
        result = uow.models.get(job["model_id"])
        coefs = [np.asarray(m.body["coef"]) for m in map(uow.models.get, sources) if m]
    assert result is not None
    average = round_to_grid(0.5 * coefs[0] + 0.5 * coefs[1])
    # class k is row k of the sources and of the result: η = 10⁶ pins the fit to C₀
    np.testing.assert_allclose(np.asarray(result.body["coef"]), average, atol=1e-3)


@pytest.mark.parametrize(
    ("study_label", "body", "status", "slug", "text"),
    [
        # a target whose classes are in another order (class k would be another row)
        (MULTICLASS, {"classes": ["high", "mid", "low"]}, 422, "invalid-input", "label classes"),
        (NUMERIC, {"upper": 50.0}, 422, "invalid-input", "label bounds"),
        (MULTICLASS, {"label": NUMERIC}, 422, "invalid-input", "label task"),
        # the numeric label's losses are squared and huber; objective perturbation takes huber
        (NUMERIC, {"loss": "logistic"}, 422, "invalid-input", "huber"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_a_mismatched_target_or_loss_is_a_422_with_nothing_charged(
    client: TestClient,
    site: SiteHandle,
    make_site: MakeSite,
    engine: Engine,
    study_label: dict[str, Any],
    body: dict[str, Any],
    status: int,
    slug: str,
    text: str,
    dry_run: bool,
) -> None:
    study, _, target = _transfer_study(client, site, make_site, study_label)
    if "loss" in body:
        target_id, loss = target["id"], body["loss"]
    else:
        label = body.get("label", {**study_label, **body})
        other = dataset_of(client, site, label, seed=24)
        target_id, loss = other["id"], ("huber" if study_label is NUMERIC else "logistic")
    charges = ledger_rows(engine)
    response = client.post(
        f"/v1/studies/{study['id']}/aggregations",
        params={"dry_run": "true"} if dry_run else None,
        json={
            "method": "transfer",
            "target_dataset_id": target_id,
            "epsilon": 1.0,
            "transfer_strength": TRANSFER_ETA,
            "loss": loss,
        },
        headers=site.headers,
    )
    problem = assert_problem(response, status, slug)
    assert text in problem["detail"]
    assert epsilon_spent(client, site, target_id) == 0.0
    assert ledger_rows(engine) == charges
