"""Datasets and their budget ledger: request and response models (issue 4, docs/design.md §5).

The upload spec arrives as the JSON ``spec`` part of a multipart request. Its shape is checked
here; the rules that need explanation (bounds must be declared, caps within the server
maximum, …) are checked in :func:`service.domain.datasets.spec.build_spec` so that every client
gets the same precise message.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictInt, StrictStr

from service.api.schemas.base import RequestModel, ResponseModel
from service.db.models import Dataset
from service.domain.datasets.labels import LabelTask
from service.domain.datasets.spec import BudgetLimits, DatasetSpec, FeatureInput, build_spec
from service.domain.ledger.budgets import BudgetStatus
from service.domain.ranges import MIN_EPSILON

__all__ = [
    "BudgetCaps",
    "BudgetIn",
    "BudgetRead",
    "CategoricalFeatureIn",
    "DatasetCreate",
    "DatasetLabelIn",
    "DatasetList",
    "DatasetRead",
    "IngestRead",
    "LedgerChargeRead",
    "NumericFeatureIn",
    "feature_inputs",
]

_COLUMN = Annotated[StrictStr, Field(min_length=1, max_length=1000)]


_LABEL_VALUE = StrictStr | StrictInt | StrictBool


class DatasetLabelIn(RequestModel):
    """The label column and what it holds, in one of three forms (a mixture is a 422 naming
    each field that does not belong):

    * **binary**: `positive` and `negative` (without `negative`, the earlier form, an upload is read
      only when the column holds exactly one value besides `positive`);
    * **multi-class**: `classes`, 3 to the server's `max_classes` (default 100) distinct values
      in a public order (class k is `classes[k]`; a predicted class is answered by its
      value). A list of exactly two is the binary form with `negative = classes[0]` and
      `positive = classes[1]`, and is stored and shown as such. A row of no declared class is
      refused (422 `invalid-label-values`, counting rows, never showing values);
    * **numeric** (regression): finite public bounds `lower` < `upper`. A value outside them
      is clipped to the nearer bound, and the ingest report counts the rows clipped
      (`label_clipped_rows`); a value that is not a number is refused like one in a numeric
      feature. Predictions are numbers within [lower, upper]."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"column": "income", "positive": ">50K", "negative": "<=50K"},
                {
                    "column": "marital-status",
                    "classes": ["Never-married", "Married-civ-spouse", "Divorced", "Widowed"],
                },
                {"column": "hours-per-week", "lower": 1, "upper": 99},
            ]
        }
    )

    column: _COLUMN
    positive: _LABEL_VALUE | None = Field(
        default=None,
        description="Binary: the positive class. Compared as text, exactly (case and spaces "
        "count): integers in decimal, booleans as 'True'/'False'.",
    )
    negative: _LABEL_VALUE | None = Field(
        default=None,
        description="Binary: the negative class, compared like `positive`. Declare it: without "
        "it an upload whose label column holds more than one other value is refused.",
    )
    classes: list[_LABEL_VALUE] | None = Field(
        default=None,
        max_length=1000,
        description="Multi-class: the classes in their public order, compared like "
        "`positive`; two classes are the binary form (negative first).",
    )
    lower: float | None = Field(
        default=None,
        description="Numeric label: its public lower bound (values below are clipped to it).",
    )
    upper: float | None = Field(
        default=None,
        description="Numeric label: its public upper bound (values above are clipped to it).",
    )


class NumericFeatureIn(RequestModel):
    """A numeric column; values are clamped to the public bounds [lower, upper]."""

    type: Literal["numeric"]
    column: _COLUMN
    lower: float | None = Field(
        default=None,
        description="Public lower bound. Required: PrivFit never reads bounds from the data.",
    )
    upper: float | None = Field(
        default=None,
        description="Public upper bound. Required: PrivFit never reads bounds from the data.",
    )


class CategoricalFeatureIn(RequestModel):
    """A categorical column one-hot encoded against the declared list; other values map to an
    all-zero block."""

    type: Literal["categorical"]
    column: _COLUMN
    categories: list[StrictStr | StrictInt] = Field(
        description="The public category list (integers are compared in decimal)."
    )


FeatureIn = Annotated[NumericFeatureIn | CategoricalFeatureIn, Field(discriminator="type")]


def feature_inputs(features: list[FeatureIn]) -> list[FeatureInput]:
    """The declared features as the domain reads them (categories compared as text)."""
    out: list[FeatureInput] = []
    for f in features:
        if isinstance(f, NumericFeatureIn):
            out.append(FeatureInput(column=f.column, type="numeric", lower=f.lower, upper=f.upper))
        else:
            categories = tuple(str(c) for c in f.categories)
            out.append(FeatureInput(column=f.column, type="categorical", categories=categories))
    return out


class BudgetIn(RequestModel):
    """The dataset's privacy budget caps; each at most the server's maximum."""

    epsilon: float = Field(
        ge=MIN_EPSILON, description="Total ε of every fit on this dataset (at least 1e-06)."
    )
    delta: float = Field(default=0.0, ge=0, lt=1, description="Total δ.")


_WORKCLASS: dict[str, Any] = {
    "column": "workclass",
    "type": "categorical",
    "categories": ["Private", "Self-emp-not-inc", "Federal-gov"],
}
_MARITAL_STATUS: dict[str, Any] = {
    "column": "marital-status",
    "type": "categorical",
    "categories": ["Never-married", "Married-civ-spouse", "Divorced"],
}


def _adult_example(
    name: str, label: dict[str, Any], other: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """An example spec on the Adult census columns: ``age`` and ``other`` as features."""
    return {
        "name": name,
        "label": label,
        "features": [{"column": "age", "type": "numeric", "lower": 17, "upper": 90}, other],
        "budget": {"epsilon": 4.0, "delta": 1e-6},
        **extra,
    }


class DatasetCreate(RequestModel):
    """The ``spec`` part of ``POST /v1/datasets`` (a JSON object). Everything in it is public:
    bounds and categories must be known without looking at the data."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                _adult_example(
                    "adult",
                    {"column": "income", "positive": ">50K", "negative": "<=50K"},
                    _WORKCLASS,
                    missing="error",
                    allow_non_private=False,
                ),
                _adult_example(
                    "adult hours",
                    {"column": "hours-per-week", "lower": 1, "upper": 99},
                    _MARITAL_STATUS,
                ),
                _adult_example(
                    "adult marital status",
                    {"column": "marital-status", "classes": _MARITAL_STATUS["categories"]},
                    _WORKCLASS,
                    missing="error",
                    allow_non_private=False,
                ),
            ]
        },
    )

    name: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    label: DatasetLabelIn
    features: list[FeatureIn] = Field(min_length=1)
    budget: BudgetIn
    missing: Literal["error", "drop"] = Field(
        default="error",
        description="'error': refuse a file with missing cells (422 naming the columns and "
        "counts); 'drop': drop those rows.",
    )
    missing_values: list[StrictStr] | None = Field(
        default=None,
        description="Cell texts that count as missing in a CSV; default "
        "['', '?', 'NA', 'N/A', 'NULL', 'null']. NaN and inf are never missing: in a numeric "
        "column they are an error.",
    )
    allow_non_private: bool = Field(
        default=False, description="Allow the non-private baseline fit on this dataset."
    )
    row_norm: Literal["clip", "scale"] = Field(
        default="clip",
        description="Bring rows into the unit ball by clipping each row (default) or by "
        "dividing every row by the public constant √(#features + 1).",
    )
    positive_fraction: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="Optional public prior of the positive class's frequency (binary labels "
        "only; e.g. from a census; never read from the data). Its majority class, "
        "max(p, 1 − p), is the baseline every fit's expected accuracy is compared with (a "
        "`below_majority_baseline` warning when below), when the site has no public "
        "reference dataset of this spec.",
    )

    def to_domain(self, limits: BudgetLimits, *, max_classes: int) -> DatasetSpec:
        """Validate the rules that need the server's limits; raises ``DatasetSpecError``."""
        return build_spec(
            name=self.name,
            label_column=self.label.column,
            positive=self.label.positive,
            negative=self.label.negative,
            classes=self.label.classes,
            label_lower=self.label.lower,
            label_upper=self.label.upper,
            max_classes=max_classes,
            features=feature_inputs(self.features),
            epsilon=self.budget.epsilon,
            delta=self.budget.delta,
            limits=limits,
            missing=self.missing,
            missing_values=self.missing_values,
            allow_non_private=self.allow_non_private,
            row_norm=self.row_norm,
            positive_fraction=self.positive_fraction,
        )


class BudgetCaps(ResponseModel):
    """The dataset's (ε, δ) caps."""

    epsilon: float
    delta: float


class IngestRead(ResponseModel):
    """How the upload was read (the owner's own metadata)."""

    format: Literal["csv", "parquet"]
    rows_read: int
    rows_dropped: int = Field(description="Rows dropped for missing values ('missing': 'drop').")
    unknown_category_rows: dict[str, int] = Field(
        description="Per categorical column, rows whose value is not in the declared list "
        "(encoded as an all-zero block). A high count often means a typo or stray whitespace."
    )
    label_clipped_rows: int | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="A numeric label only: the rows whose value was outside [lower, upper] "
        "and was clipped to the nearer bound (absent for class labels).",
    )


class DatasetRead(ResponseModel):
    """A dataset's metadata. Only its owner can read it (not the admin key)."""

    id: str = Field(description="The dataset's id (32 hex digits).")
    name: str
    owner: str = Field(description="The id of the owning site.")
    n_rows: int
    n_features: int = Field(description="Columns of the design matrix, intercept included.")
    task: Literal["binary", "multiclass", "regression"] = Field(
        default="binary",
        description="What the label holds: two classes, 3 or more classes (`spec.label."
        "classes`), or a number within public bounds (`spec.label.lower`/`upper`).",
    )
    feature_names: list[str] = Field(
        description="Names of the design matrix's columns (e.g. `workclass=Private`)."
    )
    spec: dict[str, Any] = Field(description="The spec as stored (normalised).")
    budget: BudgetCaps
    allow_non_private: bool
    ingest: IngestRead | None = None
    created_at: datetime
    deleted_at: datetime | None = Field(
        default=None,
        description="Set once the dataset was deleted: its content is gone, its ledger kept.",
    )

    @classmethod
    def from_row(cls, row: Dataset) -> DatasetRead:
        spec = dict(row.spec)
        budget = spec.get("budget", {})
        return cls(
            id=row.id,
            name=row.name,
            owner=row.owner_site_id,
            n_rows=row.n_rows,
            n_features=row.n_features,
            task=LabelTask.from_label(spec.get("label")).task,
            feature_names=list(row.feature_names),
            spec=spec,
            budget=BudgetCaps(epsilon=budget["epsilon"], delta=budget["delta"]),
            allow_non_private=row.allow_non_private,
            ingest=None if row.ingest is None else IngestRead.model_validate(row.ingest),
            created_at=row.created_at,
            deleted_at=row.deleted_at,
        )


class DatasetList(ResponseModel):
    """One page of datasets."""

    items: list[DatasetRead]
    total: int
    limit: int
    offset: int


class LedgerChargeRead(ResponseModel):
    """One charge against a dataset's budget."""

    id: str
    job_id: str | None = Field(description="The job that spent it (None for a direct charge).")
    epsilon: float
    delta: float
    mechanism: str
    state: Literal["charged", "refunded"] = Field(
        description="`refunded`: the job was cancelled while still queued."
    )
    created_at: datetime
    refunded_at: datetime | None = None


class BudgetRead(ResponseModel):
    """The dataset's budget: caps, amounts spent (charges not refunded) and what remains.

    The ledger is kept in exact integer units (1e-9 ε, 1e-15 δ); the floats here are those
    amounts rounded once to the nearest double."""

    dataset_id: str
    epsilon_total: float
    epsilon_spent: float
    epsilon_remaining: float
    delta_total: float
    delta_spent: float
    delta_remaining: float
    charges: list[LedgerChargeRead]

    @classmethod
    def from_status(cls, state: BudgetStatus) -> BudgetRead:
        return cls(
            dataset_id=state.dataset_id,
            epsilon_total=state.epsilon_total,
            epsilon_spent=state.epsilon_spent,
            epsilon_remaining=state.epsilon_remaining,
            delta_total=state.delta_total,
            delta_spent=state.delta_spent,
            delta_remaining=state.delta_remaining,
            charges=[
                LedgerChargeRead(
                    id=c.id,
                    job_id=c.job_id,
                    epsilon=c.epsilon,
                    delta=c.delta,
                    mechanism=c.mechanism,
                    state=c.state,  # type: ignore[arg-type]
                    created_at=c.created_at,
                    refunded_at=c.refunded_at,
                )
                for c in state.charges
            ],
        )
