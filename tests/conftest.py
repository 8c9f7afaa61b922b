"""Shared fixtures: databases (SQLite always, PostgreSQL when reachable), the app and sites.

Databases
    ``sqlite_url``      a fresh, migrated SQLite file per test (a copy of a template migrated
                        once per session with ``alembic upgrade head``: migrations always run).
    ``postgres_url``    a fresh schema per test on ``PRIVFIT_TEST_POSTGRES_URL`` (default
                        ``postgresql+psycopg://postgres@127.0.0.1:5432/test``), migrated to head
                        and dropped afterwards. Skipped with a notice when PostgreSQL is not
                        reachable; ``PRIVFIT_REQUIRE_POSTGRES=1`` turns the skip into a failure.
    ``empty_postgres_url``  the same, not migrated (for migration tests).
    ``any_db_url``      parametrised over both backends.
    ``db_url``          what ``settings`` uses: SQLite. A module runs on both backends by
                        overriding it::

                            @pytest.fixture
                            def db_url(any_db_url: str) -> str:
                                return any_db_url

App
    ``settings``, ``app`` (``create_app(settings)``, one per test process and settings apart from
    the database, in a new app's state), ``client`` (``TestClient`` with the lifespan
    running), ``admin_headers``, ``make_site(name=None) -> SiteHandle`` and ``site``;
    ``uow_factory`` gives units of work on the same database as the app.

Tiers
    ``make test`` runs ``-m "not heavy"`` and ``make test-heavy`` runs ``-m heavy``; CI runs both.
    :func:`pytest_collection_modifyitems` marks every PostgreSQL twin of a SQLite test heavy
    (a test parametrised over a backend, run with ``"postgres"``), except the smoke set
    :data:`POSTGRES_SMOKE`: one PostgreSQL run per API area and the database layer's tests
    whose outcome depends on the backend (racing transactions, constraints, migrations).
    Tests that use ``postgres_url`` directly are PostgreSQL-specific and stay in the default.
    The default tier runs each behaviour once (issue 27 §5): one smoke of each real-process
    deployment (browser pages, site nodes, the queue), every operation fuzzed briefly, the
    tenancy matrix's other-site cells, every privacy audit the half-noise mutant must fail;
    the rest is marked ``heavy`` where it is, with the reason. A module marked heavy as a whole
    (its ``pytestmark``) is not even imported when ``-m`` deselects all of it
    (:func:`pytest_ignore_collect`). ``-p tests.support.cpu_times`` logs each test's CPU time.

Real processes
    ``live_server``     ``privfit serve`` on a free port over a fresh SQLite file (admin key
                        ``ADMIN_KEY``); ``tests.support.live_server.start_server`` for others.
    ``jobless_live_server``  the same on the thread runner, without the process pool's warm
                        worker, for tests that run no job.
    ``shared_live_server``  one such server per test process, for tests that only touch the
                        sites they create (the client tests).
    ``browser``         headless Debian Chromium under Playwright (skipped with a reason when
                        absent; ``PRIVFIT_REQUIRE_BROWSER=1`` makes that a failure).
"""

from __future__ import annotations

import ast
import itertools
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from service.db.migrate import upgrade
from service.db.session import make_engine, make_sessionmaker
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.main import app_state, create_app
from service.settings import Settings
from tests.support.live_server import LiveServer, start_server
from tests.support.snapshots import dump_postgres_schema, postgres_schema

ADMIN_KEY = "test-admin-key-0123456789abcdef"
DEFAULT_TEST_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
POSTGRES_SKIP_REASON = "PostgreSQL not reachable"


def _require_postgres() -> bool:
    return os.environ.get("PRIVFIT_REQUIRE_POSTGRES", "").strip().lower() in {"1", "true", "yes"}


def postgres_base_url() -> str:
    """The PostgreSQL database the tests create their schemas in."""
    return os.environ.get("PRIVFIT_TEST_POSTGRES_URL", DEFAULT_TEST_POSTGRES_URL)


# --- SQLite -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once per session; tests get copies."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A fresh migrated SQLite database for this test."""
    path = tmp_path / "privfit.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def empty_sqlite_url(tmp_path: Path) -> str:
    """An empty SQLite database (no tables) for this test."""
    return f"sqlite:///{tmp_path / 'empty.db'}"


# --- PostgreSQL ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_admin_engine() -> Iterator[Engine]:
    """An engine on the PostgreSQL test database; skips (or fails) when it is unreachable."""
    url = postgres_base_url()
    engine = create_engine(url, connect_args={"connect_timeout": 3}, pool_pre_ping=True)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError:
        engine.dispose()
        where = make_url(url).render_as_string(hide_password=True)
        message = f"{POSTGRES_SKIP_REASON} at {where}"
        if _require_postgres():
            pytest.fail(f"{message} and PRIVFIT_REQUIRE_POSTGRES=1", pytrace=False)
        pytest.skip(message)
    yield engine
    engine.dispose()


@pytest.fixture
def empty_postgres_url(postgres_admin_engine: Engine) -> Iterator[str]:
    """A URL whose connections live in a fresh, empty schema (dropped after the test)."""
    with postgres_schema(postgres_admin_engine, postgres_base_url()) as (_, url):
        yield url


@pytest.fixture(scope="session")
def postgres_migrated_dump(postgres_admin_engine: Engine) -> str | None:
    """SQL that recreates a schema migrated to head, with ``{schema}`` for its name.

    Migrations run once per test process into a template schema, which ``pg_dump`` writes out
    (structure and rows, so ``alembic_version`` comes along); each test then replays that text
    into its own schema, which costs a fraction of running every migration again. ``None``
    when ``pg_dump`` is not installed: each test then migrates its schema itself.
    """
    base = postgres_base_url()
    with postgres_schema(postgres_admin_engine, base, prefix="tmpl") as (schema, url):
        upgrade(url)
        return dump_postgres_schema(base, schema)


@pytest.fixture
def postgres_url(
    postgres_admin_engine: Engine, postgres_migrated_dump: str | None
) -> Iterator[str]:
    """A fresh schema migrated to head (replayed from the session's dump when there is one)."""
    base = postgres_base_url()
    with postgres_schema(postgres_admin_engine, base, script=postgres_migrated_dump) as (_, url):
        if postgres_migrated_dump is None:
            upgrade(url)
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db_url(request: pytest.FixtureRequest) -> str:
    """A migrated database on each backend in turn."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """The database the app under test uses (override to run on both backends)."""
    return sqlite_url


# --- Database access without the app ----------------------------------------------------


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on ``db_url``."""
    engine = make_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def uow_factory(engine: Engine) -> UnitOfWorkFactory:
    """Builds units of work on ``db_url``."""
    sessions = make_sessionmaker(engine)
    return lambda: UnitOfWork(sessions)


# --- The app ------------------------------------------------------------------------------


def make_test_settings(db_url: str, **overrides: object) -> Settings:
    """Test settings on ``db_url``: a fixed admin key, 1 MiB body limits (uploads and JSON),
    jobs on threads, no rate limits; ``overrides`` replace any of them."""
    values: dict[str, object] = {
        "database_url": db_url,
        "admin_key": SecretStr(ADMIN_KEY),
        "environment": "test",
        "max_request_bytes": 1024 * 1024,
        "max_json_bytes": 1024 * 1024,
        "job_runner": "thread",
        # Rate limits are off here (tests fire hundreds of requests a second); their own
        # tests turn them on (tests/api/test_hardening.py).
        "rate_limit_failed_auth": None,
        "rate_limit_expensive": None,
    }
    values.update(overrides)
    return Settings.model_validate(values)


@pytest.fixture
def settings(db_url: str) -> Settings:
    """:func:`make_test_settings` on ``db_url`` (tests of the process pool build their own)."""
    return make_test_settings(db_url)


#: The apps of this test process, by their settings apart from the database (see ``app``).
_APPS: dict[str, FastAPI] = {}


def _app_key(settings: Settings) -> str:
    """``settings`` apart from ``database_url``, secrets by their values, as one string."""
    values = settings.model_dump(exclude={"database_url"})
    return repr(
        sorted(
            (name, value.get_secret_value() if isinstance(value, SecretStr) else value)
            for name, value in values.items()
        )
    )


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    """An app for ``settings`` in the state of a new one.

    One app is built per test process and settings apart from the database, and reused: FastAPI
    resolves an app's routes and builds its middleware on its first requests (≈ 20 ms of CPU per
    test). A reused app gets the state :func:`~service.main.create_app` gives a new one
    (:func:`~service.main.app_state`: this test's settings, no request counted, empty rate-limit
    counters, no runner factory or lifespan state of another test) and no dependency overrides."""
    return reused_app(settings)


def reused_app(settings: Settings) -> FastAPI:
    """The ``app`` fixture's work: this process's app for ``settings`` (built on first use),
    given the state of a new app."""
    key = _app_key(settings)
    app = _APPS.get(key)
    if app is None:
        app = _APPS[key] = create_app(settings)
        return app
    metrics = app.state.metrics
    metrics.clear()
    app.state = app_state(settings, metrics)
    app.dependency_overrides.clear()
    return app


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    """A test client with the app's lifespan running."""
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture
def admin_headers() -> dict[str, str]:
    """Headers authenticating as the admin."""
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class SiteHandle:
    """A site created through the API, with its key."""

    id: str
    name: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        """Headers authenticating as this site."""
        return {"Authorization": f"Bearer {self.key}"}


MakeSite = Callable[..., SiteHandle]

#: Headers authenticating as the admin of every test app (``ADMIN_KEY``).
ADMIN_HEADERS: dict[str, str] = {"Authorization": f"Bearer {ADMIN_KEY}"}


def create_site(client: TestClient, name: str) -> SiteHandle:
    """Create the site ``name`` through ``POST /v1/sites`` as the admin; its id and key."""
    response = client.post("/v1/sites", json={"name": name}, headers=ADMIN_HEADERS)
    assert response.status_code == 201, response.text
    body = response.json()
    return SiteHandle(id=body["site"]["id"], name=name, key=body["key"]["api_key"])


@pytest.fixture
def make_site(client: TestClient, admin_headers: dict[str, str]) -> MakeSite:
    """Create sites through ``POST /v1/sites``: ``make_site()`` or ``make_site(name="x")``."""

    def _make(name: str | None = None) -> SiteHandle:
        return create_site(client, name or f"site-{uuid.uuid4().hex[:8]}")

    return _make


@pytest.fixture
def site(make_site: MakeSite) -> SiteHandle:
    """One site."""
    return make_site()


# --- Warnings -----------------------------------------------------------------------------

#: Pydantic's warning that FastAPI silences while it builds a route's parameters (a ``Query``
#: with an alias, such as ``GET /v1/models/{id}/export?format=``), on the app's first requests.
#: FastAPI silences it with ``warnings.catch_warnings()``, which saves and restores the
#: process's filter list and is not thread-safe: two threads building routes at once (the two
#: in-process node apps of tests/e2e/test_nodes.py coming up side by side, racing requests on
#: an app's first use) can restore each other's list mid-build, and the warning then meets the
#: suite's ``error`` filter and the request is a 500. Ignored for the whole run, as FastAPI
#: means it to be, so that the outcome no longer depends on thread timing.
SILENCED_BY_FASTAPI = "ignore::pydantic.warnings.UnsupportedFieldAttributeWarning"


def pytest_configure(config: pytest.Config) -> None:
    """Add :data:`SILENCED_BY_FASTAPI` after pyproject's filters (later entries win)."""
    config.addinivalue_line("filterwarnings", SILENCED_BY_FASTAPI)


# --- Tiers ------------------------------------------------------------------------------

#: The PostgreSQL twins that stay in the default tier, by module: a test's name (every
#: parametrisation of it) or an item's full name with its parameters (that one only).
POSTGRES_SMOKE: dict[str, tuple[str, ...]] = {
    # One per API area: the area's main flow, or what PostgreSQL does differently.
    "tests/api/test_admin_bootstrap.py": (
        "test_first_start_prints_a_key_once_and_stores_only_its_hash",
    ),
    "tests/api/test_aggregations.py": (
        "test_average_is_the_mean_and_every_member_reads_predicts_and_exports_it",
    ),
    "tests/api/test_auth.py": ("test_wrong_key_is_401_and_audited",),
    "tests/api/test_budget.py": (
        "test_ten_fits_of_a_tenth_spend_exactly_one_and_the_eleventh_is_refused",
    ),
    "tests/api/test_concurrent_fits.py": ("test_hundred_racing_fits_charge_exactly_ten",),
    "tests/api/test_datasets.py": ("test_upload_stores_the_hand_computed_encoding",),
    "tests/api/test_errors.py": ("test_huge_integers_are_422",),
    "tests/api/test_evaluations.py": ("test_an_evaluation_is_charged_and_released",),
    "tests/api/test_federated.py": (
        "test_noisy_average_charges_each_dataset_and_every_member_reads_the_model",
    ),
    "tests/api/test_fits.py": ("test_every_mechanism_fits_through_http[postgres-dp_sgd]",),
    "tests/api/test_hardening.py": (
        "test_site_names_are_unique_after_normalisation_and_case_folding",
    ),
    "tests/api/test_jobs.py": (
        "test_a_job_goes_queued_running_succeeded",
        "test_racing_retries_share_one_job_and_one_charge",
    ),
    "tests/api/test_label_tasks.py": (
        "test_a_numeric_label_is_clipped_to_its_bounds_counted_and_mapped_onto_the_unit_interval",
        "test_a_multiclass_fit_predicts_a_declared_class_with_its_scores_and_softmax",
    ),
    "tests/api/test_models.py": (
        "test_predict_scores_are_the_coefficients_dot_the_preprocessed_row",
    ),
    "tests/api/test_ops.py": ("test_readyz_when_migrated",),
    "tests/api/test_plans.py": ("test_simulation_on_a_public_reference_answers_the_target",),
    "tests/api/test_sites.py": ("test_admin_lists_sites_in_pages",),
    "tests/api/test_studies.py": (
        "test_member_contributes_an_owned_model_and_everyone_in_the_study_sees_it",
    ),
    "tests/api/test_tenancy.py": (
        "test_the_matrix_covers_every_operation_on_site_data",
        "test_tenancy_matrix[postgres-datasets.list-other]",
    ),
    "tests/api/test_tuned_fits.py": ("test_a_tuned_fit_charges_once_and_records_the_choice",),
    "tests/integration/test_charged_jobs.py": (
        "test_a_federated_fit_charges_every_dataset_or_none",
    ),
    "tests/integration/test_job_recovery.py": ("test_recovery_can_be_turned_off",),
    "tests/integration/test_node_tasks.py": (
        "test_a_fit_over_the_node_charges_each_dataset_once_and_finishes",
    ),
    "tests/integration/test_studies_domain.py": (
        "test_a_grant_fits_the_dataset_caps_and_is_contributed_once",
    ),
    # The database layer where the backend decides the outcome.
    "tests/integration/db/test_uow.py": (
        "test_check_constraints_hold",
        "test_foreign_keys_are_enforced",
        "test_naive_datetimes_are_refused",
        "test_racing_first_starts_generate_one_admin_key",
        "test_racing_rotations_with_one_key_issue_one_new_key",
        "test_unique_violation_becomes_integrity_conflict",
    ),
    "tests/integration/db/test_ledger.py": (
        "test_check_constraints_refuse_overspending_written_directly",
        "test_concurrent_charges_never_overspend",
        "test_racing_charges_with_one_key_are_charged_once",
        "test_charge_many_is_all_or_none",
    ),
    "tests/integration/db/test_grants.py": ("test_racing_charges_never_overspend_a_grant",),
    "tests/integration/db/test_migrations.py": (
        "test_chunk_payloads_are_not_compressed_again_by_postgresql",
        "test_models_match_migrations",
        "test_upgrade_from_empty_then_downgrade_and_upgrade_again",
    ),
}

#: Modules that repeat a SQLite module's tests on PostgreSQL as a whole: heavy.
POSTGRES_TWIN_MODULES = frozenset({"tests/api/test_fuzz_postgres.py"})
#: Single tests that repeat a SQLite test on PostgreSQL without a backend parameter: heavy.
#: The client's walkthrough on a server over PostgreSQL (its own server start and schema) is
#: the SQLite walkthrough again; every API area keeps its PostgreSQL smoke above.
POSTGRES_TWIN_TESTS = frozenset({"tests/client/test_flow.py::test_walkthrough_on_postgres"})


#: The marks every item of a POSTGRES_TWIN_MODULES module carries (pytest_ignore_collect).
_TWIN_MODULE_MARKS = frozenset({"heavy", "postgres"})


def module_marks(path: Path) -> frozenset[str]:
    """The marks a test module's ``pytestmark`` gives every item in it, read from its source
    without importing it (names of ``pytest.mark.NAME`` and ``pytest.mark.NAME(...)``; empty
    for a module whose ``pytestmark`` is not a literal mark or list of marks, and for a module
    that never writes ``mark.heavy``, which the tiers leave out of nothing)."""
    source = path.read_text(encoding="utf-8")
    if "mark.heavy" not in source:  # every use below needs it: skip parsing the others
        return frozenset()
    marks: set[str] = set()
    for node in ast.parse(source).body:
        if not (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
        ):
            continue
        values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
        for value in values:
            mark = value.func if isinstance(value, ast.Call) else value
            if (
                isinstance(mark, ast.Attribute)
                and isinstance(mark.value, ast.Attribute)
                and mark.value.attr == "mark"
                and isinstance(mark.value.value, ast.Name)
                and mark.value.value.id == "pytest"
            ):
                marks.add(mark.attr)
    return frozenset(marks)


def deselects_every_item(markexpr: str, marks: frozenset[str]) -> bool:
    """Whether ``-m markexpr`` deselects every item carrying ``marks``, whatever other marks
    an item adds (every truth value of the expression's other names is tried)."""
    from _pytest.mark.expression import Expression

    if "(" in markexpr:  # marks with arguments: not worth deciding here
        return False
    names = sorted(set(re.findall(r"[^\s()]+", markexpr)) - {"and", "or", "not"} - marks)
    expression = Expression.compile(markexpr)
    for values in itertools.product((False, True), repeat=len(names)):
        carried = marks | {name for name, value in zip(names, values, strict=True) if value}
        if expression.evaluate(partial(_carries, carried)):
            return False
    return True


def _carries(marks: frozenset[str], name: str, /, **kwargs: str | int | bool | None) -> bool:
    return name in marks


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A module whose every item ``-m`` deselects is not even imported: ``make test``'s ``not
    heavy`` skips the modules marked heavy as a whole (their ``pytestmark``) and the
    whole-module PostgreSQL twins. Importing them costs CPU in every test process for items the
    run then drops: schemathesis builds the fuzz modules' cases at collection (≈ 5 s each), the
    benchmark modules import diffprivlib and scikit-learn."""
    markexpr = config.getoption("markexpr", "")
    root = Path(__file__).parent.parent
    if (
        not markexpr
        or collection_path.suffix != ".py"
        or not collection_path.name.startswith("test_")
        or not collection_path.is_file()
        or not collection_path.is_relative_to(root)
    ):
        return None
    marks = module_marks(collection_path)
    if collection_path.relative_to(root).as_posix() in POSTGRES_TWIN_MODULES:
        marks |= _TWIN_MODULE_MARKS
    if marks and deselects_every_item(markexpr, marks):
        return True
    return None


def _module(item: pytest.Item) -> str:
    return item.path.relative_to(Path(__file__).parent.parent).as_posix()


def is_postgres_twin(item: pytest.Item) -> bool:
    """Whether ``item`` is a SQLite test repeated on PostgreSQL."""
    if _module(item) in POSTGRES_TWIN_MODULES:
        return True
    if f"{_module(item)}::{getattr(item, 'originalname', item.name)}" in POSTGRES_TWIN_TESTS:
        return True
    callspec = getattr(item, "callspec", None)
    values = callspec.params.values() if callspec is not None else ()
    return any(isinstance(value, str) and value == "postgres" for value in values)


def in_postgres_smoke(item: pytest.Item) -> bool:
    """Whether ``item`` is in :data:`POSTGRES_SMOKE`."""
    names = POSTGRES_SMOKE.get(_module(item), ())
    return item.name in names or getattr(item, "originalname", item.name) in names


def _defines(module: object, name: str) -> bool:
    """Whether ``module`` defines the test function ``name``, or one of its classes does."""
    scopes = [module, *(value for value in vars(module).values() if isinstance(value, type))]
    return any(hasattr(scope, name) for scope in scopes)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the PostgreSQL twins outside the smoke set ``heavy`` (before ``-m`` selects).

    A smoke entry naming a function its module does not define is an error: a renamed test
    would otherwise leave its area without a PostgreSQL run in the default tier, silently."""
    modules: dict[str, object] = {}
    for item in items:
        if isinstance(item, pytest.Function):
            modules.setdefault(_module(item), item.module)
        if is_postgres_twin(item) and not in_postgres_smoke(item):
            item.add_marker(pytest.mark.heavy)
    stale = [
        f"{module}::{name}"
        for module, names in POSTGRES_SMOKE.items()
        if module in modules
        for name in names
        if not _defines(modules[module], name.split("[", 1)[0])
    ]
    stale += [
        twin
        for twin in sorted(POSTGRES_TWIN_TESTS)
        if twin.split("::")[0] in modules
        and not _defines(modules[twin.split("::")[0]], twin.split("::")[1])
    ]
    if stale:
        raise pytest.UsageError(
            f"POSTGRES_SMOKE or POSTGRES_TWIN_TESTS names tests that do not exist: {stale}"
        )


# --- Reporting ----------------------------------------------------------------------------


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say loudly how many tests were skipped because PostgreSQL was not reachable."""
    skipped = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if POSTGRES_SKIP_REASON in str(getattr(report, "longrepr", ""))
    ]
    if skipped:
        terminalreporter.write_sep(
            "!",
            f"{POSTGRES_SKIP_REASON}: {len(skipped)} tests skipped "
            f"(set PRIVFIT_TEST_POSTGRES_URL, or PRIVFIT_REQUIRE_POSTGRES=1 to fail instead)",
            yellow=True,
            bold=True,
        )


# --- Real processes: a live server and a headless browser ---------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A browser test without a browser is skipped before its fixtures start anything (a
    live server would otherwise be started, and stopped, for nothing)."""
    if "browser" in getattr(item, "fixturenames", ()):
        from tests.support.browser import skip_unless_browser

        skip_unless_browser()


@pytest.fixture
def browser() -> Iterator[object]:
    """Debian's Chromium under Playwright, one per test; see tests/support/browser.py.

    Not shared across tests: Playwright's sync API keeps an event loop running in the main
    thread while it is started, and any later test in the same process that calls
    ``asyncio.run`` would then fail with "cannot be called from a running event loop"."""
    from tests.support.browser import chromium_browser

    yield from chromium_browser()


#: The environment of a live server whose tests run no job: the thread runner, so that the
#: server starts no process pool and no warm pool worker (a second interpreter importing the
#: service, seconds of CPU) that the test would never use.
NO_JOB_PROCESSES: dict[str, str] = {"PRIVFIT_JOB_RUNNER": "thread"}


@pytest.fixture
def jobless_live_server(tmp_path: Path, sqlite_template: Path) -> Iterator[LiveServer]:
    """:func:`live_server` on the thread runner (:data:`NO_JOB_PROCESSES`), for tests that run
    no job (refused requests, rate limits)."""
    yield from _own_live_server(tmp_path, sqlite_template, NO_JOB_PROCESSES)


@pytest.fixture
def live_server(tmp_path: Path, sqlite_template: Path) -> Iterator[LiveServer]:
    """``privfit serve`` on a free port over a fresh SQLite file, admin key ``ADMIN_KEY``.

    For tests that need the server to themselves (an admin listing every site, names that
    must be free, the server's own log lines); the others use :func:`shared_live_server`."""
    yield from _own_live_server(tmp_path, sqlite_template)


def _own_live_server(
    tmp_path: Path, sqlite_template: Path, extra_env: dict[str, str] | None = None
) -> Iterator[LiveServer]:
    database = tmp_path / "live" / "privfit.db"
    with start_server(
        f"sqlite:///{database}",
        admin_key=ADMIN_KEY,
        workdir=tmp_path,
        extra_env=extra_env,
        migrated=sqlite_template,
    ) as server:
        yield server


@pytest.fixture(scope="session")
def shared_live_server(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[LiveServer]:
    """One ``privfit serve`` over a SQLite file for the whole test process (each xdist worker
    starts its own), admin key ``ADMIN_KEY``.

    Starting a server (the app's imports and start-up in a fresh interpreter, its process
    pool's warm worker) costs seconds of CPU; the client tests would otherwise pay it once each. A
    test on it creates its own sites (``tests/client/conftest.py``'s ``make_site``) and sees
    only what they own; what a test reads across sites (the admin's site list) or that must be
    unique server-wide needs ``live_server``. Its rate limits are off: they count per client
    address, and every test here calls from 127.0.0.1 (their own tests start their own)."""
    workdir = tmp_path_factory.mktemp("shared-live")
    database = workdir / "live" / "privfit.db"
    no_limits = {"PRIVFIT_RATE_LIMIT_FAILED_AUTH": "", "PRIVFIT_RATE_LIMIT_EXPENSIVE": ""}
    with start_server(
        f"sqlite:///{database}",
        admin_key=ADMIN_KEY,
        workdir=workdir,
        extra_env=no_limits,
        migrated=sqlite_template,
    ) as server:
        yield server
