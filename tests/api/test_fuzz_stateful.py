"""schemathesis' stateful phase: chains of operations linked by the OpenAPI document's `links`.

A site with a real dataset, a fitted model and a study exists before the run, so the list
operations hand real ids to the linked ones: fits (with generated, often extreme parameters)
run on a real dataset, jobs are followed, models predict and export, studies take
contributions and aggregations. Every response must conform to the document and nothing may
be a 5xx; a refused request must leave the ledger as it was (checked at the end).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.core.transport import Response

from service.main import create_app
from service.settings import Settings
from tests.api.conftest import FuzzKeys
from tests.api.test_fuzz import CHECKS, _httpx_kwargs, schema
from tests.conftest import ADMIN_HEADERS, create_site
from tests.support.snapshots import copy_sqlite

# Heavy tier (issue 27 §5): the chains explore sequences of operations (≈ 50 s of CPU on this
# machine); every operation's requests and responses are fuzzed on their own in the default tier
# (tests/api/test_fuzz.py), and the flows these chains walk have their own API tests. CI runs
# them in `make test-heavy`.
pytestmark = [pytest.mark.slow, pytest.mark.heavy]

STEPS = int(os.environ.get("PRIVFIT_FUZZ_STATEFUL_EXAMPLES", "40"))

HEADER = "age,colour,income,outcome"
ROWS = [
    f"{20 + i % 60},{['red', 'green'][i % 2]},{(i * 37) % 1000},{['yes', 'no'][i % 3 == 0]}"
    for i in range(80)
]
SPEC = {
    "name": "stateful",
    "label": {"column": "outcome", "positive": "yes", "negative": "no"},
    "features": [
        {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
        {"column": "colour", "type": "categorical", "categories": ["red", "green"]},
        {"column": "income", "type": "numeric", "lower": 0, "upper": 1000},
    ],
    "budget": {"epsilon": 10.0, "delta": 1e-5},
}


class _World:
    """Mixed into a schemathesis state machine: each scenario starts from the same fresh
    world (so Hypothesis can replay it): a site with a dataset and a fitted model, a study
    with a second member. The first scenario builds it through the API on a copy of the
    migrated template; every scenario then gets its own copy of that database."""

    template: Path
    folder: Path
    settings: Settings
    calls: list[tuple[str, int]]

    #: The world's database after it was first built, and its keys (set by :func:`_run`'s
    #: first scenario; later scenarios start from a copy, which is the same world).
    world: tuple[Path, FuzzKeys] | None = None

    def setup(self) -> None:
        database = self.folder / f"scenario-{uuid.uuid4().hex}.db"
        built = type(self).world
        copy_sqlite(built[0] if built else self.template, database)
        settings = self.settings.model_copy(update={"database_url": f"sqlite:///{database}"})
        self._client_context = TestClient(create_app(settings))
        self.client = self._client_context.__enter__()
        if built is None:
            keys = _world(self.client)
            snapshot = self.folder / "world.db"
            copy_sqlite(database, snapshot)
            type(self).world = (snapshot, keys)
        else:
            keys = built[1]
        # a scenario's key rotation must not leak into the next scenario's keys
        self.keys = FuzzKeys(dict(keys.admin), dict(keys.site))

    def teardown(self) -> None:
        self._client_context.__exit__(None, None, None)

    def call(self, case: schemathesis.Case[Any], **kwargs: Any) -> Any:
        headers = self.keys.for_operation(case.operation.definition.raw)
        transport = case.as_transport_kwargs(base_url="http://testserver", headers=headers)
        response = self.client.request(
            transport.pop("method"), transport.pop("url"), **_httpx_kwargs(transport)
        )
        response.request.read()
        self.calls.append((case.operation.definition.raw["operationId"], response.status_code))
        return Response.from_any(response)

    def validate_response(self, response: Any, case: schemathesis.Case[Any], **kwargs: Any) -> None:
        case.validate_response(response, checks=CHECKS)


def _world(client: TestClient) -> FuzzKeys:
    owner, member = create_site(client, "fuzz site"), create_site(client, "fuzz member")
    keys = FuzzKeys(dict(ADMIN_HEADERS), owner.headers)
    upload = client.post(
        "/v1/datasets",
        files={
            "file": ("s.csv", ("\n".join([HEADER, *ROWS]) + "\n").encode(), "text/csv"),
            "spec": (None, json.dumps(SPEC)),
        },
        headers=keys.site,
    )
    assert upload.status_code == 201, upload.text
    fit = client.post(
        f"/v1/datasets/{upload.json()['id']}/fits",
        json={"mechanism": "objective_perturbation", "epsilon": 1.0, "regularization": 0.01},
        headers={**keys.site, "Prefer": "wait=60"},
    )
    assert fit.status_code == 201, fit.text
    study = client.post(
        "/v1/studies",
        json={
            "name": "stateful study",
            "members": [member.id],
            "spec": {"label": SPEC["label"], "features": SPEC["features"]},
        },
        headers=keys.site,
    )
    assert study.status_code == 201, study.text
    return keys


def _run(machine: Any, settings: Settings, template: Path, folder: Path) -> set[str]:
    """Run a state machine class built like :class:`_Machine`; the operations it reached with
    a real id (answered with anything but 404, or a 5xx)."""
    machine.template, machine.folder, machine.settings = template, folder, settings
    machine.calls, machine.world = [], None
    machine.run(
        settings=hypothesis_settings(
            max_examples=STEPS,
            stateful_step_count=6,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
    )
    return {operation for operation, status in machine.calls if status not in (404, 500)}


_CORE = schema.exclude(path_regex="^/v1/(studies|node)|/offers")


class _Machine(_World, _CORE.as_state_machine()):  # type: ignore[misc]
    """The single-site core: datasets, fits, jobs, models, evaluations, sites. Studies have
    their own machine below; the site-node operations (offers, node tasks) need a coordinator
    this world does not have, and with them in the draw the derandomized chains spent their
    steps on refusals and no longer reached the models."""


_STUDIES = schema.include(path_regex="^/v1/studies")


class _StudiesMachine(_World, _STUDIES.as_state_machine()):  # type: ignore[misc]
    """The study operations alone: their chains are long enough that in the whole API's
    machine a scenario rarely reaches them."""


def test_linked_operations_conform_and_reach_the_core(
    settings: Settings, sqlite_template: Path, tmp_path: Path
) -> None:
    reached = _run(_Machine, settings, sqlite_template, tmp_path)
    # The chains got past the first hop into the core of the API.
    assert "fits-create_fit" in reached, sorted(reached)
    assert {"models-predict", "models-export_model", "models-get_model"} & reached


def test_linked_study_operations_conform_and_reach_contributions_and_aggregations(
    settings: Settings, sqlite_template: Path, tmp_path: Path
) -> None:
    reached = _run(_StudiesMachine, settings, sqlite_template, tmp_path)
    assert {
        "studies-add_contribution",
        "studies-create_aggregation",
        "studies-create_federated_fit",
    } & reached, sorted(reached)
