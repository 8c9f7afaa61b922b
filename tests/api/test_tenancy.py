"""Tenancy: a site sees and touches only its own datasets, budgets, jobs, models, evaluations,
plans, studies and offers, and the admin key none of them (issue 4 item 5, issue 26 §1).

Walks the full matrix resources × verbs × callers. Each cell is one test case, and its
expected status is written out in :data:`EXPECTED` below. The callers:

``owner``      the site that uploaded the dataset (and owns its jobs, models and evaluations,
               and coordinates the study);
``other``      another site, which owns resources of its own and is in no study of the owner;
``admin``      the admin key: it runs the service (sites, keys, audit log) and reaches no site's
               data: every site resource answers it 404 exactly as an unknown id does, and the
               lists and uploads of site data are a 403 (it owns none);
``anonymous``  no key at all: 401 everywhere.

Another site's resource is a 404 for every verb, never a 403, and the 404 is the same as for an
id that does not exist (so it does not even reveal that the resource exists); the attempt changes
nothing (no deletion, no charge, no cancel, no contribution). Lists show the caller's own items
only.

The world (two sites, each with a dataset, a fitted model and a queued job; the owner also with
a private evaluation and a study with a third site, holding a model of each) is built through
the API once per backend and copied for each cell (``tests.support.snapshots``): every cell
starts from its own untouched database, without uploading and fitting again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from fastapi.testclient import TestClient
from httpx2 import Response

from service.db.migrate import upgrade
from service.main import create_app
from service.runtime.runner import JobRunner
from service.settings import Settings
from tests.conftest import SiteHandle, create_site, make_test_settings, postgres_base_url
from tests.support.snapshots import copy_sqlite, dump_postgres_schema, postgres_schema

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


Who = Literal["owner", "other", "admin", "anonymous"]
WHO: tuple[Who, ...] = ("owner", "other", "admin", "anonymous")

#: The expected status of every cell: verb -> (owner, other site, admin, no key).
#: "Other" acts on the owner's resource; for the collection verbs (lists, upload) it acts on
#: the collection, where it sees or creates only its own items.
EXPECTED: dict[str, tuple[int, int, int, int]] = {
    #                         owner other admin  none
    "datasets.upload": (201, 201, 403, 401),
    "datasets.list": (200, 200, 403, 401),
    "datasets.get": (200, 404, 404, 401),
    "datasets.delete": (204, 404, 404, 401),
    "datasets.budget": (200, 404, 404, 401),
    "datasets.fit": (202, 404, 404, 401),
    "datasets.fit_dry_run": (200, 404, 404, 401),
    "jobs.list": (200, 200, 403, 401),
    "jobs.get": (200, 404, 404, 401),
    "jobs.cancel": (200, 404, 404, 401),
    "models.list": (200, 200, 403, 401),
    "models.get": (200, 404, 404, 401),
    "models.predict": (200, 404, 404, 401),
    "models.export": (200, 404, 404, 401),
    "models.upload": (201, 201, 403, 401),
    "models.evaluate": (202, 404, 404, 401),
    "models.evaluate_dry_run": (200, 404, 404, 401),
    "models.evaluations": (200, 404, 404, 401),
    "evaluations.get": (200, 404, 404, 401),
    "datasets.plan": (200, 404, 404, 401),
    # Offers to a coordinator's study (site nodes): this PrivFit has no coordinator, so the
    # owner's offer is a 422 that says so; everyone else is refused as for any other verb.
    "datasets.offer": (422, 404, 404, 401),
    "datasets.offers": (200, 404, 404, 401),
    "datasets.withdraw_offer": (404, 404, 404, 401),
    "models.offer": (422, 404, 404, 401),
    # Studies: the owner coordinates one with a third site; "other" is not a member.
    "studies.create": (201, 201, 403, 401),
    "studies.list": (200, 200, 403, 401),
    "studies.get": (200, 404, 404, 401),
    "studies.contribute": (201, 404, 404, 401),
    "studies.withdraw": (204, 404, 404, 401),
    "studies.aggregate": (202, 404, 404, 401),
    "studies.aggregate_dry_run": (200, 404, 404, 401),
    # a federated fit needs two granted datasets: the owner's study has none (422)
    "studies.federated_fit": (422, 404, 404, 401),
    "studies.remote_contributions": (200, 404, 404, 401),
    # the owner registers a node dataset whose spec is not the study's (422)
    "studies.add_remote_contribution": (422, 404, 404, 401),
    "studies.withdraw_remote_contribution": (404, 404, 404, 401),
    # Node tasks: the owner has no node, so no task waits and the one answered is unknown.
    "nodes.next_task": (204, 204, 403, 401),
    "nodes.answer_task": (404, 404, 404, 401),
}

#: The 404 the owner itself gets where the matrix names something that does not exist.
OWNER_404 = {
    "datasets.withdraw_offer": "offer not found",
    "studies.withdraw_remote_contribution": "contribution not found",
    "nodes.answer_task": "task not found",
}

CSV = "age,color,outcome\n" + "".join(
    f"{18 + (7 * i) % 70},{('red', 'green', 'blue')[i % 3]},{'yes' if i % 4 else 'no'}\n"
    for i in range(60)
)
FEATURES: list[dict[str, Any]] = [
    {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
    {"column": "color", "type": "categorical", "categories": ["red", "green", "blue"]},
]
LABEL = {"column": "outcome", "positive": "yes"}
FIT = {"mechanism": "objective_perturbation", "epsilon": 0.5, "regularization": 0.01}
SPEC = json.dumps(
    {"name": "clinic", "label": LABEL, "features": FEATURES, "budget": {"epsilon": 5.0}}
)
ROW = {"age": 40, "color": "red"}
NO_STUDY = "0" * 32  # a coordinator's study id (there is no coordinator here)
UPLOAD = {"label": LABEL, "features": FEATURES, "weights": [0.5, 1.0, -1.0, 0.0, -0.25]}
STUDY_SPEC = {"label": LABEL, "features": FEATURES}
EVALUATION = {"epsilon": 0.1}


class _HoldingRunner:
    """A runner that keeps submitted jobs queued (so a queued job exists to cancel)."""

    def start(self) -> None:
        pass

    def submit(self, job_id: str) -> None:
        pass

    def recover(self) -> list[str]:
        return []

    def shutdown(self, *, wait: bool = True) -> None:
        pass


@dataclass
class Holdings:
    """One site's resources: a dataset, a finished job with its model, and a queued job; for
    the owner also a released evaluation, and the study it coordinates with ``member`` (a
    third site) with ``contribution``, its model contributed there."""

    dataset: str
    job: str
    model: str
    queued_job: str
    evaluation: str = ""
    study: str = ""
    contribution: str = ""
    member: str = ""


@dataclass
class World:
    client: TestClient
    owner: SiteHandle
    other: SiteHandle
    admin_headers: dict[str, str]
    mine: Holdings
    theirs: Holdings

    def headers(self, who: Who) -> dict[str, str]:
        if who == "owner":
            return self.owner.headers
        if who == "other":
            return self.other.headers
        if who == "admin":
            return dict(self.admin_headers)
        return {}


@contextmanager
def holding_jobs(client: TestClient) -> Iterator[None]:
    app: Any = client.app
    real: JobRunner = app.state.job_runner
    app.state.job_runner = _HoldingRunner()
    try:
        yield
    finally:
        app.state.job_runner = real


def _holdings(client: TestClient, site: SiteHandle) -> Holdings:
    response = client.post(
        "/v1/datasets",
        files={"file": ("d.csv", CSV.encode(), "text/csv"), "spec": (None, SPEC)},
        headers=site.headers,
    )
    assert response.status_code == 201, response.text
    dataset = response.json()["id"]
    response = client.post(f"/v1/datasets/{dataset}/fits", json=FIT, headers=site.headers)
    assert response.status_code == 202, response.text
    job = response.json()["id"]
    body = client.get(f"/v1/jobs/{job}", params={"wait": 30}, headers=site.headers).json()
    assert body["status"] == "succeeded", body
    with holding_jobs(client):
        response = client.post(f"/v1/datasets/{dataset}/fits", json=FIT, headers=site.headers)
    assert response.status_code == 202, response.text
    return Holdings(
        dataset=dataset, job=job, model=body["model_id"], queued_job=response.json()["id"]
    )


def _owner_extras(client: TestClient, site: SiteHandle, member: SiteHandle, h: Holdings) -> None:
    """The owner's evaluation of its model (ε 0.1 charged) and its study with ``member``."""
    response = client.post(
        f"/v1/models/{h.model}/evaluations",
        json={"dataset_id": h.dataset, **EVALUATION},
        headers={**site.headers, "Prefer": "wait=30"},
    )
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "succeeded", response.text
    h.evaluation = response.json()["id"]
    response = client.post(
        "/v1/studies",
        json={"name": "consortium", "members": [member.id], "spec": STUDY_SPEC},
        headers=site.headers,
    )
    assert response.status_code == 201, response.text
    h.study, h.member = response.json()["id"], member.id
    response = client.post(
        f"/v1/studies/{h.study}/contributions", json={"model_id": h.model}, headers=site.headers
    )
    assert response.status_code == 201, response.text
    h.contribution = response.json()["id"]
    response = client.post("/v1/models", json=UPLOAD, headers=member.headers)
    assert response.status_code == 201, response.text
    response = client.post(
        f"/v1/studies/{h.study}/contributions",
        json={"model_id": response.json()["id"]},
        headers=member.headers,
    )
    assert response.status_code == 201, response.text


@dataclass(frozen=True)
class Snapshot:
    """The two sites' world, built through the API once per module and backend: its
    database (a SQLite file, or a ``pg_dump`` script) and the ids and keys that name it."""

    database: Path | str
    owner: SiteHandle
    other: SiteHandle
    mine: Holdings
    theirs: Holdings


def _build(url: str) -> tuple[SiteHandle, SiteHandle, Holdings, Holdings]:
    with TestClient(create_app(make_test_settings(url))) as client:
        owner, other = create_site(client, "owner site"), create_site(client, "other site")
        member = create_site(client, "member site")
        mine, theirs = _holdings(client, owner), _holdings(client, other)
        _owner_extras(client, owner, member, mine)
        return owner, other, mine, theirs


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def snapshot(
    request: pytest.FixtureRequest,
    sqlite_template: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Snapshot:
    """Every cell runs on SQLite and on PostgreSQL, each on its own copy of this world."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("tenancy") / "world.db"
        copy_sqlite(sqlite_template, path)
        return Snapshot(path, *_build(f"sqlite:///{path}"))
    engine = request.getfixturevalue("postgres_admin_engine")
    migrated = request.getfixturevalue("postgres_migrated_dump")
    base = postgres_base_url()
    with postgres_schema(engine, base, script=migrated) as (schema, url):
        if migrated is None:
            upgrade(url)
        built = _build(url)
        script = dump_postgres_schema(base, schema)
    if script is None:
        pytest.skip("pg_dump is needed to copy the tenancy world")
    return Snapshot(script, *built)


@pytest.fixture
def db_url(snapshot: Snapshot, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh copy of the world's database for this cell."""
    if isinstance(snapshot.database, Path):
        path = tmp_path / "privfit.db"
        copy_sqlite(snapshot.database, path)
        yield f"sqlite:///{path}"
        return
    engine = request.getfixturevalue("postgres_admin_engine")
    with postgres_schema(engine, postgres_base_url(), script=snapshot.database) as (_, url):
        yield url


@pytest.fixture
def settings(db_url: str) -> Settings:
    """The world's queued job must stay queued: no recovery runs it when the app starts."""
    return make_test_settings(db_url, job_recovery=False)


@pytest.fixture
def world(client: TestClient, snapshot: Snapshot, admin_headers: dict[str, str]) -> World:
    return World(
        client=client,
        owner=snapshot.owner,
        other=snapshot.other,
        admin_headers=admin_headers,
        mine=snapshot.mine,
        theirs=snapshot.theirs,
    )


Call = tuple[str, str, dict[str, Any]]

#: verb -> the request it makes on the owner's resources (method, path, httpx keyword args).
REQUESTS: dict[str, Callable[[Holdings], Call]] = {
    "datasets.upload": lambda h: (
        "POST",
        "/v1/datasets",
        {"files": {"file": ("d.csv", CSV.encode(), "text/csv"), "spec": (None, SPEC)}},
    ),
    "datasets.list": lambda h: ("GET", "/v1/datasets", {}),
    "datasets.get": lambda h: ("GET", f"/v1/datasets/{h.dataset}", {}),
    "datasets.delete": lambda h: ("DELETE", f"/v1/datasets/{h.dataset}", {}),
    "datasets.budget": lambda h: ("GET", f"/v1/datasets/{h.dataset}/budget", {}),
    "datasets.fit": lambda h: ("POST", f"/v1/datasets/{h.dataset}/fits", {"json": FIT}),
    "datasets.fit_dry_run": lambda h: (
        "POST",
        f"/v1/datasets/{h.dataset}/fits",
        {"json": FIT, "params": {"dry_run": "true"}},
    ),
    "jobs.list": lambda h: ("GET", "/v1/jobs", {}),
    "jobs.get": lambda h: ("GET", f"/v1/jobs/{h.job}", {}),
    "jobs.cancel": lambda h: ("POST", f"/v1/jobs/{h.queued_job}/cancel", {}),
    "models.list": lambda h: ("GET", "/v1/models", {}),
    "models.get": lambda h: ("GET", f"/v1/models/{h.model}", {}),
    "models.predict": lambda h: (
        "POST",
        f"/v1/models/{h.model}/predict",
        {"json": {"rows": [ROW]}},
    ),
    "models.export": lambda h: ("GET", f"/v1/models/{h.model}/export", {}),
    "models.upload": lambda h: ("POST", "/v1/models", {"json": UPLOAD}),
    "models.evaluate": lambda h: (
        "POST",
        f"/v1/models/{h.model}/evaluations",
        {"json": {"dataset_id": h.dataset, "epsilon": 0.1}},
    ),
    "models.evaluate_dry_run": lambda h: (
        "POST",
        f"/v1/models/{h.model}/evaluations",
        {"json": {"dataset_id": h.dataset, "epsilon": 0.1}, "params": {"dry_run": "true"}},
    ),
    "models.evaluations": lambda h: ("GET", f"/v1/models/{h.model}/evaluations", {}),
    "evaluations.get": lambda h: ("GET", f"/v1/evaluations/{h.evaluation}", {}),
    "datasets.plan": lambda h: (
        "POST",
        f"/v1/datasets/{h.dataset}/plans",
        {"json": {"mechanism": "objective_perturbation", "epsilons": [0.5, 1.0]}},
    ),
    "datasets.offer": lambda h: (
        "POST",
        f"/v1/datasets/{h.dataset}/offers",
        {"json": {"study_id": NO_STUDY, "epsilon_cap": 1.0, "delta_cap": 0.0}},
    ),
    "datasets.offers": lambda h: ("GET", f"/v1/datasets/{h.dataset}/offers", {}),
    "datasets.withdraw_offer": lambda h: (
        "DELETE",
        f"/v1/datasets/{h.dataset}/offers/{h.job}",
        {},
    ),
    "models.offer": lambda h: (
        "POST",
        f"/v1/models/{h.model}/offers",
        {"json": {"study_id": NO_STUDY}},
    ),
    "studies.create": lambda h: (
        "POST",
        "/v1/studies",
        {"json": {"name": "another", "members": [h.member], "spec": STUDY_SPEC}},
    ),
    "studies.list": lambda h: ("GET", "/v1/studies", {}),
    "studies.get": lambda h: ("GET", f"/v1/studies/{h.study}", {}),
    "studies.contribute": lambda h: (
        "POST",
        f"/v1/studies/{h.study}/contributions",
        {"json": {"dataset_id": h.dataset, "epsilon_cap": 1.0, "delta_cap": 0.0}},
    ),
    "studies.withdraw": lambda h: (
        "DELETE",
        f"/v1/studies/{h.study}/contributions/{h.contribution}",
        {},
    ),
    "studies.aggregate": lambda h: (
        "POST",
        f"/v1/studies/{h.study}/aggregations",
        {"json": {"method": "average"}},
    ),
    "studies.aggregate_dry_run": lambda h: (
        "POST",
        f"/v1/studies/{h.study}/aggregations",
        {"json": {"method": "average"}, "params": {"dry_run": "true"}},
    ),
    "studies.federated_fit": lambda h: (
        "POST",
        f"/v1/studies/{h.study}/federated-fits",
        {
            "json": {"protocol": "noisy_average", "epsilon": 0.5, "regularization": 0.01},
            "params": {"dry_run": "true"},
        },
    ),
    "studies.remote_contributions": lambda h: (
        "GET",
        f"/v1/studies/{h.study}/remote-contributions",
        {},
    ),
    "studies.add_remote_contribution": lambda h: (
        "POST",
        f"/v1/studies/{h.study}/remote-contributions",
        {
            "json": {
                "node_dataset_id": NO_STUDY,
                "preprocessing": {"features": []},
                "label": LABEL,
                "n_features": 5,
                "epsilon_cap": 1.0,
                "delta_cap": 0.0,
            }
        },
    ),
    "studies.withdraw_remote_contribution": lambda h: (
        "DELETE",
        f"/v1/studies/{h.study}/remote-contributions/{h.contribution}",
        {},
    ),
    "nodes.next_task": lambda h: ("GET", "/v1/node/tasks/next", {"params": {"wait": 0}}),
    "nodes.answer_task": lambda h: (
        "POST",
        f"/v1/node/tasks/{h.job}/result",
        {"json": {"refused": "no such task"}},
    ),
}


def _call(world: World, verb: str, who: Who, holdings: Holdings | None = None) -> Response:
    method, path, kwargs = REQUESTS[verb](holdings or world.mine)
    with holding_jobs(world.client):  # a fit this test queues stays queued: nothing runs
        return world.client.request(method, path, headers=world.headers(who), **kwargs)


def _ids(response: Response) -> set[str]:
    return {item["id"] for item in response.json()["items"]}


def _ghost(real: Holdings) -> Holdings:
    """Ids of the right shape that name nothing (the study's member stays a real site)."""
    dataset, job, model, queued, evaluation, study, contribution = (
        uuid.uuid4().hex for _ in range(7)
    )
    return Holdings(dataset, job, model, queued, evaluation, study, contribution, real.member)


def _problem_core(response: Response) -> tuple[int, str, str, str]:
    body = response.json()
    return (response.status_code, body["type"], body["title"], body["detail"])


def _owner_view_unchanged(world: World) -> None:
    """The owner's resources after another site's or the admin's (failed) attempt: all still
    there, the queued job still queued, the budget charged only by the owner's two fits and
    its evaluation, the study with its two contributions and no result."""
    h, headers, client = world.mine, world.owner.headers, world.client
    assert client.get(f"/v1/datasets/{h.dataset}", headers=headers).json()["deleted_at"] is None
    assert client.get(f"/v1/jobs/{h.queued_job}", headers=headers).json()["status"] == "queued"
    budget = client.get(f"/v1/datasets/{h.dataset}/budget", headers=headers).json()
    assert budget["epsilon_spent"] == pytest.approx(1.1)
    assert len(budget["charges"]) == 3
    assert client.get(f"/v1/models/{h.model}", headers=headers).status_code == 200
    assert client.get(f"/v1/evaluations/{h.evaluation}", headers=headers).status_code == 200
    study = client.get(f"/v1/studies/{h.study}", headers=headers).json()
    assert len(study["contributions"]) == 2
    assert study["results"] == []


def _check_lists(world: World, verb: str, who: Who, response: Response) -> None:
    field = {
        "datasets.list": "dataset",
        "jobs.list": "job",
        "models.list": "model",
        "studies.list": "study",
    }[verb]
    mine, theirs = getattr(world.mine, field), getattr(world.theirs, field)
    ids = _ids(response)
    assert who in ("owner", "other")  # the admin's lists are a 403
    assert (mine in ids) == (who == "owner")
    if theirs:
        assert (theirs in ids) == (who == "other")
    assert response.json()["total"] == len(ids)


#: The default tier runs every operation once, as the other site (the cell tenancy is about);
#: the owner's, the admin's and the anonymous cells are the full matrix of `make test-heavy`
#: (issue 27 §5), and keys and roles have their own tests (test_auth.py, test_sites.py).
CELLS = [
    pytest.param(
        verb,
        who,
        EXPECTED[verb][i],
        id=f"{verb}-{who}",
        marks=() if who == "other" else pytest.mark.heavy,
    )
    for verb in EXPECTED
    for i, who in enumerate(WHO)
]


@pytest.mark.parametrize(("verb", "who", "expected"), CELLS)
def test_tenancy_matrix(world: World, verb: str, who: Who, expected: int) -> None:
    response = _call(world, verb, who)
    assert response.status_code == expected, response.text
    client = world.client

    if expected >= 400:
        assert response.headers["content-type"].startswith("application/problem+json")
    if expected == 401:
        assert response.headers["www-authenticate"] == "Bearer"
    if expected == 403:
        # the admin on a list or an upload of site data: it owns none
        assert who == "admin"
        assert response.json()["type"].endswith("/permission-denied")
        assert response.json()["detail"] == "this operation needs a site key, not the admin key"
    if expected == 404 and who == "owner":
        # the owner's own resource, with an id that names nothing (an offer, a task)
        assert response.json()["detail"] == OWNER_404[verb]
    elif expected == 404:
        # exactly what an id that names nothing gets: existence is not revealed
        ghost = _call(world, verb, who, _ghost(world.mine))
        assert _problem_core(response) == _problem_core(ghost)
    if who != "owner" and expected >= 400:
        _owner_view_unchanged(world)
    if expected >= 400:
        return

    h = world.mine
    if verb.endswith(".list"):
        _check_lists(world, verb, who, response)
    elif verb == "datasets.get":
        assert response.json()["id"] == h.dataset
        assert response.json()["owner"] == world.owner.id
    elif verb == "datasets.delete":
        shown = client.get(f"/v1/datasets/{h.dataset}", headers=world.owner.headers).json()
        assert shown["deleted_at"] is not None
    elif verb == "datasets.budget":
        assert response.json()["epsilon_spent"] == pytest.approx(1.1)
    elif verb == "datasets.fit":
        assert response.json()["dataset_id"] == h.dataset
        jobs = client.get("/v1/jobs", headers=world.owner.headers).json()
        assert response.json()["id"] in {j["id"] for j in jobs["items"]}
    elif verb == "datasets.fit_dry_run":
        assert response.json()["dry_run"] is True
        assert response.json()["budget"]["remaining_epsilon"] == pytest.approx(3.9)
    elif verb == "jobs.get":
        assert (response.json()["id"], response.json()["model_id"]) == (h.job, h.model)
    elif verb == "jobs.cancel":
        assert response.json()["status"] == "cancelled"
        assert response.json()["charges"][0]["state"] == "refunded"
    elif verb in ("models.get", "models.export"):
        key = "id" if verb == "models.get" else "model_id"
        assert response.json()[key] == h.model
    elif verb == "models.evaluate":
        assert response.json()["dataset_id"] == h.dataset
        assert response.json()["status"] == "queued"
    elif verb == "models.evaluate_dry_run":
        assert response.json()["dry_run"] is True
    elif verb == "models.evaluations":
        assert [e["id"] for e in response.json()["items"]] == [h.evaluation]
    elif verb == "evaluations.get":
        assert response.json()["id"] == h.evaluation
    elif verb == "datasets.plan":
        assert len(response.json()["points"]) == 2
    elif verb == "datasets.offers":
        assert response.json()["items"] == []
    elif verb == "models.predict":
        (prediction,) = response.json()["predictions"]
        assert isinstance(prediction["score"], float)
    elif verb == "studies.get":
        assert response.json()["id"] == h.study
    elif verb == "studies.contribute":
        assert response.json()["dataset_id"] == h.dataset
    elif verb == "studies.withdraw":
        study = client.get(f"/v1/studies/{h.study}", headers=world.owner.headers).json()
        assert h.contribution not in {c["id"] for c in study["contributions"]}
    elif verb == "studies.aggregate":
        assert response.json()["status"] == "succeeded"
    elif verb == "studies.aggregate_dry_run":
        assert response.json()["dry_run"] is True
    elif verb == "studies.remote_contributions":
        assert response.json()["items"] == []
    elif verb == "nodes.next_task":
        assert response.content == b""
    elif verb in ("models.upload", "datasets.upload", "studies.create"):
        # a site creates only its own items: the other site can neither read nor list them
        collection = {
            "models.upload": "/v1/models",
            "datasets.upload": "/v1/datasets",
            "studies.create": "/v1/studies",
        }[verb]
        created = response.json()["id"]
        uploader, outsider = (
            (world.owner, world.other) if who == "owner" else (world.other, world.owner)
        )
        if verb == "datasets.upload":
            assert response.json()["owner"] == uploader.id
        own = client.get(f"{collection}/{created}", headers=uploader.headers)
        assert own.status_code == 200
        assert client.get(f"{collection}/{created}", headers=outsider.headers).status_code == 404
        assert created in _ids(client.get(collection, headers=uploader.headers))
        assert created not in _ids(client.get(collection, headers=outsider.headers))
    else:  # pragma: no cover - every verb above has a check
        raise AssertionError(f"no check for {verb}")


#: Where the site data lives: every operation under these paths has rows in the matrix.
SITE_DATA = ("/v1/datasets", "/v1/jobs", "/v1/models", "/v1/evaluations", "/v1/studies", "/v1/node")


def test_the_matrix_covers_every_operation_on_site_data(world: World) -> None:
    """Every operation on a site's data in the OpenAPI document has a row above: the admin
    is a caller of each of them."""
    paths = world.client.get("/openapi.json").json()["paths"]
    operations = {
        (method.upper(), path)
        for path, item in paths.items()
        if path.startswith(SITE_DATA)
        for method in item
    }
    placeholders = Holdings(
        "{dataset_id}",
        "{job_id}",
        "{model_id}",
        "{job_id}",
        evaluation="{evaluation_id}",
        study="{study_id}",
        contribution="{contribution_id}",
    )
    covered = set()
    for verb in EXPECTED:
        method, path, _ = REQUESTS[verb](placeholders)
        # the offer's withdrawal and the task's answer send a job id, which names neither
        path = path.replace("/offers/{job_id}", "/offers/{offer_id}")
        covered.add((method, path.replace("/tasks/{job_id}/", "/tasks/{task_id}/")))
    assert operations == covered
    # and everything else is the admin's or public: sites, keys, the audit log, operations
    for path in paths:
        assert path.startswith((*SITE_DATA, "/v1/sites", "/v1/audit-events")) or (
            not path.startswith("/v1/")
        ), path
