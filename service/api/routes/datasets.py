"""Datasets and their privacy budgets (issue 4; docs/design.md §5)."""

from __future__ import annotations

from typing import IO, Annotated, Any, Final

from fastapi import APIRouter, Query, Request, Response, status
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.deps import AuditContextDep, Expensive, PrincipalDep, SettingsDep, UowDep, access
from service.api.errors import problem_responses
from service.api.json_body import JsonRoute, JsonTooDeepError, parse_json
from service.api.routes import API_V1
from service.api.schemas.base import page_read
from service.api.schemas.datasets import (
    BudgetRead,
    DatasetCreate,
    DatasetList,
    DatasetRead,
)
from service.api.uploads import SPEC_ERROR, UploadRejectedError, process_upload
from service.db.models import Dataset
from service.domain.datasets import catalog as datasets
from service.domain.datasets.readers import MAX_EXTRA_COLUMNS
from service.domain.datasets.spec import BudgetLimits, DatasetSpec, DatasetSpecError
from service.domain.errors import InvalidInputError

router = APIRouter(prefix=f"{API_V1}/datasets", tags=["datasets"], route_class=JsonRoute)

#: The routes whose body is a streamed upload (``PRIVFIT_MAX_REQUEST_BYTES``, not the JSON
#: limit): (method, path template).
STREAMED_UPLOADS: Final = frozenset({("POST", f"{API_V1}/datasets")})

Limit = Annotated[int, Query(ge=1, le=200, description="Page size.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip.")]


class InvalidUploadError(InvalidInputError):
    """The multipart body lacks a part, repeats one, or has an unexpected one (422)."""

    title = "Invalid upload"


_UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "spec"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "The data: CSV with a header row (UTF-8, ',' "
                            "separated), or Parquet. Detected from the content.",
                        },
                        "spec": {"$ref": "#/components/schemas/DatasetCreate"},
                    },
                },
                "encoding": {"spec": {"contentType": "application/json"}},
            }
        },
    }
}


def _parse_spec(text: str) -> DatasetCreate:
    """The ``spec`` part as a :class:`DatasetCreate`; otherwise a ``DatasetSpecError`` (422
    ``invalid-dataset-spec``, like every other spec problem) listing every invalid part.

    A spec nested deeper than ``MAX_JSON_DEPTH`` is refused before it is validated."""
    try:
        parse_json(text)
        is_json = True
    except JsonTooDeepError as exc:
        detail = f"the 'spec' part is nested deeper than {exc.limit} levels"
        raise DatasetSpecError(
            detail, errors=[{"loc": ["spec"], "msg": detail, "type": "json_too_deep"}]
        ) from None
    except ValueError:
        is_json = False
    try:
        return DatasetCreate.model_validate_json(text)
    except ValidationError as exc:
        errors = [
            {
                "loc": ["spec", *(p if isinstance(p, int) else str(p) for p in e["loc"])],
                "msg": e["msg"],
                "type": e["type"],
            }
            for e in exc.errors(include_input=False, include_url=False, include_context=False)
        ]
        detail = (
            f"the 'spec' part has {len(errors)} invalid part(s); see errors"
            if is_json
            else "the 'spec' part must be a JSON object"
        )
        raise DatasetSpecError(detail, errors=errors) from None


def _spec_from(text: str, limits: BudgetLimits, max_classes: int) -> DatasetSpec:
    """The validated spec of the ``spec`` part; every problem with it is one problem type,
    ``invalid-dataset-spec``, whose ``errors`` locate each part under ``spec``."""
    try:
        return _parse_spec(text).to_domain(limits, max_classes=max_classes)
    except DatasetSpecError as exc:
        if all(e.get("loc", [None])[:1] == ["spec"] for e in exc.errors):
            raise
        errors = [{**e, "loc": ["spec", *e.get("loc", ())]} for e in exc.errors]
        raise DatasetSpecError(exc.detail, errors=errors) from None


@router.post(
    "",
    dependencies=[Expensive],
    status_code=status.HTTP_201_CREATED,
    summary="Upload a dataset",
    description=(
        "Multipart upload: a `file` part (CSV with a header row, or Parquet) and a `spec` part "
        "(JSON, see `DatasetCreate`) naming the label column and what it holds (two classes, "
        "3 or more `classes`, or a number with public bounds `lower`/`upper`: see "
        "`DatasetLabelIn`), every "
        "feature with public bounds or categories, the budget caps and the missing-value "
        "policy. Numeric values are clamped to the declared bounds, categories outside the "
        "list become an all-zero block, an intercept is added and every row is brought into "
        "the unit ball. PrivFit never reads bounds from the data. The file is parsed while "
        "it is received when the `spec` part comes first (spooled to disk first otherwise), "
        "never held whole in memory; the dataset is stored only if the whole body and file "
        f"are valid. A label value of neither class, or more than {MAX_EXTRA_COLUMNS:,} columns "
        "beyond those the spec reads, is a 422; every problem with the spec itself is a 422 of "
        "type `invalid-dataset-spec`. Errors name columns and count rows but never show a data "
        "value. Requires a site key."
    ),
    response_model=DatasetRead,
    responses=problem_responses(400, 401, 403, 413, 415, 422),
    openapi_extra={**access("site"), **_UPLOAD_BODY},
)
async def create_dataset(
    request: Request,
    uow: UowDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    audit_context: AuditContextDep,
) -> DatasetRead:
    principal.require_site()
    limits = BudgetLimits(
        max_epsilon=settings.max_budget_epsilon, max_delta=settings.max_budget_delta
    )

    def prepare(text: str) -> DatasetSpec:
        return _spec_from(text, limits, settings.max_classes)

    def store(spec: DatasetSpec, source: IO[bytes]) -> Dataset:
        return datasets.create_dataset(
            uow, actor=principal, spec=spec, source=source, context=audit_context
        )

    try:
        # The file is parsed while it arrives when the spec part comes first.
        dataset = await process_upload(
            content_type=request.headers.get("content-type"),
            content_length=request.headers.get("content-length"),
            chunks=request.stream(),
            max_bytes=settings.max_request_bytes,
            prepare=prepare,
            process=store,
        )
    except UploadRejectedError as exc:
        if exc.kind == SPEC_ERROR:
            raise DatasetSpecError(
                exc.detail, errors=[{"loc": ["spec"], "msg": exc.detail}]
            ) from None
        if exc.status == 422:
            raise InvalidUploadError(exc.detail) from None
        raise StarletteHTTPException(exc.status, detail=exc.detail) from None
    return DatasetRead.from_row(dataset)


@router.get(
    "",
    summary="List datasets",
    description=(
        "The calling site's datasets, newest first. Deleted datasets are hidden unless "
        "`include_deleted=true`. Requires a site key (the admin key, which owns no site data, "
        "gets 403)."
    ),
    response_model=DatasetList,
    responses=problem_responses(401, 403, 422),
    openapi_extra=access("site"),
)
def list_datasets(
    uow: UowDep,
    principal: PrincipalDep,
    limit: Limit = 50,
    offset: Offset = 0,
    include_deleted: Annotated[
        bool, Query(description="Include deleted datasets (content gone, ledger kept).")
    ] = False,
) -> DatasetList:
    page = datasets.list_datasets(
        uow, actor=principal, limit=limit, offset=offset, include_deleted=include_deleted
    )
    return page_read(DatasetList, page, DatasetRead.from_row, limit=limit, offset=offset)


@router.get(
    "/{dataset_id}",
    summary="Get a dataset",
    description=(
        "A dataset's metadata: shape, encoded feature names, spec, budget caps. Only its "
        "owner can read it; for other sites and the admin key it does not exist (404, as for "
        "an unknown id)."
    ),
    response_model=DatasetRead,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
def get_dataset(dataset_id: str, uow: UowDep, principal: PrincipalDep) -> DatasetRead:
    return DatasetRead.from_row(datasets.get_dataset(uow, dataset_id=dataset_id, actor=principal))


@router.delete(
    "/{dataset_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a dataset",
    description=(
        "Removes the dataset's content at once. Its metadata and budget ledger are kept (the "
        "dataset shows `deleted_at`); new fits on it get 409 `dataset-deleted`. Deleting again "
        "is a no-op. Owner only: for other sites and the admin key the dataset does not exist "
        "(404, as for an unknown id), and nothing is deleted."
    ),
    response_class=Response,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
def delete_dataset(
    dataset_id: str, uow: UowDep, principal: PrincipalDep, audit_context: AuditContextDep
) -> Response:
    datasets.delete_dataset(uow, dataset_id=dataset_id, actor=principal, context=audit_context)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{dataset_id}/budget",
    summary="Get a dataset's privacy budget",
    description=(
        "Caps, amounts spent and remaining for ε and δ, and every charge (job, ε, δ, "
        "mechanism, time, state). Spent is the sum of the charges not refunded; the ledger is "
        "exact (integer units of 1e-9 ε and 1e-15 δ). Owner only: for other sites and the "
        "admin key the dataset does not exist (404, as for an unknown id)."
    ),
    response_model=BudgetRead,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
def get_dataset_budget(dataset_id: str, uow: UowDep, principal: PrincipalDep) -> BudgetRead:
    return BudgetRead.from_status(datasets.get_budget(uow, dataset_id=dataset_id, actor=principal))
