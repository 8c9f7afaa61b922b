"""Fixtures for the HTTP tests (the app, client and site fixtures are in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests.conftest import MakeSite


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


@pytest.fixture
def fuzz_keys(admin_headers: dict[str, str], make_site: MakeSite) -> FuzzKeys:
    """A valid admin key and a valid site key."""
    return FuzzKeys(admin_headers, make_site(name="fuzz site").headers)


class HeldRunner:
    """A job runner that only records what it was given: jobs stay queued until the test
    runs them by hand (``service.jobs.worker.run_job``) or cancels them."""

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
