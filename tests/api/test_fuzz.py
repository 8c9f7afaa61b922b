"""Property-based API fuzzing with schemathesis against the live app's OpenAPI document.

Every operation (new routes join automatically) gets generated requests, valid and invalid,
sent with the right key for the operation (its ``x-privfit-access``: admin, site, any or
public). The test fails on any 5xx, on a status code or content type the spec does not
document, on a body or header that violates the spec, and on invalid input that is not
rejected with a 4xx.

The default tier fuzzes every operation briefly: schemathesis' examples and fuzzing phases with
``SMOKE_EXAMPLES`` each. The heavy tier (test_fuzz_deep.py, and test_fuzz_postgres.py on
PostgreSQL) adds the coverage phase (every boundary and negative case the schema defines,
≈ 30 s of CPU at collection and run) and ``MAX_EXAMPLES`` per operation.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from pydantic import SecretStr
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.main import create_app
from service.settings import Settings
from tests.api.conftest import FuzzKeys, FuzzTarget, fuzz_target
from tests.support.snapshots import copy_sqlite

#: Examples per operation in the heavy tier. Keep CI fast and reproducible; fuzz deeper locally
#: with e.g. PRIVFIT_FUZZ_EXAMPLES=1000 PRIVFIT_FUZZ_RANDOM=1 make test-heavy
#: PYTEST_ARGS=tests/api/test_fuzz_deep.py
MAX_EXAMPLES = int(os.environ.get("PRIVFIT_FUZZ_EXAMPLES", "40"))
#: Examples per operation in the default tier (issue 27 §5).
SMOKE_EXAMPLES = min(5, MAX_EXAMPLES)
DERANDOMIZE = os.environ.get("PRIVFIT_FUZZ_RANDOM", "") != "1"

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


def _spec() -> dict[str, Any]:
    # The document only: no database is opened to build it.
    return create_app(
        Settings(database_url="sqlite://", admin_key=SecretStr("x" * 32), environment="test")
    ).openapi()


SPEC = _spec()
#: Every phase: the heavy tier's fuzzing (test_fuzz_deep.py, test_fuzz_postgres.py).
schema = schemathesis.openapi.from_dict(copy.deepcopy(SPEC))
# Credentials are ours (valid keys chosen per operation), not generated: missing and invalid
# keys are covered by tests/api/test_auth.py.
schema.config.generation.update(with_security_parameters=False)
#: The default tier's: no coverage phase (it builds its cases at collection, in every process).
smoke_schema = schemathesis.openapi.from_dict(copy.deepcopy(SPEC))
smoke_schema.config.generation.update(with_security_parameters=False)
smoke_schema.config.phases.coverage.enabled = False


fuzz_settings = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=DERANDOMIZE,
    suppress_health_check=list(HealthCheck),
    database=None,
)
smoke_settings = settings(fuzz_settings, max_examples=SMOKE_EXAMPLES)


def check_case(case: schemathesis.Case[Any], client: TestClient, keys: FuzzKeys) -> None:
    """Send one generated request with the operation's key and validate the response."""
    headers = keys.for_operation(case.operation.definition.raw)
    kwargs = case.as_transport_kwargs(base_url="http://testserver", headers=headers)
    response = client.request(kwargs.pop("method"), kwargs.pop("url"), **_httpx_kwargs(kwargs))
    # Multipart bodies (the dataset upload) are streams: load them so the checks can read them.
    response.request.read()
    case.validate_response(response, checks=CHECKS, headers=kwargs.get("headers"))
    if case.operation.path == "/v1/sites/me/keys/rotate" and response.status_code == 200:
        keys.site = {"Authorization": f"Bearer {response.json()['api_key']}"}


def _as_part(name: str, part: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """A multipart part whose content httpx can send: generated extra form fields may be
    numbers, sent as their JSON text."""
    filename, content, *rest = part
    if not isinstance(content, bytes | str) and not hasattr(content, "read"):
        content = json.dumps(content)
    return name, (filename, content, *rest)


def _httpx_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Translate schemathesis' requests-style keyword arguments for the httpx test client."""
    out = {
        key: kwargs[key]
        for key in ("headers", "params", "json", "files")  # no cookies in our API
        if kwargs.get(key) is not None
    }
    if "files" in out:
        out["files"] = [_as_part(name, part) for name, part in out["files"]]
    data = kwargs.get("data")
    if isinstance(data, bytes | str):
        out["content"] = data
    elif data is not None:
        out["data"] = data
    return out


@pytest.fixture(scope="module")
def sqlite_fuzz_target(
    sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FuzzTarget]:
    """One app on one copy of the migrated SQLite template for the whole module."""
    path = tmp_path_factory.mktemp("fuzz") / "privfit.db"
    copy_sqlite(sqlite_template, path)
    with fuzz_target(f"sqlite:///{path}") as target:
        yield target


@smoke_schema.parametrize()
@smoke_settings
def test_api_conforms_to_its_spec(
    case: schemathesis.Case[Any], sqlite_fuzz_target: FuzzTarget
) -> None:
    check_case(case, sqlite_fuzz_target.client, sqlite_fuzz_target.keys)
