"""Site nodes (issue 15): remote contributions and node tasks on a coordinator, dataset
offers on a node."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from service.api.deps import AuditContextDep, PrincipalDep, UowDep, access
from service.api.errors import problem_responses
from service.api.json_body import JsonRoute
from service.api.routes import API_V1
from service.api.schemas.nodes import (
    ModelOfferCreate,
    ModelOfferRead,
    NodeTaskRead,
    OfferCreate,
    OfferList,
    OfferRead,
    RemoteContributionCreate,
    RemoteContributionList,
    RemoteContributionRead,
    TaskResultIn,
)
from service.domain.errors import NotFoundError
from service.domain.nodes import model_offers, offers, remote
from service.domain.nodes.exchange import EXCHANGE
from service.runtime.node_link import HttpCoordinatorLink

router = APIRouter(tags=["nodes"], route_class=JsonRoute)


def _link(request: Request) -> HttpCoordinatorLink | None:
    link: HttpCoordinatorLink | None = getattr(request.app.state, "coordinator_link", None)
    return link


# --- coordinator: remote contributions ---------------------------------------------------


@router.post(
    f"{API_V1}/studies/{{study_id}}/remote-contributions",
    status_code=status.HTTP_201_CREATED,
    summary="Register a node's dataset in a study",
    description=(
        "Called by a member's node (its `POST /v1/datasets/{id}/offers`): registers a dataset "
        "the member keeps on its own PrivFit as a remote contribution, with only its public "
        "spec and the caps the node accepts per job. No row and no row count is sent. 422 when "
        "the spec differs from the study's. For a site that is not a member, and for the admin "
        "key, the study does not exist (404, as for an unknown id)."
    ),
    response_model=RemoteContributionRead,
    responses=problem_responses(401, 404, 413, 422),
    openapi_extra=access("owner"),
)
def add_remote_contribution(
    study_id: str,
    body: RemoteContributionCreate,
    uow: UowDep,
    principal: PrincipalDep,
    audit_context: AuditContextDep,
) -> RemoteContributionRead:
    view = remote.add_remote_contribution(
        uow, study_id=study_id, offer=body.to_domain(), actor=principal, context=audit_context
    )
    return RemoteContributionRead.from_view(view)


@router.get(
    f"{API_V1}/studies/{{study_id}}/remote-contributions",
    summary="List a study's remote contributions",
    description=(
        "Datasets kept on members' nodes and offered to the study (withdrawn included). "
        "For a site that is not a member, and for the admin key, the study does not exist (404, "
        "as for an unknown id)."
    ),
    response_model=RemoteContributionList,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
def list_remote_contributions(
    study_id: str, uow: UowDep, principal: PrincipalDep
) -> RemoteContributionList:
    views = remote.list_remote_contributions(uow, study_id=study_id, actor=principal)
    return RemoteContributionList(items=[RemoteContributionRead.from_view(v) for v in views])


@router.delete(
    f"{API_V1}/studies/{{study_id}}/remote-contributions/{{contribution_id}}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Withdraw a remote contribution",
    description=(
        "By the node's site or the study's coordinator; idempotent. A withdrawn contribution "
        "takes part in no new federated fit. Another member's is 403. For a site that is not a "
        "member, and for the admin key, the study does not exist (404, as for an unknown id)."
    ),
    response_class=Response,
    responses=problem_responses(401, 403, 404, 422),
    openapi_extra=access("owner"),
)
def withdraw_remote_contribution(
    study_id: str,
    contribution_id: str,
    uow: UowDep,
    principal: PrincipalDep,
    audit_context: AuditContextDep,
) -> Response:
    remote.withdraw_remote_contribution(
        uow,
        study_id=study_id,
        contribution_id=contribution_id,
        actor=principal,
        context=audit_context,
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# --- coordinator: node tasks ---------------------------------------------------------------

Wait = Annotated[float, Query(ge=0, le=60, description="Seconds to wait for a task (long poll).")]


@router.get(
    f"{API_V1}/node/tasks/next",
    summary="Take the next task for this site's node",
    description=(
        "A node's agent long-polls here with its site key: 200 with the next step of a "
        "federated fit over one of the site's remote contributions (public state only: the "
        "job's terms, the step, the query point or the neighbours' broadcasts), or 204 when "
        "none came within `wait` seconds."
    ),
    response_model=NodeTaskRead,
    responses={
        204: {"description": "No task within the wait."},
        **problem_responses(401, 403, 422),
    },
    openapi_extra=access("site"),
)
def next_node_task(uow: UowDep, principal: PrincipalDep, wait: Wait = 20.0) -> Response:
    site_id = principal.require_site()
    with uow:
        ids = uow.remote_contributions.active_ids_of_site(site_id)
    task = EXCHANGE.next_for(ids, wait=wait) if ids else None
    if task is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    body = NodeTaskRead.model_validate(task.to_message())
    return Response(content=body.model_dump_json(), media_type="application/json")


@router.post(
    f"{API_V1}/node/tasks/{{task_id}}/result",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Answer a node task",
    description=(
        "The node's answer to a task it took: the step's vector (already noised on the node), "
        "the join's facts, or `refused` with the reason, which the job records. 404 when the "
        "task is unknown, no longer awaited, or not this site's (for the admin key, always)."
    ),
    response_class=Response,
    responses=problem_responses(401, 404, 413, 422),
    openapi_extra=access("owner"),
)
def answer_node_task(
    task_id: str, body: TaskResultIn, uow: UowDep, principal: PrincipalDep
) -> Response:
    site_id = principal.site_or_not_found("task")
    with uow:
        ids = uow.remote_contributions.active_ids_of_site(site_id)
    if not EXCHANGE.answer(task_id, ids, body.model_dump(exclude_none=True)):
        raise NotFoundError("task")
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# --- node: dataset offers ------------------------------------------------------------------


@router.post(
    f"{API_V1}/datasets/{{dataset_id}}/offers",
    status_code=status.HTTP_201_CREATED,
    summary="Offer a dataset to a coordinator's study",
    description=(
        "On a node (a PrivFit with `PRIVFIT_COORDINATOR_URL` and `PRIVFIT_COORDINATOR_KEY`): "
        "registers this dataset in the coordinator's study as a remote contribution carrying "
        "only its public spec and the caps; the rows never leave this PrivFit. Nothing is "
        "charged now: each job is charged here when it starts, within the caps. 502 with the "
        "coordinator's reason when it refuses. Owner only: for other sites and the admin key the "
        "dataset does not exist (404, as for an unknown id)."
    ),
    response_model=OfferRead,
    responses=problem_responses(401, 404, 409, 413, 422, 502),
    openapi_extra=access("owner"),
)
def create_offer(
    dataset_id: str,
    body: OfferCreate,
    request: Request,
    uow: UowDep,
    principal: PrincipalDep,
    audit_context: AuditContextDep,
) -> OfferRead:
    view = offers.create_offer(
        uow,
        link=_link(request),
        dataset_id=dataset_id,
        study_id=body.study_id,
        epsilon_cap=body.epsilon_cap,
        delta_cap=body.delta_cap,
        actor=principal,
        context=audit_context,
    )
    return OfferRead.from_view(view)


@router.get(
    f"{API_V1}/datasets/{{dataset_id}}/offers",
    summary="List a dataset's offers",
    description=(
        "This dataset's offers to coordinators' studies, with what their jobs charged. Owner "
        "only: for other sites and the admin key the dataset does not exist (404, as for an "
        "unknown id)."
    ),
    response_model=OfferList,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
def list_offers(dataset_id: str, uow: UowDep, principal: PrincipalDep) -> OfferList:
    views = offers.list_offers(uow, dataset_id=dataset_id, actor=principal)
    return OfferList(items=[OfferRead.from_view(v) for v in views])


@router.delete(
    f"{API_V1}/datasets/{{dataset_id}}/offers/{{offer_id}}",
    summary="Withdraw an offer",
    description=(
        "Recorded here first (the node refuses the offer's tasks from now on), then told to "
        "the coordinator (502 if it cannot be told; the offer stays withdrawn here). Owner "
        "only: for other sites and the admin key the dataset does not exist (404, as for an "
        "unknown id)."
    ),
    response_model=OfferRead,
    responses=problem_responses(401, 404, 422, 502),
    openapi_extra=access("owner"),
)
def withdraw_offer(
    dataset_id: str,
    offer_id: str,
    request: Request,
    uow: UowDep,
    principal: PrincipalDep,
    audit_context: AuditContextDep,
) -> OfferRead:
    view = offers.withdraw_offer(
        uow,
        link=_link(request),
        dataset_id=dataset_id,
        offer_id=offer_id,
        actor=principal,
        context=audit_context,
    )
    return OfferRead.from_view(view)


@router.post(
    f"{API_V1}/models/{{model_id}}/offers",
    status_code=status.HTTP_201_CREATED,
    summary="Contribute a model to a coordinator's study",
    description=(
        "On a node: uploads a model this site fitted here (weights, public feature spec, label "
        "and its privacy record as a claim) to the coordinator and contributes it to the "
        "study for `average`, `feature` or `transfer` aggregation, in one call. Binary, "
        "multi-class and regression models alike (in the form `POST /v1/models` takes); the "
        "coordinator admits one only into a study of the same label (task, classes in order, "
        "bounds). Nothing is charged (the model is already a DP release). 502 with the "
        "coordinator's reason when it refuses. Owner only: for other sites and the admin key "
        "the model does not exist (404, as for an unknown id)."
    ),
    response_model=ModelOfferRead,
    responses=problem_responses(401, 404, 413, 422, 502),
    openapi_extra=access("owner"),
)
def offer_model(
    model_id: str,
    body: ModelOfferCreate,
    request: Request,
    uow: UowDep,
    principal: PrincipalDep,
    audit_context: AuditContextDep,
) -> ModelOfferRead:
    view = model_offers.offer_model(
        uow,
        link=_link(request),
        model_id=model_id,
        study_id=body.study_id,
        actor=principal,
        context=audit_context,
    )
    return ModelOfferRead.model_validate(view)
