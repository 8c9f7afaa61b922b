"""Operations: liveness, readiness, metrics. No API key needed (probes and scrapers)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.api.deps import (
    DatabaseProbeDep,
    HttpMetricsDep,
    SettingsDep,
    access,
    authenticate_request,
    bearer_token,
)
from service.api.errors import ProblemResponse, problem_response, problem_responses
from service.api.json_body import JsonRoute
from service.api.schemas.ops import Health, Readiness
from service.domain.errors import AuthenticationError

router = APIRouter(tags=["ops"], route_class=JsonRoute)


@router.get(
    "/healthz",
    summary="Liveness",
    description="200 while the process can answer HTTP. Does not touch the database.",
    response_model=Health,
    response_description="The process is alive.",
    responses=problem_responses(),
    openapi_extra=access("public"),
)
def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    summary="Readiness",
    description=(
        "200 when the database is reachable and migrated to the latest revision; otherwise 503 "
        "(for example before `privfit migrate` has run). With the distributed job queue "
        "(`PRIVFIT_JOB_RUNNER=queue`) also 503 while no `privfit worker` has sent a heartbeat "
        "recently: jobs would be accepted but none would run."
    ),
    response_model=Readiness,
    response_description="Ready to serve requests.",
    responses=problem_responses(503),
    openapi_extra=access("public"),
)
def readyz(request: Request, probe: DatabaseProbeDep) -> Readiness | ProblemResponse:
    state = probe.check()
    if state.ready:
        workers_seen = getattr(request.app.state.job_runner, "workers_seen", None)
        if workers_seen is None:
            return Readiness(revision=",".join(state.current))
        workers = workers_seen()
        if workers > 0:
            return Readiness(revision=",".join(state.current), workers=workers)
        settings = request.app.state.settings
        detail = (
            f"no job worker has been seen in the last {settings.queue_stalled_seconds:g} s: "
            "queued jobs will not run; start `privfit worker`"
        )
    elif not state.reachable:
        detail = "the database is not reachable"
    else:
        detail = "the database is not migrated to the latest revision; run `privfit migrate`"
    return problem_response(
        request, status=503, slug="service-unavailable", title="Service unavailable", detail=detail
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    description=(
        "Request counts and latencies by method, route template and status, in the Prometheus "
        "text format. Public unless the operator sets `PRIVFIT_METRICS_REQUIRE_KEY`, which "
        "makes it answer only to the admin key."
    ),
    response_class=PlainTextResponse,
    response_description="Prometheus text exposition format.",
    responses={
        200: {
            "content": {
                "text/plain": {
                    "schema": {"type": "string"},
                    "example": 'privfit_http_requests_total{method="GET",route="/healthz",'
                    'status="200"} 3.0\n',
                }
            }
        }
    },
    openapi_extra=access("public"),
)
def metrics(
    request: Request,
    settings: SettingsDep,
    registry: HttpMetricsDep,
) -> Response:
    if settings.metrics_require_key:
        _require_admin_key(request)
    return Response(content=registry.render(), media_type=CONTENT_TYPE_LATEST)


def _require_admin_key(request: Request) -> None:
    """401/403 unless the request carries the admin key (``PRIVFIT_METRICS_REQUIRE_KEY``)."""
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        raise AuthenticationError("send the admin key as `Authorization: Bearer <key>`")
    authenticate_request(request, token).require_admin()
