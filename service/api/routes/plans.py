"""The privacy–utility planner: ``POST /v1/datasets/{id}/plans`` (spends nothing)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from service.api.deps import Expensive, PrincipalDep, UowDep, UowFactoryDep, access
from service.api.errors import problem_responses
from service.api.json_body import JsonRoute
from service.api.negotiation import choose_media_type
from service.api.plan_png import plan_png
from service.api.plan_svg import plan_svg
from service.api.routes import API_V1
from service.api.schemas.plans import PlanCreate, PlanRead
from service.domain.fits import plans

router = APIRouter(prefix=f"{API_V1}/datasets", tags=["plans"], route_class=JsonRoute)

JSON, SVG, PNG = "application/json", "image/svg+xml", "image/png"
#: The plan's representations, the default first.
MEDIA_TYPES = (JSON, SVG, PNG)


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
        "the curve as a picture, `Accept: image/png` the same picture as a 640 × 400 PNG (q-values "
        "are honoured; JSON is the default). Owner only: for other sites and the admin key it "
        "does not exist (404, as for an unknown id)."
    ),
    response_model=PlanRead,
    responses={
        200: {
            "description": "The plan as JSON, or its curve as an SVG or PNG picture (`Accept`).",
            "content": {
                SVG: {"schema": {"type": "string"}},
                PNG: {"schema": {"type": "string", "format": "binary"}},
            },
        },
        **problem_responses(401, 404, 413, 422),
    },
    openapi_extra=access("owner"),
)
async def create_plan(
    dataset_id: str,
    body: PlanCreate,
    request: Request,
    uow: UowDep,
    uow_factory: UowFactoryDep,
    principal: PrincipalDep,
) -> PlanRead | Response:
    media_type = choose_media_type(request.headers.get("accept"), MEDIA_TYPES)
    plan = await run_in_threadpool(
        plans.make_plan,
        uow,
        uow_factory,
        dataset_id=dataset_id,
        request=body.to_domain(),
        actor=principal,
    )
    data = plan.to_dict()
    if media_type == SVG:
        return Response(plan_svg(data), media_type=SVG)
    if media_type == PNG:
        return Response(await run_in_threadpool(plan_png, data), media_type=PNG)
    return JSONResponse(PlanRead.model_validate(data).model_dump(mode="json"))
