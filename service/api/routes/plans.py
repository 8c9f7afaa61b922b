"""The privacy–utility planner: ``POST /v1/datasets/{id}/plans`` (spends nothing)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from service.api.deps import Expensive, PrincipalDep, UowDep, UowFactoryDep, access
from service.api.errors import problem_responses
from service.api.plan_svg import plan_svg
from service.api.routes import API_V1
from service.api.schemas.plans import PlanCreate, PlanRead
from service.domain.errors import InvalidInputError
from service.domain.fits import plans

router = APIRouter(prefix=f"{API_V1}/datasets", tags=["plans"])

SVG = "image/svg+xml"


def _wants_svg(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    if "image/png" in accept and SVG not in accept:
        raise InvalidInputError(
            "the plan's picture is served as image/svg+xml (PNG is not rendered by the "
            "server; privfit_client.plot draws one)",
            errors=[{"loc": ["header", "Accept"], "msg": "use image/svg+xml"}],
        )
    return SVG in accept and "application/json" not in accept


@router.post(
    "/{dataset_id}/plans",
    dependencies=[Expensive],
    summary="Plan ε: expected noise, excess-risk bound and simulated accuracy",
    description=(
        "For a mechanism and a grid of ε (and λ): the expected noise norm, the excess-risk "
        "bound of Chaudhuri et al. 2011 (output and objective perturbation), and — with "
        "`reference_dataset_id`, a dataset of yours uploaded with `allow_non_private` and the "
        "same spec — the test accuracy of the mechanism simulated on that public data (mean "
        "and spread over `repeats` draws), and the smallest ε reaching `target_accuracy` with "
        "probability `target_probability`. Spends nothing and reads only the dataset's public "
        "n, d and spec; a private reference dataset is a 422. `Accept: image/svg+xml` returns "
        "the curve as a picture."
    ),
    response_model=PlanRead,
    responses={
        200: {"content": {SVG: {"schema": {"type": "string"}}}},
        **problem_responses(401, 403, 404, 413, 422),
    },
    openapi_extra=access("site"),
)
async def create_plan(
    dataset_id: str,
    body: PlanCreate,
    request: Request,
    uow: UowDep,
    uow_factory: UowFactoryDep,
    principal: PrincipalDep,
) -> PlanRead | Response:
    principal.require_site()
    svg = _wants_svg(request)
    plan = await run_in_threadpool(
        plans.make_plan,
        uow,
        uow_factory,
        dataset_id=dataset_id,
        request=body.to_domain(),
        actor=principal,
    )
    data = plan.to_dict()
    if svg:
        return Response(plan_svg(data), media_type=SVG)
    return JSONResponse(PlanRead.model_validate(data).model_dump(mode="json"))
