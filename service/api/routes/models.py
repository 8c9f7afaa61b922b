"""Models: read, list, predict with, export, and upload a site's own model."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, status
from fastapi.responses import JSONResponse, Response

from service.api.deps import (
    AuditContextDep,
    Expensive,
    PrincipalDep,
    SettingsDep,
    UowDep,
    access,
)
from service.api.errors import problem_responses
from service.api.inert_json import InertJSONResponse
from service.api.json_body import JsonRoute
from service.api.routes import API_V1
from service.api.schemas.base import page_read
from service.api.schemas.datasets import feature_inputs
from service.api.schemas.models import (
    ModelExportRead,
    ModelList,
    ModelRead,
    ModelSummary,
    ModelUpload,
    PredictionRead,
    PredictRequest,
    PredictResponse,
)
from service.domain.models import catalog as models
from service.domain.records.base import PrivacyClaim

router = APIRouter(prefix=f"{API_V1}/models", tags=["models"], route_class=JsonRoute)

Limit = Annotated[int, Query(ge=1, le=200, description="Page size.")]
Offset = Annotated[int, Query(ge=0, le=1_000_000_000, description="Items to skip.")]


@router.get(
    "",
    summary="List models",
    description=(
        "The calling site's models, newest first. Requires a site key (the admin key, which owns "
        "no site data, gets 403)."
    ),
    response_model=ModelList,
    responses=problem_responses(401, 403, 422),
    openapi_extra=access("site"),
)
def list_models(
    uow: UowDep, principal: PrincipalDep, limit: Limit = 50, offset: Offset = 0
) -> ModelList:
    page = models.list_models(uow, actor=principal, limit=limit, offset=offset)
    return page_read(ModelList, page, ModelSummary.from_row, limit=limit, offset=offset)


@router.post(
    "",
    dependencies=[Expensive],
    status_code=status.HTTP_201_CREATED,
    summary="Upload a model trained elsewhere",
    description=(
        "Stores a linear model a site trained itself: JSON weights over the features "
        "encoded by the given spec (same shape as a dataset spec), and optionally the privacy "
        "guarantee the site claims for it. The claim is stored and shown as declared by the "
        "uploader, **not verified by PrivFit**. The label takes a dataset spec's three forms: "
        "binary (one weight per encoded feature), multi-class (`classes`: one row of weights "
        "per class, row k scoring `classes[k]`) or numeric (`lower`/`upper`: one weight per "
        "encoded feature, scoring in the label's [−1, 1] units as a PrivFit export's "
        "`weights.coef` does). A weight count or row count that does not match the feature "
        "spec and the label, a non-finite or too large weight, or a loss that does not suit "
        "the label is a 422 naming the field, and nothing is stored. Nothing is ever "
        "unpickled. Requires a site key."
    ),
    response_model=ModelRead,
    responses=problem_responses(401, 403, 413, 422),
    openapi_extra=access("site"),
)
def upload_model(
    body: ModelUpload,
    uow: UowDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    audit_context: AuditContextDep,
) -> ModelRead:
    principal.require_site()  # the admin owns no models: 403 before the body is judged
    claim = None
    if body.privacy_claim is not None:
        c = body.privacy_claim
        claim = PrivacyClaim(
            epsilon=c.epsilon, delta=c.delta, mechanism=c.mechanism, description=c.description
        )
    upload = models.build_upload(
        label=body.label.model_dump(exclude_none=True),
        features=feature_inputs(body.features),
        row_norm=body.row_norm,
        weights=body.weights,
        loss=body.loss,
        claim=claim,
        max_classes=settings.max_classes,
    )
    row = models.upload_model(uow, upload=upload, actor=principal, context=audit_context)
    return ModelRead.from_row(row)


@router.get(
    "/{model_id}",
    summary="Get a model",
    description=(
        "The coefficients with their feature names, the preprocessing spec and the privacy "
        "record (mechanism, ε, δ, the dataset and unit protected, the calibration, the "
        "composition, the noise source, the software version). Its owner reads it (and every "
        "member of "
        "the study, for a study's result); for other sites and the admin key it does not exist "
        "(404, as for an unknown id)."
    ),
    response_model=ModelRead,
    responses=problem_responses(401, 404, 422),
    openapi_extra=access("owner"),
)
def get_model(model_id: str, uow: UowDep, principal: PrincipalDep) -> ModelRead:
    return ModelRead.from_row(models.get_model(uow, model_id=model_id, actor=principal))


@router.post(
    "/{model_id}/predict",
    dependencies=[Expensive],
    summary="Predict with a model",
    description=(
        "Scores raw rows (objects keyed by column name, as in the dataset's file) through the "
        "model's own preprocessing: `positive` (score > 0), `score` (wᵀx) and, for the logistic "
        "loss, `probability`. A multi-class model answers `predicted_class` (the declared "
        "class of the largest score), `scores` and `probabilities` (softmax), one per class in "
        "the label's order; a regression model `value`, always within the label's public "
        "bounds, and its `score`. A missing or invalid value is a 422 naming the row index and "
        "the column. Whoever reads the model may predict with it; for other sites and the admin "
        "key it does not exist (404, as for an unknown id)."
    ),
    response_model=PredictResponse,
    responses=problem_responses(401, 404, 413, 422),
    openapi_extra=access("owner"),
)
def predict(
    model_id: str, body: PredictRequest, uow: UowDep, principal: PrincipalDep
) -> JSONResponse:
    predictions = models.predict(uow, model_id=model_id, actor=principal, rows=body.rows)
    read = PredictResponse(predictions=[PredictionRead.from_domain(p) for p in predictions])
    # the members of other tasks are left out; class names are the site's own text
    return InertJSONResponse(read.model_dump(mode="json", exclude_unset=True))


_EXPORT_MEDIA_TYPES = {"skops": "application/octet-stream", "onnx": "application/octet-stream"}


@router.get(
    "/{model_id}/export",
    summary="Export a model",
    description=(
        "`format=json` (default): a self-contained JSON document: format name and version, "
        "the label's task, weights and feature names, the preprocessing (with the projection "
        "matrix, if any), the label, the decision rule and the privacy record. "
        "`format=skops`: a scikit-learn `Pipeline` (the public preprocessing as a "
        "`ColumnTransformer`, the row-norm step, the linear model) saved with skops (no "
        "pickle; load with `skops.io.load`), predicting exactly what PrivFit predicts: a "
        "`LogisticRegression` for binary and multi-class models (multinomial, `classes_` the "
        "declared classes), and for regression models the score, its value clipped to the "
        "label's bounds, and a `LinearRegression` returning it. `format=onnx`: the same "
        "pipeline as ONNX, one input per raw column (outputs `label` and `probabilities`, or "
        "`value`). Both carry the privacy record (the pipeline's `privfit_metadata_`, ONNX "
        "`metadata_props`). Models standard steps cannot express (stacked models, random "
        "projections, `clip` without an intercept) are a 422 for skops and ONNX. Whoever "
        "reads the model may export it; for other sites and the admin key it does not exist (404, "
        "as for an unknown id)."
    ),
    response_model=ModelExportRead,
    responses={
        **problem_responses(401, 404, 422),
        200: {
            "description": "The export, as an attachment.",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        },
    },
    openapi_extra=access("owner"),
)
def export_model(
    model_id: str,
    uow: UowDep,
    principal: PrincipalDep,
    export_format: Annotated[
        Literal["json", "skops", "onnx"],
        Query(alias="format", description="`json` (default), `skops` or `onnx`."),
    ] = "json",
) -> Response:
    if export_format == "json":
        document: dict[str, Any] = models.export_model(uow, model_id=model_id, actor=principal)
        return JSONResponse(
            document,
            headers={
                "Content-Disposition": f'attachment; filename="privfit-model-{model_id}.json"'
            },
        )
    content = models.export_model_file(
        uow, model_id=model_id, actor=principal, export_format=export_format
    )
    return Response(
        content,
        media_type=_EXPORT_MEDIA_TYPES[export_format],
        headers={
            "Content-Disposition": (
                f'attachment; filename="privfit-model-{model_id}.{export_format}"'
            )
        },
    )
