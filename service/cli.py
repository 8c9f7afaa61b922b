"""The ``privfit`` command: serve, worker, migrate, create-site, reset-admin-key, openapi, agent."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial

from pydantic import ValidationError

from service.db.migrate import DatabaseProbe, head_revisions, upgrade
from service.db.session import make_engine, make_sessionmaker, safe_url
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.auth import reset_admin_key
from service.domain.access.principal import Principal
from service.domain.access.sites import create_site
from service.domain.audit import SYSTEM
from service.domain.errors import DomainError
from service.logs import configure_logging, logging_config
from service.settings import Settings, get_settings

__all__ = ["main"]


def _settings() -> Settings:
    try:
        return get_settings()
    except ValidationError as exc:
        problems = "; ".join(
            (f"PRIVFIT_{'_'.join(str(p) for p in err['loc']).upper()}: " if err["loc"] else "")
            + err["msg"]
            for err in exc.errors()
        )
        raise SystemExit(f"privfit: invalid configuration: {problems}") from None


@contextmanager
def _unit_of_work_factory(settings: Settings) -> Iterator[UnitOfWorkFactory]:
    engine = make_engine(settings.database_url, busy_timeout_ms=settings.sqlite_busy_timeout_ms)
    try:
        if not DatabaseProbe(engine, head_revisions()).check().ready:
            raise SystemExit(
                "privfit: the database is unreachable or not migrated; run `privfit migrate`"
            )
        yield partial(UnitOfWork, make_sessionmaker(engine))
    finally:
        engine.dispose()


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = _settings()
    workers = args.workers or settings.workers
    if workers > 1 and settings.rate_limit_storage.startswith("memory://"):
        print(
            f"privfit: warning: each of the {workers} processes counts its own rate limits "
            "(PRIVFIT_RATE_LIMIT_STORAGE=memory://), so a client gets up to "
            f"{workers} times the documented allowance; set PRIVFIT_RATE_LIMIT_STORAGE="
            "redis://HOST:6379 for one shared limit",
            file=sys.stderr,
        )
    uvicorn.run(
        "service.main:app",
        host=args.host or settings.host,
        port=args.port or settings.port,
        log_config=logging_config(settings.log_level),
        access_log=False,  # service.api.middleware writes the access log, with request ids
        # X-Forwarded-For is read by the app, from PRIVFIT_TRUSTED_PROXIES only
        # (service.api.middleware.ClientAddressMiddleware); uvicorn's own default would believe
        # it from any local process.
        proxy_headers=False,
        workers=workers,
    )
    return 0


def _worker(args: argparse.Namespace) -> int:
    from service.runtime.queue_runner import run_workers

    settings = _settings()
    configure_logging(settings.log_level)
    if settings.job_runner != "queue":
        raise SystemExit(
            "privfit: `privfit worker` runs the jobs of the distributed queue; set "
            "PRIVFIT_JOB_RUNNER=queue (and a PostgreSQL PRIVFIT_DATABASE_URL) for it and the API"
        )
    if args.concurrency is not None and args.concurrency < 1:
        raise SystemExit("privfit: --concurrency must be at least 1")
    with _unit_of_work_factory(settings):
        pass  # refuses an unreachable or unmigrated database with a clear message
    return run_workers(settings, concurrency=args.concurrency)


def _migrate(args: argparse.Namespace) -> int:
    settings = _settings()
    configure_logging(settings.log_level)
    upgrade(settings.database_url, args.revision)
    print(f"privfit: database {safe_url(settings.database_url)} migrated to {args.revision}")
    return 0


def _create_site(args: argparse.Namespace) -> int:
    settings = _settings()
    configure_logging(settings.log_level)
    with _unit_of_work_factory(settings) as factory:
        try:
            issued = create_site(
                factory(), name=args.name, actor=Principal(role="admin"), context=SYSTEM
            )
        except DomainError as exc:
            raise SystemExit(f"privfit: {exc.detail}") from None
    out = {
        "site": {"id": issued.site.id, "name": issued.site.name},
        "api_key": issued.token,
        "key_prefix": issued.key.prefix,
    }
    print(json.dumps(out, indent=2))
    return 0


def _reset_admin_key(_args: argparse.Namespace) -> int:
    settings = _settings()
    configure_logging(settings.log_level)
    with _unit_of_work_factory(settings) as factory:
        token = reset_admin_key(factory())
    print("New admin API key (shown once; only its hash is stored):\n")
    print(f"    {token}\n")
    if settings.admin_key is not None:
        print("Note: PRIVFIT_ADMIN_KEY is set, and while it is, only that key is the admin key.")
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from service import openapi

    argv = [*(["--check"] if args.check else []), *([str(args.path)] if args.path else [])]
    return openapi.main(argv)


def _agent(_args: argparse.Namespace) -> int:
    import threading

    from service.runtime.node_agent import install_signal_handlers, run_agent

    settings = _settings()
    configure_logging(settings.log_level)
    stop = threading.Event()
    install_signal_handlers(stop)
    with _unit_of_work_factory(settings) as factory:
        return run_agent(settings, factory, stop=stop)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="privfit",
        description="PrivFit: differentially private linear classifiers as a service. "
        "Configuration comes from PRIVFIT_* environment variables (see README).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve the HTTP API with uvicorn")
    serve.add_argument("--host", help="bind address (default: PRIVFIT_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: PRIVFIT_PORT or 8000)")
    serve.add_argument("--workers", type=int, help="processes (default: PRIVFIT_WORKERS or 1)")
    serve.set_defaults(handler=_serve)

    worker = commands.add_parser(
        "worker",
        help="run jobs of the distributed queue (PRIVFIT_JOB_RUNNER=queue)",
        description="Run queued jobs: one process per job at a time, each with one BLAS "
        "thread. Start as many as you like, on any machine that reaches the database. "
        "SIGTERM or Ctrl-C lets running jobs finish.",
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        help="worker processes, i.e. jobs at the same time (default: one per CPU core)",
    )
    worker.set_defaults(handler=_worker)

    migrate = commands.add_parser("migrate", help="apply database migrations")
    migrate.add_argument("--revision", default="head", help="target revision (default: head)")
    migrate.set_defaults(handler=_migrate)

    create = commands.add_parser("create-site", help="create a site and print its API key once")
    create.add_argument("name", help="the site's unique name")
    create.set_defaults(handler=_create_site)

    reset = commands.add_parser(
        "reset-admin-key", help="revoke the stored admin key and print a new one once"
    )
    reset.set_defaults(handler=_reset_admin_key)

    spec = commands.add_parser("openapi", help="write openapi/openapi.json from the app")
    spec.add_argument("path", nargs="?", help="output file (default: openapi/openapi.json)")
    spec.add_argument("--check", action="store_true", help="fail if the file is out of date")
    spec.set_defaults(handler=_openapi)
    agent = commands.add_parser(
        "agent",
        help="run this node's task loop: take federated-fit tasks from the coordinator "
        "(PRIVFIT_COORDINATOR_URL, outbound only) and run them on local datasets",
    )
    agent.set_defaults(handler=_agent)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``privfit`` console script."""
    args = _parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
