"""Models: read, list, predict, export, and upload a site's own model (issue 4 item 4, issue 29).

A model row holds the released model as JSON (``service.dp`` ``to_dict()``), its feature names,
its public preprocessing spec, the label it predicts and its privacy record. Models fitted by
PrivFit carry a verified record (:func:`~service.domain.records.base.fit_privacy_record`);
uploaded ones carry the uploader's declared claim, labelled as not verified. Uploads are JSON
weights only: nothing is ever unpickled.

An upload takes any of the three label forms (docs/design.md §5, "Uploaded models of every
task"):

* binary: one weight per encoded feature, score s = wᵀx, the positive class when s > 0;
* multi-class (``classes``, K ≥ 3): K rows of d weights, row k scoring ``classes[k]``
  (stored as :class:`~service.dp.core.released.MulticlassModel`, the layout of a fit's);
* regression (``lower``/``upper``): one weight per encoded feature scoring in the label's
  [−1, 1] units, the prediction L + (clip(wᵀx, −1, 1) + 1)/2 · (U − L): the units of a fitted
  regression model and of the export's ``weights.coef``, so an exported model uploaded back
  predicts the same. Label units could not be stored exactly: v = uᵀx becomes
  s = 2uᵀx/(U − L) − (U + L)/(U − L), whose constant is not a weight once the row-norm step has
  scaled the row (intercept entry included) by a factor that differs from row to row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeGuard

from service.db.models import Model, new_id
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.labels import DEFAULT_MAX_CLASSES, LabelTask
from service.domain.datasets.spec import DatasetSpecError, FeatureInput, RowNorm, build_feature_spec
from service.domain.errors import InvalidInputError, NotFoundError
from service.domain.ids import looks_like_id
from service.domain.models.export import build_export
from service.domain.models.predict import InvalidRowsError, Prediction, predict_rows
from service.domain.models.standard_export import StandardExportError, to_onnx, to_skops
from service.domain.records.base import PrivacyClaim, upload_privacy_record
from service.dp import LinearModel
from service.dp.core.released import MulticlassModel, model_from_dict
from service.dp.core.tasks import TASK_LOSSES
from service.dp.data.preprocessing import PreprocessingSpec

__all__ = [
    "MAX_ABS_WEIGHT",
    "TASK_UPLOAD_LOSSES",
    "ModelPage",
    "UploadedModel",
    "build_upload",
    "export_model",
    "get_model",
    "list_models",
    "predict",
    "upload_model",
]

#: The losses an upload may declare for each label task (the first is the default):
#: the losses PrivFit fits for the task (service.dp.core.tasks.TASK_LOSSES), or ``other``.
TASK_UPLOAD_LOSSES: dict[str, tuple[str, ...]] = {
    task: (*losses, "other") for task, losses in TASK_LOSSES.items()
}


@dataclass(frozen=True, slots=True)
class ModelPage:
    """One page of models."""

    items: Sequence[Model]
    total: int


#: Uploaded weights: one vector (binary, regression) or one row per class (multi-class).
Weights = Sequence[float] | Sequence[Sequence[float]]


@dataclass(frozen=True, slots=True)
class UploadedModel:
    """A model a site trained itself: weights over the encoded features of ``spec`` (one
    vector, or K rows for a multi-class label), for its label's task."""

    name: str | None
    spec: PreprocessingSpec
    label: Mapping[str, Any]
    weights: Weights
    loss: str
    claim: PrivacyClaim | None

    @property
    def task(self) -> LabelTask:
        return LabelTask.from_label(self.label)


#: Largest |weight| of an uploaded model. Rows are brought into the unit ball, so a weight
#: this large already decides every prediction alone; larger ones only risk overflow.
MAX_ABS_WEIGHT = 1e6


def build_upload(
    *,
    label: Mapping[str, Any],
    features: Sequence[FeatureInput],
    row_norm: RowNorm,
    weights: Weights,
    loss: str | None,
    claim: PrivacyClaim | None,
    name: str | None = None,
    max_classes: int = DEFAULT_MAX_CLASSES,
) -> UploadedModel:
    """Validate an uploaded model's feature spec and label by the same rules as a dataset spec
    (public bounds, declared categories, no column twice, any of the three label forms); a bad
    spec is a 422 about the model's feature spec (``invalid-input``, locations under
    ``body``), not a dataset upload. Each weight must be finite with |w| ≤
    :data:`MAX_ABS_WEIGHT`; the loss must suit the label's task (:data:`TASK_UPLOAD_LOSSES`;
    None: the task's default)."""
    if not weights or any(_is_row(item) and not item for item in weights):
        raise InvalidInputError(
            "weights must hold at least one weight (in every row)",
            errors=[{"loc": ["body", "weights"], "msg": "must not be empty"}],
        )
    bad = [loc for loc, w in _entries(weights) if not _bounded(w)]
    if bad:
        raise InvalidInputError(
            f"weights must be finite numbers with |w| <= {MAX_ABS_WEIGHT:,.0f}; {len(bad)} are not",
            errors=[
                {
                    "loc": ["body", "weights", *loc],
                    "msg": f"must be finite with |w| <= {MAX_ABS_WEIGHT:,.0f}",
                }
                for loc in bad[:20]
            ],
        )
    try:
        spec = build_feature_spec(
            name=name or "uploaded model",
            label_column=str(label.get("column", "")),
            positive=label.get("positive"),
            negative=label.get("negative"),
            classes=label.get("classes"),
            label_lower=label.get("lower"),
            label_upper=label.get("upper"),
            features=features,
            row_norm=row_norm,
            max_classes=max_classes,
        )
    except DatasetSpecError as exc:
        reason = exc.detail.removeprefix("invalid dataset spec: ")
        raise InvalidInputError(
            f"invalid feature spec: {reason}",
            errors=[
                {"loc": ["body", *e.get("loc", ())], "msg": str(e.get("msg", reason))}
                for e in exc.errors
            ]
            or [{"loc": ["body", "features"], "msg": reason}],
        ) from exc
    task = LabelTask.from_label(spec.label)
    allowed = TASK_UPLOAD_LOSSES[task.task]
    if loss is None:
        loss = allowed[0]
    elif loss not in allowed:
        msg = f"{task.describe()} takes the loss " + ", ".join(allowed)
        raise InvalidInputError(
            f"the loss {loss!r} does not suit the model's label: {msg}",
            errors=[{"loc": ["body", "loss"], "msg": msg}],
        )
    return UploadedModel(
        name=name,
        spec=spec.preprocessing,
        label=spec.label,
        weights=_copy(weights),
        loss=loss,
        claim=claim,
    )


def _bounded(w: object) -> bool:
    return (
        isinstance(w, int | float)
        and not isinstance(w, bool)
        and math.isfinite(w)
        and abs(w) <= MAX_ABS_WEIGHT
    )


def _is_row(item: object) -> TypeGuard[Sequence[object]]:
    return isinstance(item, Sequence) and not isinstance(item, str | bytes)


def _entries(weights: Weights) -> list[tuple[tuple[int, ...], object]]:
    """Every weight with its location: (i,) in a vector, (k, j) in a matrix."""
    out: list[tuple[tuple[int, ...], object]] = []
    for i, item in enumerate(weights):
        if _is_row(item):
            out.extend(((i, j), w) for j, w in enumerate(item))
        else:
            out.append(((i,), item))
    return out


def _copy(weights: Weights) -> list[Any]:
    return [
        [float(w) for w in item] if isinstance(item, Sequence) else float(item) for item in weights
    ]


def _visible(uow: UnitOfWork, model: Model | None, actor: Principal) -> Model:
    """The owner and, for a study's aggregated model, every member of the study read a model;
    for anyone else, the admin included, it does not exist."""
    if model is None:
        raise NotFoundError("model")
    if actor.owns(model.owner_site_id):
        return model
    if (
        model.study_id is not None
        and actor.site_id is not None
        and uow.studies.is_member(model.study_id, actor.site_id)
    ):
        return model
    raise NotFoundError("model")


def get_model(uow: UnitOfWork, *, model_id: str, actor: Principal) -> Model:
    """A model of the caller's site, or of a study it belongs to; others are 404 (for the
    admin, every model)."""
    if not looks_like_id(model_id):
        raise NotFoundError("model")
    with uow:
        return _visible(uow, uow.models.get(model_id), actor)


def list_models(uow: UnitOfWork, *, actor: Principal, limit: int, offset: int) -> ModelPage:
    """The caller's models, newest first (403 for the admin, which owns none)."""
    owner = actor.require_site()
    with uow:
        return ModelPage(
            items=uow.models.list_page(owner_site_id=owner, limit=limit, offset=offset),
            total=uow.models.count(owner_site_id=owner),
        )


def predict(
    uow: UnitOfWork, *, model_id: str, actor: Principal, rows: Sequence[Mapping[str, Any]]
) -> list[Prediction]:
    """Score raw rows; a missing or invalid cell is a 422 naming its row and column."""
    model = get_model(uow, model_id=model_id, actor=actor)
    spec = PreprocessingSpec.from_dict(model.preprocessing)
    fitted = model_from_dict(model.body)
    try:
        return predict_rows(
            fitted, spec, rows, loss=model.loss, labels=LabelTask.from_label(model.label)
        )
    except InvalidRowsError as exc:
        raise InvalidInputError(
            f"cannot score the rows: {exc}",
            errors=[
                {"loc": ["body", "rows", e.row, e.column], "msg": e.reason} for e in exc.errors
            ],
        ) from exc


def export_model(uow: UnitOfWork, *, model_id: str, actor: Principal) -> dict[str, Any]:
    """The self-contained export document (:func:`service.domain.models.export.build_export`)
    of a binary, multi-class or regression model."""
    model = get_model(uow, model_id=model_id, actor=actor)
    return build_export(
        model_id=model.id,
        source=model.source,
        mechanism=model.mechanism,
        loss=model.loss,
        feature_names=model.feature_names,
        preprocessing=model.preprocessing,
        body=model.body,
        privacy=model.privacy,
        label=model.label,
        created_at=model.created_at,
    )


#: Export formats: PrivFit's JSON document, a scikit-learn Pipeline saved with skops, ONNX.
EXPORT_FORMATS = ("json", "skops", "onnx")


def export_model_file(
    uow: UnitOfWork, *, model_id: str, actor: Principal, export_format: str
) -> bytes:
    """The model as a skops archive or an ONNX file (:mod:`service.domain.models.standard_export`);
    a model standard steps cannot express is a 422 naming the reason."""
    document = export_model(uow, model_id=model_id, actor=actor)
    try:
        if export_format == "skops":
            return to_skops(document)
        if export_format == "onnx":
            return to_onnx(document)
    except StandardExportError as exc:
        raise InvalidInputError(
            str(exc), errors=[{"loc": ["query", "format"], "msg": str(exc)}]
        ) from exc
    raise InvalidInputError(
        f"unknown export format {export_format!r}; choose one of " + ", ".join(EXPORT_FORMATS),
        errors=[{"loc": ["query", "format"], "msg": "unknown format"}],
    )


def upload_model(
    uow: UnitOfWork, *, upload: UploadedModel, actor: Principal, context: AuditContext
) -> Model:
    """Store a site's own linear model with its declared claim (never verified)."""
    owner = actor.require_site()
    body = _released_body(upload)
    with uow:
        model = uow.models.add(
            Model(
                id=new_id(),
                owner_site_id=owner,
                name=upload.name,
                source="upload",
                mechanism=upload.claim.mechanism if upload.claim is not None else None,
                loss=upload.loss,
                feature_names=list(upload.spec.feature_names()),
                preprocessing=upload.spec.to_dict(),
                body=body,
                label=dict(upload.label),
                privacy=upload_privacy_record(upload.claim),
            )
        )
        audit.record(
            uow,
            action="model.uploaded",
            actor=actor,
            context=context,
            subject_type="model",
            subject_id=model.id,
        )
        uow.commit()
        return model


#: How the encoded width d is counted, for messages.
_ENCODED = "numeric: 1 each, categorical: one per category, plus the intercept"


def _released_body(upload: UploadedModel) -> dict[str, Any]:
    """The stored model JSON: a linear model (binary, regression) or a multi-class one whose
    shape matches the label and the feature spec; a 422 naming ``weights`` otherwise."""
    expected = upload.spec.n_features
    task = upload.task
    rows = [item for item in upload.weights if isinstance(item, Sequence)]
    if task.task == "multiclass":
        k = len(task.classes)
        if len(rows) != len(upload.weights):
            _shape_error(
                f"a model of {task.describe()} takes one row of {expected} weights per class "
                f"({k} rows, row k scoring classes[k]), not one list of numbers",
                [{"loc": ["body", "weights"], "msg": f"expected {k} rows of {expected} weights"}],
            )
        if len(rows) != k:
            _shape_error(
                f"the model has {len(rows)} rows of weights but its label declares {k} classes "
                "(one row per class, row k scoring classes[k])",
                [{"loc": ["body", "weights"], "msg": f"expected {k} rows"}],
            )
        bad = [i for i, row in enumerate(rows) if len(row) != expected]
        if bad:
            _shape_error(
                f"{len(bad)} row(s) of weights do not have {expected} weights: the feature spec "
                f"encodes {expected} features ({_ENCODED})",
                [
                    {"loc": ["body", "weights", i], "msg": f"expected {expected} weights"}
                    for i in bad[:20]
                ],
            )
        return MulticlassModel(coef=_array(upload.weights)).to_dict()
    if rows:
        _shape_error(
            f"a model of {task.describe()} takes one list of {expected} weights, not rows of "
            "weights (rows are for a label with classes)",
            [{"loc": ["body", "weights"], "msg": f"expected {expected} weights"}],
        )
    if len(upload.weights) != expected:
        _shape_error(
            f"the model has {len(upload.weights)} weights but the feature spec encodes "
            f"{expected} features ({_ENCODED})",
            [{"loc": ["body", "weights"], "msg": f"expected {expected} weights"}],
        )
    try:
        return model_from_dict(LinearModel(coef=_array(upload.weights)).to_dict()).to_dict()
    except ValueError as exc:
        raise InvalidInputError(
            f"invalid weights: {exc}", errors=[{"loc": ["body", "weights"], "msg": str(exc)}]
        ) from exc


def _shape_error(detail: str, errors: list[dict[str, Any]]) -> NoReturn:
    raise InvalidInputError(detail, errors=errors)


def _array(values: Weights) -> Any:
    import numpy as np

    return np.asarray(values, dtype=np.float64)
