"""Fixtures of the client and command-line tests: a real server, sites, and the Adult data.

Every test talks to a ``privfit serve`` process over a socket, as site software does.
``server`` is SQLite, one per test process shared by the tests (each makes its own sites);
``pg_server`` serves a fresh PostgreSQL schema.
"""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from privfit_client import Client, RetryPolicy

from benchmarks.adult import ADULT_DIR, csv_bytes
from tests.conftest import ADMIN_KEY
from tests.support.live_server import LiveServer, start_server

SPEC_PATH = ADULT_DIR / "spec.json"
#: Retries without waiting, so a test of a retry takes no backoff time.
NO_WAIT = RetryPolicy(attempts=3, backoff=0.0, max_backoff=0.0)


@dataclass
class SiteAccount:
    """A site created through the API: its id, name and key."""

    id: str
    name: str
    key: str


MakeSite = Callable[..., SiteAccount]


@pytest.fixture
def server(shared_live_server: LiveServer) -> LiveServer:
    """The test process's shared server over SQLite (tests/conftest.py): a test creates its
    own sites and reads what they own; one that needs a server to itself takes
    ``live_server``."""
    return shared_live_server


@pytest.fixture
def pg_server(postgres_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """A server over a fresh PostgreSQL schema (migrated to head by ``postgres_url``: no
    ``privfit migrate`` interpreter is started for it)."""
    with start_server(
        postgres_url, admin_key=ADMIN_KEY, workdir=tmp_path, migrate=False
    ) as running:
        yield running


@pytest.fixture
def admin(server: LiveServer) -> Iterator[Client]:
    """A client with the admin key."""
    with Client(server.base_url, ADMIN_KEY, retry=NO_WAIT) as client:
        yield client


def make_site_on(server: LiveServer, name: str | None = None) -> SiteAccount:
    """Create a site on ``server`` with the admin key."""
    with Client(server.base_url, ADMIN_KEY) as admin_client:
        created = admin_client.create_site(name or f"site-{uuid.uuid4().hex[:8]}")
    return SiteAccount(created.site.id, created.site.name, created.key.api_key)


@pytest.fixture
def make_site(server: LiveServer) -> MakeSite:
    """``make_site(name=None)`` creates a site on ``server``."""
    return lambda name=None: make_site_on(server, name)


@pytest.fixture
def site(make_site: MakeSite) -> SiteAccount:
    """One site."""
    return make_site()


@pytest.fixture
def site_client(server: LiveServer, site: SiteAccount) -> Iterator[Client]:
    """A client with ``site``'s key."""
    with Client(server.base_url, site.key, retry=NO_WAIT) as client:
        yield client


@pytest.fixture(scope="session")
def adult_train_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Adult's training split as a CSV file with a header row."""
    path = tmp_path_factory.mktemp("adult") / "adult.csv"
    path.write_bytes(csv_bytes("train"))
    return path


@pytest.fixture(scope="session")
def adult_test_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Adult's test split as a CSV file (more rows than one predict request takes)."""
    path = tmp_path_factory.mktemp("adult-test") / "adult-test.csv"
    path.write_bytes(csv_bytes("test"))
    return path


def small_csv(source: Path, rows: int, skip: int = 0) -> bytes:
    """The header and ``rows`` data rows of a CSV file (after skipping ``skip``)."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join([lines[0], *lines[1 + skip : 1 + skip + rows]]).encode()


def read_rows(source: Path, limit: int | None = None) -> list[dict[str, str]]:
    """A CSV file's rows as dicts (strings, as site software reads them)."""
    reader = csv.DictReader(io.StringIO(source.read_text(encoding="utf-8")))
    return [row for i, row in enumerate(reader) if limit is None or i < limit]
