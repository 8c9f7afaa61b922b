"""Fixtures for the HTTP tests (the app, client and site fixtures are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.main import create_app
from tests.conftest import ADMIN_HEADERS, create_site, make_test_settings


class FuzzKeys:
    """The keys the fuzzer authenticates with; a key rotation replaces the site key."""

    def __init__(self, admin: dict[str, str], site: dict[str, str]) -> None:
        self.admin = admin
        self.site = site

    def for_operation(self, definition: dict[str, Any]) -> dict[str, str]:
        """Headers for an operation, by its ``x-privfit-access`` (admin, site, any, public)."""
        access = definition.get("x-privfit-access", "any")
        if access == "admin":
            return dict(self.admin)
        if access == "public":
            return {}
        return dict(self.site)


@dataclass
class FuzzTarget:
    """The app a fuzzing module sends its generated requests to, and the keys it sends."""

    client: TestClient
    keys: FuzzKeys


@contextmanager
def fuzz_target(db_url: str) -> Iterator[FuzzTarget]:
    """An app on ``db_url`` (migrated) with a valid admin key and one site's key.

    One per fuzzing module and backend: the operations are fuzzed one after another against
    the state the earlier ones left, as a long-running service meets them, and the database
    and app are set up once rather than once per operation."""
    with TestClient(create_app(make_test_settings(db_url))) as client:
        site = create_site(client, "fuzz site")
        yield FuzzTarget(client, FuzzKeys(dict(ADMIN_HEADERS), site.headers))


class HeldRunner:
    """A job runner that only records what it was given: jobs stay queued until the test
    runs them by hand (``service.runtime.worker.run_job``) or cancels them."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def submit(self, job_id: str) -> None:
        self.submitted.append(job_id)


@pytest.fixture
def held(app: FastAPI, client: TestClient) -> Iterator[HeldRunner]:
    """The app's runner replaced by a :class:`HeldRunner` for the test."""
    original = app.state.job_runner
    runner = HeldRunner()
    app.state.job_runner = runner
    yield runner
    app.state.job_runner = original
