"""Studies: create and read, contribute and withdraw, aggregate (``/v1/studies``)."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Body, Query, Response, status
from fastapi.responses import JSONResponse

from service.api.charged_calls import ChargedJobCallDep, charged_job_responses
from service.api.deps import (
    AuditContextDep,
    Expensive,
    PrincipalDep,
    SettingsDep,
    UowDep,
    access,
)
from service.api.errors import problem_responses
from service.api.json_body import JsonRoute
from service.api.routes import API_V1
from service.api.schemas.base import page_read
from service.api.schemas.federated import FederatedFitCreate, FederatedQuoteRead
from service.api.schemas.jobs import JobRead
from service.api.schemas.studies import (
    AggregationCreate,
    AggregationQuoteRead,
    ContributionRead,
    DatasetGrantIn,
    ModelContributionIn,
    StudyCreate,
    StudyList,
    StudyRead,
)
from service.domain.studies import aggregations
from service.domain.studies import membership as studies
from service.domain.studies.federated import submit as federated

router = APIRouter(prefix=f"{API_V1}/studies", tags=["studies"], route_class=JsonRoute)

Limit = Annotated[int, Query(ge=1, le=200, description="Page size.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip.")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    summary="Create a study",
    description=(
        "Several sites learning together without pooling data. The caller becomes the "
        "study's coordinator (and a member); `members` names the other sites. `spec` is the "
        "label and features every contribution must encode, with the rules of a dataset spec "
        "(public bounds, declared categories; a binary, multi-class (`classes`) or numeric "
        "(`lower`/`upper`) label, which every contribution must declare alike: the same "
        "classes in the same order, the same bounds). 422 when no other member is named, a "
        "member is not a site, or the spec is invalid. Requires a site key."
    ),
    response_model=StudyRead,
    responses=problem_responses(401, 403, 413, 422),
    openapi_extra=access("site"),
)
def create_study(
    body: StudyCreate,
    uow: UowDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    audit_context: AuditContextDep,
) -> StudyRead:
    principal.require_site()
    view = studies.create_study(
        uow,
        name=body.name,
        members=body.members,
        spec=body.spec.to_domain(),
        actor=principal,
        context=audit_context,
        max_classes=settings.max_classes,
    )
    return StudyRead.from_view(view)


@router.get(
    "",
    summary="List studies",
    description=(
        "The studies the calling site belongs to, newest first. Requires a site key (the admin "
        "key, which is in no study, gets 403)."
    ),
    response_model=StudyList,
    responses=problem_responses(401, 403, 422),
    openapi_extra=access("site"),
)
def list_studies(
    uow: UowDep, principal: PrincipalDep, limit: Limit = 50, offset: Offset = 0
) -> StudyList:
    page = studies.list_studies(uow, actor=principal, limit=limit, offset=offset)
    return page_read(StudyList, page, StudyRead.from_view, limit=limit, offset=offset)


@router.get(
    "/{study_id}",
    summary="Get a study",
    description=(
        "Members, contributions and results (aggregated models, readable by every member). "
        "For a site that is not a member, and for the admin key, the study does not exist (404, "
        "as for an unknown id)."
    ),
    response_model=StudyRead,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
def get_study(study_id: str, uow: UowDep, principal: PrincipalDep) -> StudyRead:
    return StudyRead.from_view(studies.get_study(uow, study_id=study_id, actor=principal))


@router.post(
    "/{study_id}/contributions",
    dependencies=[Expensive],
    status_code=status.HTTP_201_CREATED,
    summary="Contribute to a study",
    description=(
        'A member contributes `{"model_id"}`, a model it owns (fitted by PrivFit or '
        'uploaded), or `{"dataset_id", "epsilon_cap", "delta_cap"}`, a grant letting the '
        "study spend up to that much of one of its datasets' budget (used by federated fits; "
        "the caps must fit within the dataset's own caps). The model's or dataset's feature "
        "spec must match the study's: otherwise 422 listing what differs. Contributing the same "
        "model or dataset twice is 409; another site's model or dataset is 404. For a site that "
        "is not a member, and for the admin key, the study does not exist (404, as for an unknown "
        "id)."
    ),
    response_model=ContributionRead,
    responses=problem_responses(401, 404, 409, 413, 422),
    openapi_extra=access("owner"),
)
def add_contribution(
    study_id: str,
    body: ModelContributionIn | DatasetGrantIn,
    uow: UowDep,
    principal: PrincipalDep,
    audit_context: AuditContextDep,
) -> ContributionRead:
    if isinstance(body, ModelContributionIn):
        row = studies.add_contribution(
            uow, study_id=study_id, actor=principal, context=audit_context, model_id=body.model_id
        )
    else:
        grant = studies.DatasetGrant(
            dataset_id=body.dataset_id, epsilon_cap=body.epsilon_cap, delta_cap=body.delta_cap
        )
        row = studies.add_contribution(
            uow, study_id=study_id, actor=principal, context=audit_context, grant=grant
        )
    return ContributionRead.from_row(row)


@router.delete(
    "/{study_id}/contributions/{contribution_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Withdraw a contribution",
    description=(
        "The contributing site withdraws its contribution. Once an aggregation has used it, it "
        "is part of a released result and cannot be withdrawn (409). Another member's "
        "contribution is 403. For a site that is not a member, and for the admin key, the study "
        "does not exist (404, as for an unknown id)."
    ),
    response_class=Response,
    responses=problem_responses(401, 403, 404, 409, 422),
    openapi_extra=access("owner"),
)
def withdraw_contribution(
    study_id: str,
    contribution_id: str,
    uow: UowDep,
    principal: PrincipalDep,
    audit_context: AuditContextDep,
) -> Response:
    studies.withdraw_contribution(
        uow,
        study_id=study_id,
        contribution_id=contribution_id,
        actor=principal,
        context=audit_context,
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{study_id}/aggregations",
    dependencies=[Expensive],
    status_code=status.HTTP_202_ACCEPTED,
    summary="Aggregate the study's models",
    description=(
        "Coordinator only (other members: 403; other sites and the admin key: 404, as for an "
        "unknown study). Returns the job (kind `aggregate`) and its "
        "`Location`; once `succeeded` it names the result: a model every member can read, "
        "predict with and export. `average` reads no data and draws no noise, so its job has "
        "already succeeded; `feature` and `transfer` run on the job runner like a fit (poll "
        "`GET /v1/jobs/{id}`; a cancel while queued refunds the charge). With `Prefer: wait=N` "
        "the answer comes when the job has ended (201) or after N seconds (202).\n\n"
        "* `average` (seed 000, Alg. 4) averages the coefficients of the contributed models "
        "(`models`, default: all of them) with optional public `weights`. It reads no data and "
        "charges nothing. Multi-class models average their (K, d) matrices entry by entry "
        "(the study fixes the classes' order) and numeric-label models their weights (the "
        "study fixes the bounds).\n"
        "* `feature` (seed 000, Alg. 5) stacks the site models (`source_models`, default: all) "
        "and fits the meta-level model with `mechanism` at (`epsilon`, `delta`) on "
        "`holdout_dataset_id`, a dataset the coordinator owns; `linear` meta-features are "
        "released as the linear model s·M_fᵀω, `sigmoid` ones as a stacked model. The holdout's "
        "budget is charged as for `transfer`.\n"
        "* `transfer` (hypothesis transfer, seed 003) fits objective perturbation at `epsilon` "
        "on `target_dataset_id`, a dataset the coordinator owns whose spec matches the "
        "study's, with the regulariser (η/2)‖w − w₀‖² centred on the average w₀ of the "
        "`source_models` (default: all contributed), η = `transfer_strength`. ε is charged to "
        "the target dataset before any noise is drawn (409 when its budget cannot cover it); "
        "a fit that then fails leaves the budget spent and the job `failed`. With "
        "`feature_groups` (study feature names, or a categorical column for its whole block) "
        "and optional public `importance` weights it is PST-H (seed 003, Alg. 4): PST-F on the "
        "target with each group's model centred on the source restricted to that group, "
        "released as a stacked model; ε in total is charged to the target.\n\n"
        "In a study of multi-class or numeric labels, `feature` with `linear` meta-features "
        "fits the study's task at the meta level (a K-class fit on the N·K site-model scores, "
        "released as a K × d model, or a regression fit on the N scores; the meta-level "
        "`mechanism` must fit the task, e.g. `loss: huber` for numbers); `sigmoid` "
        "meta-features and `transfer` are derived for binary labels only and are a 422 "
        "`unsupported-label-task` stating why, dry run included, that charges nothing.\n\n"
        "The privacy record lists each input's guarantee (uploaded classifiers' as declared "
        "claims), composes per dataset, and says plainly when an input has no DP guarantee. "
        "Models not contributed to this study, and stacked models, are 422.\n\n"
        "`Idempotency-Key` makes the request safe to retry: the same request with the same key "
        "returns the first request's job (`Idempotent-Replayed: true`), charged once; the key "
        "with a different request is 422. `?dry_run=true` answers 200 with the cost, the "
        "calibration and the charged dataset's remaining budget, spending nothing."
    ),
    response_model=JobRead,
    responses=charged_job_responses(AggregationQuoteRead, coordinator_only=True),
    openapi_extra=access("owner"),
)
async def create_aggregation(
    study_id: str, body: Annotated[AggregationCreate, Body()], call: ChargedJobCallDep
) -> JobRead | JSONResponse:
    return await call.run(
        aggregations.quote_aggregation,
        AggregationQuoteRead.from_quote,
        aggregations.submit_aggregation,
        study_id=study_id,
        request=body.to_domain(),
    )


@router.post(
    "/{study_id}/federated-fits",
    dependencies=[Expensive],
    status_code=status.HTTP_202_ACCEPTED,
    summary="Run a federated fit across granted datasets",
    description=(
        "Coordinator only (other members: 403; other sites and the admin key: 404, as for an "
        "unknown study). Runs a multiparty protocol across the datasets "
        "the members granted to the study (`datasets`, default: all of them; at least two), "
        "each site's local steps over its own rows only, and releases only the final model, "
        "readable by every member.\n\n"
        "* `noisy_average` (seed 000 §4.4.1, scenario 2): local fits whose gradient is proved "
        "≤ τ (so within τ/λ of the exact minimiser), never leaving PrivFit, averaged, then one "
        "noise draw with β = ε/S, S = (2/(min nᵢ·λ) + 2τ/λ)/K + 2ρ (ρ the mean's rounding). ε "
        "per dataset.\n"
        "* `psgd` (Rajkumar & Agarwal): gradient descent on the sum of the sites' noisy "
        "gradients, each answer a fresh Gaussian release, composed over the `iterations` "
        "rounds in zCDP; (ε, δ) per dataset toward any coordinator.\n"
        "* `admm` with `perturbation` `none`, `dual` (DVP) or `primal` (PVP) (Zhang & Zhu): "
        "sites on a graph (`topology` `complete` or `ring`, or an `adjacency`); the per-"
        "iteration α is composed over the iterations, the tighter of basic and advanced "
        "composition (at `delta_prime`).\n"
        "* `distributed_lasso` (Li et al.): proximal steps on shared squared-loss gradients; "
        "Gaussian noise on each shared gradient composed with zCDP, or, with `noise: false`, "
        "not DP (only over datasets that allow non-private use).\n\n"
        "A multi-class study runs `noisy_average` (each site's multinomial logistic fit, "
        "noise in dimension d·K calibrated to 2√2/(n_min·λ), the model released with the "
        "study's classes). A study of numeric labels (`lower`/`upper`) runs `noisy_average` "
        "with the `huber` loss of the residual (its default there; noise calibrated to "
        "2h/(n_min·λ); the squared loss has no such bound and is refused) or "
        "`distributed_lasso` (a least-squares fit on the labels mapped onto [−1, 1], with the "
        "binary calibration: the clip bounds its sensitivity whatever the labels). `psgd` and "
        "`admm` are derived for a margin loss on labels ±1 and fit binary studies only. Any "
        "other protocol or loss is a 422 (`unsupported-label-task` for the protocol) stating "
        "why, dry run included, that charges nothing.\n\n"
        "Every dataset is charged its own cost (parallel composition), within its remaining "
        "budget and the study's grant on it, all or none, before any noise is drawn: a "
        "shortfall is a 409 naming the dataset. 202 with the job (kind `federated`); it reports "
        "progress per round and honours `POST /v1/jobs/{id}/cancel`; with `Prefer: wait=N` "
        "the answer comes when it has ended (201) or after N seconds (202). `?dry_run=true` "
        "answers 200 with the per-dataset costs and the calibration, spending nothing.\n\n"
        "Remote contributions (datasets kept on site nodes) are reached through the API "
        "process their agents poll, so such a fit runs on a thread of that process whatever "
        "the job runner (`process`, the default, or `thread`); with `PRIVFIT_JOB_RUNNER=queue` "
        "it is a 422, dry run included, that charges nothing."
    ),
    response_model=JobRead,
    responses=charged_job_responses(FederatedQuoteRead, coordinator_only=True),
    openapi_extra=access("owner"),
)
async def create_federated_fit(
    study_id: str, body: FederatedFitCreate, call: ChargedJobCallDep
) -> JobRead | JSONResponse:
    return await call.run(
        # the quote is refused as the submission would be, by where the runner runs the job
        partial(federated.quote_federated_fit, runner=call.runner),
        FederatedQuoteRead.from_quote,
        federated.submit_federated_fit,
        study_id=study_id,
        request=body.to_domain(),
    )
