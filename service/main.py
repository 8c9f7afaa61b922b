"""The application factory: the only place where routers, middleware and handlers are wired.

``uvicorn service.main:app`` serves the module-level :data:`app`, built from the environment;
tests call :func:`create_app` with their own :class:`~service.settings.Settings`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import cache, partial
from importlib.metadata import PackageNotFoundError, version
from typing import Final, TextIO

import anyio.to_thread
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.datastructures import State

from service.api.console import install_console
from service.api.docs import install_docs
from service.api.errors import install_error_handlers
from service.api.metrics import JOB_DURATION_BUCKETS, HttpMetrics, JobMetrics
from service.api.middleware import (
    AuthenticationMiddleware,
    BodySizeLimitMiddleware,
    ClientAddressMiddleware,
    RequestContextMiddleware,
    RouteTable,
)
from service.api.openapi_doc import DESCRIPTION, TAGS, build_openapi, operation_id
from service.api.rate_limits import RateLimits
from service.api.routes import (
    audit,
    datasets,
    evaluations,
    fits,
    jobs,
    models,
    nodes,
    ops,
    plans,
    sites,
    studies,
)
from service.db.migrate import DatabaseProbe, head_revisions
from service.db.session import make_engine, make_sessionmaker
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.auth import configured_key_hash, ensure_admin_key
from service.domain.jobs.lifecycle import read_job_statistics
from service.domain.nodes.exchange import EXCHANGE
from service.domain.nodes.remote_fit import task_deadline
from service.runtime.node_link import HttpCoordinatorLink
from service.runtime.runner import JobRunner
from service.runtime.worker import build_runner
from service.settings import Settings, get_settings

#: Every router of the API, in the order the app includes them.
ROUTERS: Final[tuple[APIRouter, ...]] = (
    ops.router,
    sites.router,
    datasets.router,
    fits.router,
    jobs.router,
    models.router,
    evaluations.router,
    plans.router,
    studies.router,
    nodes.router,
    audit.router,
)

__all__ = ["announce_admin_key", "app", "app_state", "create_app"]

logger = logging.getLogger("privfit")


@cache
def _version() -> str:
    """The installed package's version, read from its metadata once per process."""
    try:
        return version("privfit")
    except PackageNotFoundError:  # pragma: no cover - running from an uninstalled checkout
        return "0.0.0"


def announce_admin_key(token: str, stream: TextIO | None = None) -> None:
    """Print a generated admin key once, to stdout (never to the logs)."""
    out = stream if stream is not None else sys.stdout
    rule = "=" * 78
    out.write(
        f"\n{rule}\n"
        "PrivFit generated the admin API key. It is shown only now; only its hash is stored:\n\n"
        f"    {token}\n\n"
        "Send it as `Authorization: Bearer <key>` (Swagger UI: Authorize) to create sites.\n"
        "Lost it? Run `privfit reset-admin-key`, or set PRIVFIT_ADMIN_KEY.\n"
        f"{rule}\n\n"
    )
    out.flush()


def _bootstrap_admin_key(app: FastAPI) -> None:
    settings: Settings = app.state.settings
    if settings.admin_key is not None:
        return
    state = app.state.database_probe.check()
    if not state.ready:
        logger.warning(
            "database not ready (unreachable or not migrated): admin key generation skipped; "
            "run `privfit migrate` and restart"
        )
        return
    token = ensure_admin_key(app.state.uow_factory())
    if token is not None:
        announce_admin_key(token)
        logger.info("generated the admin API key (printed once to stdout)")


def _recover_jobs(app: FastAPI) -> None:
    settings: Settings = app.state.settings
    if not settings.job_recovery:
        return
    if not app.state.database_probe.check().ready:
        logger.warning("database not ready: job recovery skipped; run `privfit migrate`")
        return
    app.state.job_runner.recover()


#: Builds the app's job runner from the settings and the API process's unit-of-work factory.
RunnerFactory = Callable[[Settings, UnitOfWorkFactory], JobRunner]


def _runner_factory(app: FastAPI) -> RunnerFactory:
    """``app.state.job_runner_factory`` when set (e.g. a test's inline runner), else the
    distributed queue's client with ``PRIVFIT_JOB_RUNNER=queue``, else the in-process pool of
    :func:`build_runner`."""
    factory: RunnerFactory | None = getattr(app.state, "job_runner_factory", None)
    if factory is not None:
        return factory
    if app.state.settings.job_runner == "queue":
        # Imported here: the queue's engine (procrastinate, psycopg) costs a process that
        # runs jobs elsewhere a fifth of a second of start-up.
        from service.runtime.queue_runner import QueueJobRunner

        return QueueJobRunner
    return build_runner


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the database and start the job runner for the app's lifetime; generate the admin
    key on first start; settle the jobs a crash left behind."""
    settings: Settings = app.state.settings
    engine = make_engine(
        settings.database_url,
        busy_timeout_ms=settings.sqlite_busy_timeout_ms,
        pool_size=settings.db_pool_size,
    )
    app.state.engine = engine
    app.state.uow_factory = partial(UnitOfWork, make_sessionmaker(engine))
    app.state.database_probe = DatabaseProbe(engine, head_revisions())
    # The runner is the one seam between the API and where jobs execute: any JobRunner works
    # (a distributed task engine later) without touching the domain; see _runner_factory.
    runner = _runner_factory(app)(settings, app.state.uow_factory)
    app.state.job_runner = runner
    unwatch = app.state.metrics.watch_jobs(
        JobMetrics(partial(read_job_statistics, app.state.uow_factory, JOB_DURATION_BUCKETS))
    )
    # Site nodes: this process serves the node task endpoints, so jobs run in its threads
    # can reach the nodes (service.domain.nodes.exchange).
    EXCHANGE.attached = True
    task_deadline(settings.node_task_deadline)
    try:
        await anyio.to_thread.run_sync(_bootstrap_admin_key, app)
        runner.start()
        await anyio.to_thread.run_sync(_recover_jobs, app)
        yield
    finally:
        # Running jobs finish; jobs not started stay queued and are recovered next start.
        await anyio.to_thread.run_sync(partial(runner.shutdown, wait=True))
        unwatch()
        engine.dispose()


def app_state(settings: Settings, metrics: HttpMetrics) -> State:
    """What an app holds before its lifespan starts: ``settings``, its request ``metrics``, the
    configured admin key's hash, the coordinator link (when one is configured) and empty
    rate-limit counters. The lifespan adds the database and the job runner."""
    state = State()
    state.settings = settings
    state.metrics = metrics
    admin_key = settings.admin_key.get_secret_value() if settings.admin_key else None
    state.admin_key_hash = configured_key_hash(admin_key)
    state.coordinator_link = (
        HttpCoordinatorLink(settings.coordinator_url, settings.coordinator_key.get_secret_value())
        if settings.coordinator_url and settings.coordinator_key
        else None
    )
    state.rate_limits = RateLimits(
        failed_auth=settings.rate_limit_failed_auth,
        expensive=settings.rate_limit_expensive,
        storage_url=settings.rate_limit_storage,
    )
    return state


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the ASGI application. Cheap: the database is opened by the lifespan."""
    settings = settings if settings is not None else get_settings()
    app = FastAPI(
        title="PrivFit",
        version=_version(),
        description=DESCRIPTION,
        openapi_tags=TAGS,
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        docs_url=None,
        redoc_url=None,
    )
    metrics = HttpMetrics()
    app.state = app_state(settings, metrics)

    install_error_handlers(app)
    install_docs(app, persist_authorization=settings.docs_persist_authorization)
    install_console(app)
    # Routers carry their full prefix (see service.api.routes): include them without one.
    for router in ROUTERS:
        app.include_router(router)
    routes = RouteTable(
        route for router in ROUTERS for route in router.routes if isinstance(route, APIRoute)
    )

    # Added last = outermost. In order: the request id (every answer below carries it), the
    # client's address, the size check by Content-Length (nothing read), then authentication
    # (nothing read either): only an authenticated request's body is ever read.
    app.add_middleware(AuthenticationMiddleware, routes=routes)
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=settings.max_json_bytes,
        routes=routes,
        streamed=datasets.STREAMED_UPLOADS,
        streamed_max_bytes=settings.max_request_bytes,
    )
    app.add_middleware(ClientAddressMiddleware, trusted=settings.trusted_proxy_networks)
    app.add_middleware(RequestContextMiddleware, metrics=metrics)

    app.openapi = partial(build_openapi, app)  # type: ignore[method-assign]
    return app


app = create_app()
