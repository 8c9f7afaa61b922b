"""The same fuzzing as test_fuzz.py, against PostgreSQL (stricter about text than SQLite)."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient

from tests.api.conftest import FuzzKeys
from tests.api.test_fuzz import check_case, fuzz_settings, schema

pytestmark = pytest.mark.postgres


@pytest.fixture
def db_url(postgres_url: str) -> str:
    return postgres_url


@schema.parametrize()
@fuzz_settings
def test_api_conforms_to_its_spec_on_postgres(
    case: schemathesis.Case[Any], client: TestClient, fuzz_keys: FuzzKeys
) -> None:
    check_case(case, client, fuzz_keys)
