"""Models: read, list, predict, export, upload (``/v1/models``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictStr, WithJsonSchema

from service.api.schemas.base import RequestModel, ResponseModel
from service.api.schemas.datasets import CategoricalFeatureIn, DatasetLabelIn, NumericFeatureIn
from service.db.models import Model
from service.domain.datasets.labels import LabelTask
from service.domain.models.catalog import MAX_ABS_WEIGHT
from service.domain.models.predict import MAX_ABS_SCORE, Prediction

__all__ = [
    "Coefficient",
    "ModelExportRead",
    "ModelList",
    "ModelRead",
    "ModelSummary",
    "ModelUpload",
    "PredictRequest",
    "PredictResponse",
    "PredictionRead",
    "PrivacyClaimIn",
    "PrivacyRecordRead",
]

#: Rows scored per predict request.
MAX_PREDICT_ROWS = 1_000

FeatureIn = Annotated[NumericFeatureIn | CategoricalFeatureIn, Field(discriminator="type")]
#: One weight of an uploaded model: finite, |w| ≤ MAX_ABS_WEIGHT.
_WEIGHT_SCHEMA: dict[str, Any] = {
    "type": "number",
    "minimum": -MAX_ABS_WEIGHT,
    "maximum": MAX_ABS_WEIGHT,
}
#: An uploaded model's weights: a vector, or one row per class. The schema states the bounds;
#: they are checked by the domain (``catalog.build_upload``), whose 422 names each bad weight
#: by its place (``["body", "weights", i]`` or ``[..., k, j]``) rather than by union member.
UploadWeights = Annotated[
    list[float] | list[list[float]],
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": _WEIGHT_SCHEMA, "minItems": 1},
                {
                    "type": "array",
                    "items": {"type": "array", "items": _WEIGHT_SCHEMA, "minItems": 1},
                    "minItems": 1,
                },
            ]
        }
    ),
]


class Coefficient(ResponseModel):
    """One weight of a linear model, by the name of its design-matrix column."""

    feature: str
    weight: float


def _unset(value: object) -> bool:
    """Members of another kind of label are left out of the JSON."""
    return value is None


class LabelRead(ResponseModel):
    """What the model predicts. Binary: `positive` means the label column equals this value
    (`negative` the other class, when declared). Multi-class: `classes` in their declared
    order (score k is `classes[k]`'s). Regression: the public bounds `lower`/`upper` that
    every predicted value lies within."""

    column: str
    positive: str | None = Field(default=None, exclude_if=_unset)
    negative: str | None = Field(default=None, exclude_if=_unset)
    classes: list[str] | None = Field(default=None, exclude_if=_unset)
    lower: float | None = Field(default=None, exclude_if=_unset)
    upper: float | None = Field(default=None, exclude_if=_unset)


class PrivacyRecordRead(ResponseModel):
    """The model's privacy record. For models PrivFit fitted (`verified: true`) it states what
    was protected and how; for uploaded models it holds the uploader's claim, which PrivFit did
    not verify (`verified: false`, `kind: declared_claim`)."""

    model_config = ConfigDict(from_attributes=True, extra="allow")

    kind: Literal["fit", "declared_claim", "aggregate", "federated"]
    verified: bool
    guarantee: Literal["differential_privacy", "none", "declared"]
    statement: str = Field(description="The guarantee in one sentence.")
    mechanism: str | None
    epsilon: float | None = Field(description="Verified ε (None: no DP, or only a claim).")
    delta: float | None
    unit: dict[str, Any] | None = Field(
        default=None, description="The unit protected: one row of the dataset, replace-one."
    )
    datasets: list[dict[str, Any]] | None = None
    calibration: dict[str, Any] | None = None
    expected_noise_norm: float | str | None = None
    composition: dict[str, Any] | None = None
    randomness: dict[str, Any] | None = Field(
        default=None, description="`csprng`, or `test_seed` when the server ran in test mode."
    )
    claim: dict[str, Any] | None = Field(
        default=None, description="For uploads: the declared claim, as declared."
    )
    software: dict[str, Any]
    requested_mechanism: str | None = Field(
        default=None, description="`auto` when PrivFit chose the mechanism (see `auto`)."
    )
    auto: dict[str, Any] | None = Field(
        default=None,
        description="For `mechanism: auto`: what was chosen and why (every candidate's "
        "predicted accuracy on the public reference).",
    )
    expected_accuracy: dict[str, Any] | None = Field(
        default=None,
        description="The accuracy band expected at submission (simulated on a public "
        "reference) next to the majority-class baseline; on a numeric label the RMSE band "
        '(`metric: "rmse"`) next to the mean\'s RMSE (`mean_baseline_rmse`).',
    )
    warnings: list[dict[str, Any]] | None = Field(
        default=None,
        description="Warnings fixed at submission, e.g. `below_majority_baseline` or "
        "`worse_than_mean_baseline` (numeric label); for "
        "`mechanism: auto` (or, on a multi-class or numeric label, λ `auto`) without a "
        "public baseline, set when the job ran, against the privately estimated baseline "
        "(`private_baseline`).",
    )
    private_baseline: dict[str, Any] | None = Field(
        default=None,
        description="For `mechanism: auto` without a public reference or declared "
        "`positive_fraction`: the noisy count of positive labels released for the "
        "majority-class baseline (discrete Laplace, sensitivity 1, its ε a public slice of "
        "the request, charged with the fit in the same job) and the baseline derived from it. "
        "On a multi-class label (mechanism `auto`, no public reference): the noisy class "
        "counts (L1 sensitivity 2); on a numeric label: the noisy Σy and Σy² of the labels "
        "mapped onto [−1, 1] (sensitivities 2 and 1, ε/2 each) and the mean's RMSE.",
    )


class ModelSummary(ResponseModel):
    """A model in a list."""

    id: str
    source: Literal["fit", "upload", "aggregate", "federated"]
    mechanism: str | None
    loss: str | None
    task: Literal["binary", "multiclass", "regression"] = Field(
        default="binary", description="What the model predicts (see `ModelRead.task`)."
    )
    n_features: int
    epsilon: float | None = Field(description="Verified ε; None for no DP or a mere claim.")
    delta: float | None
    verified: bool
    created_at: datetime

    @classmethod
    def from_row(cls, row: Model) -> ModelSummary:
        privacy = dict(row.privacy)
        return cls(
            id=row.id,
            source=row.source,  # type: ignore[arg-type]
            mechanism=row.mechanism,
            loss=row.loss,
            task=LabelTask.from_label(row.label).task,
            n_features=len(row.feature_names),
            epsilon=privacy.get("epsilon"),
            delta=privacy.get("delta"),
            verified=bool(privacy.get("verified")),
            created_at=row.created_at,
        )


class ModelRead(ResponseModel):
    """A model: coefficients with feature names, preprocessing and privacy record."""

    id: str
    source: Literal["fit", "upload", "aggregate", "federated"] = Field(
        description="`fit`: fitted by PrivFit; `upload`: a site's own classifier; "
        "`aggregate`: a study's combination of its members' models; `federated`: a study's "
        "multiparty fit across its members' granted datasets."
    )
    mechanism: str | None
    loss: str | None
    task: Literal["binary", "multiclass", "regression"] = Field(
        default="binary",
        description="What the model predicts, by its label: two classes, one of `label."
        "classes`, or a number within `label.lower`/`upper`.",
    )
    label: LabelRead | None
    feature_names: list[str]
    coefficients: list[Coefficient] | None = Field(
        description="The weights by feature (None for models that are not one linear map, "
        "such as stacked and multi-class models: see `model`, whose `coef` has one row per "
        "class). A regression model's weights score in the label's [−1, 1] units: its "
        "prediction is lower + (clip(wᵀx, −1, 1) + 1)/2 · (upper − lower)."
    )
    model: dict[str, Any] = Field(description="The released model as JSON.")
    preprocessing: dict[str, Any] = Field(
        description="The public preprocessing that `predict` applies to raw rows."
    )
    privacy: PrivacyRecordRead
    dataset_id: str | None
    job_id: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Model) -> ModelRead:
        body = dict(row.body)
        coefficients = None
        if body.get("kind") == "linear":
            coefficients = [
                Coefficient(feature=name, weight=float(w))
                for name, w in zip(row.feature_names, body["coef"], strict=True)
            ]
        return cls(
            id=row.id,
            source=row.source,  # type: ignore[arg-type]
            mechanism=row.mechanism,
            loss=row.loss,
            task=LabelTask.from_label(row.label).task,
            label=None if row.label is None else LabelRead.model_validate(row.label),
            feature_names=list(row.feature_names),
            coefficients=coefficients,
            model=body,
            preprocessing=dict(row.preprocessing),
            privacy=PrivacyRecordRead.model_validate(row.privacy),
            dataset_id=row.dataset_id,
            job_id=row.job_id,
            created_at=row.created_at,
        )


class ModelList(ResponseModel):
    """One page of models, newest first."""

    items: list[ModelSummary]
    total: int
    limit: int
    offset: int


class PredictRequest(RequestModel):
    """Raw rows to score, keyed by column name (extra columns are ignored)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "rows": [
                        {
                            "age": 39,
                            "workclass": "State-gov",
                            "education-num": 13,
                            "hours-per-week": 40,
                        }
                    ]
                }
            ]
        }
    )

    rows: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_PREDICT_ROWS)


class PredictionRead(ResponseModel):
    """One row's prediction, by the model's task. Binary (as before): `positive`, `score`
    and `probability`. Multi-class: `predicted_class`, `scores` and `probabilities` (one per
    declared class, in the label's order). Regression: `value` within the label's bounds and
    its `score`. Members of another task are left out (the binary form is unchanged)."""

    positive: bool | None = Field(
        description="score > 0: the label's positive class (binary models; null otherwise)."
    )
    score: float | None = Field(
        description="wᵀx for the preprocessed row, always finite: clipped to "
        f"±{MAX_ABS_SCORE:,.0f} (binary and regression models; for regression in the "
        "label's [−1, 1] units)."
    )
    probability: float | None = Field(
        description="σ(score) in [0, 1], computed stably; only for the logistic loss."
    )
    predicted_class: str | None = Field(
        default=None,
        description="Multi-class: the declared class of the largest score (the first on a tie).",
    )
    scores: list[float] | None = Field(
        default=None,
        description="Multi-class: w_kᵀx per declared class, finite (clipped to "
        f"±{MAX_ABS_SCORE:,.0f}).",
    )
    probabilities: list[float] | None = Field(
        default=None,
        description="Multi-class: softmax of `scores` (per declared class; they sum to 1).",
    )
    value: float | None = Field(
        default=None,
        description="Regression: the predicted number, lower + (clip(score, −1, 1) + 1)/2 · "
        "(upper − lower), always within the label's public bounds.",
    )

    @classmethod
    def from_domain(cls, p: Prediction) -> PredictionRead:
        """The prediction; only the members of its task are set (dump with
        ``exclude_unset`` to leave the others out: the binary form is unchanged)."""
        members: dict[str, Any] = {
            "positive": p.positive,
            "score": p.score,
            "probability": p.probability,
        }
        members.update(
            (key, value)
            for key, value in (
                ("predicted_class", p.predicted_class),
                ("scores", p.scores),
                ("probabilities", p.probabilities),
                ("value", p.value),
            )
            if value is not None
        )
        return cls.model_validate(members)


class PredictResponse(ResponseModel):
    """One prediction per row, in request order."""

    predictions: list[PredictionRead]


class PrivacyClaimIn(RequestModel):
    """The uploader's own privacy claim. Stored and shown as declared, never verified."""

    epsilon: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, ge=0, lt=1, allow_inf_nan=False)
    mechanism: str | None = Field(default=None, min_length=1, max_length=64)
    description: str | None = Field(default=None, max_length=2000)


class ModelUpload(RequestModel):
    """A linear model a site trained itself: weights over the encoded features, for any of
    a dataset spec's three label forms.

    The feature spec has the shape of a dataset spec's `features`/`label`: numeric columns
    with public bounds (mapped onto [0, 1]) and categorical columns with their category list
    (one-hot), then the intercept and the row-norm step. `weights` has one entry per encoded
    feature, in that order (see `feature_names` in the response); for a multi-class label,
    one such row per declared class. A model exported by PrivFit (`format=json`) uploads back
    with its `label`, its `preprocessing` `features`/`row_norm` and its `weights.coef`, and
    predicts the same."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "label": {"column": "income", "positive": ">50K"},
                    "features": [
                        {"column": "age", "type": "numeric", "lower": 17, "upper": 90},
                        {
                            "column": "sex",
                            "type": "categorical",
                            "categories": ["Female", "Male"],
                        },
                    ],
                    "weights": [1.2, -0.3, 0.4, -1.1],
                    "loss": "logistic",
                    "privacy_claim": {
                        "epsilon": 1.0,
                        "delta": 0.0,
                        "mechanism": "objective_perturbation",
                        "description": "Fitted in-house with diffprivlib 0.6.",
                    },
                },
                {
                    "label": {"column": "workclass", "classes": ["Private", "Self-emp", "Gov"]},
                    "features": [{"column": "age", "type": "numeric", "lower": 17, "upper": 90}],
                    "weights": [[0.5, 0.2], [-0.1, 0.3], [0.4, -0.6]],
                    "loss": "logistic",
                },
                {
                    "label": {"column": "hours-per-week", "lower": 1, "upper": 99},
                    "features": [{"column": "age", "type": "numeric", "lower": 17, "upper": 90}],
                    "weights": [0.6, -0.4],
                    "loss": "squared",
                },
            ]
        }
    )

    label: DatasetLabelIn
    features: list[FeatureIn] = Field(min_length=1)
    row_norm: Literal["clip", "scale"] = "clip"
    weights: UploadWeights = Field(
        description="Binary label: one weight per encoded feature, the positive class when "
        "wᵀx > 0. Multi-class label (`classes`): one row of those weights per declared class, "
        "in the label's order (row k scores `classes[k]`; the class of the largest score is "
        "predicted). Numeric label (`lower`/`upper`): one weight per encoded feature scoring "
        "in the label's [−1, 1] units, not in label units: the prediction is lower + "
        "(clip(wᵀx, −1, 1) + 1)/2 · (upper − lower), as for a model PrivFit fits and as its "
        "export's `weights.coef` and `decision_rule` state. Each weight finite with "
        f"|w| ≤ {MAX_ABS_WEIGHT:,.0f}.",
    )
    loss: Literal["logistic", "huber", "squared", "other"] | None = Field(
        default=None,
        description="The loss it was trained with: `logistic` (the default for a class "
        "label: σ(score), or the softmax for classes, is a probability), `huber` or `other` "
        "for a binary label; `logistic` (multinomial) or `other` for classes; `squared` (the "
        "default for a numeric label), `huber` or `other` for a numeric label. Another "
        "combination is a 422 naming `loss`.",
    )
    privacy_claim: PrivacyClaimIn | None = None


class ModelExportRead(ResponseModel):
    """A self-contained JSON document of the model (see the README for scikit-learn)."""

    model_config = ConfigDict(extra="allow")

    format: StrictStr = Field(examples=["privfit.model"])
    format_version: int
    model_id: str
    created_at: str | None
    source: str
    mechanism: str | None
    loss: str | None
    task: Literal["binary", "multiclass", "regression"] = Field(
        default="binary", description="The label's task: what `weights` and `classes` hold."
    )
    label: dict[str, Any] | None
    classes: list[int] | list[str] | None = Field(
        description="Binary: [−1, 1] (1 is the label's positive value). Multi-class: the "
        "declared classes, in order (row k of `weights.coef` scores `classes[k]`). "
        "Regression: null."
    )
    feature_names: list[str]
    weights: dict[str, Any] | None = Field(
        description="`coef` (one per feature) and `intercept` (0: the intercept is a feature); "
        "multi-class: `coef` has one row per declared class and `intercept` one 0 per class; "
        "regression: `coef` scores in the label's [−1, 1] units (see `decision_rule`). Null "
        "for models that are not linear."
    )
    model: dict[str, Any]
    preprocessing: dict[str, Any]
    projection_matrix: list[list[float]] | None
    decision_rule: str
    privacy: dict[str, Any]
