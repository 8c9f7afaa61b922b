"""The same fuzzing as test_fuzz.py, against PostgreSQL (stricter about text than SQLite)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from sqlalchemy import Engine

from service.db.migrate import upgrade
from tests.api.conftest import FuzzTarget, fuzz_target
from tests.api.test_fuzz import check_case, fuzz_settings, schema
from tests.conftest import postgres_base_url
from tests.support.snapshots import postgres_schema

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def postgres_fuzz_target(
    postgres_admin_engine: Engine, postgres_migrated_dump: str | None
) -> Iterator[FuzzTarget]:
    """One app on one migrated schema for the whole module."""
    base = postgres_base_url()
    with postgres_schema(postgres_admin_engine, base, script=postgres_migrated_dump) as (_, url):
        if postgres_migrated_dump is None:
            upgrade(url)
        with fuzz_target(url) as target:
            yield target


@schema.parametrize()
@fuzz_settings
def test_api_conforms_to_its_spec_on_postgres(
    case: schemathesis.Case[Any], postgres_fuzz_target: FuzzTarget
) -> None:
    check_case(case, postgres_fuzz_target.client, postgres_fuzz_target.keys)
