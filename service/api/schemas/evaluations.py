"""Private evaluations (``POST /v1/models/{id}/evaluations``) and their results."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ConfigDict, Field

from service.api.schemas.base import RequestModel, ResponseModel
from service.api.schemas.fits import BudgetLeft, FitCost
from service.db.models import Evaluation
from service.domain.models.evaluations import EvaluationQuote
from service.domain.ranges import MAX_EPSILON, MIN_EPSILON

__all__ = [
    "EvaluationCreate",
    "EvaluationList",
    "EvaluationQuoteRead",
    "EvaluationRead",
]


class EvaluationCreate(RequestModel):
    """Evaluate a model on a dataset the caller owns, spending ε of that dataset's budget."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"dataset_id": "0" * 32, "epsilon": 0.1}]}
    )

    dataset_id: str = Field(
        min_length=1,
        max_length=64,
        description="A dataset of the calling site with the model's spec (same features, "
        "preprocessing and label).",
    )
    epsilon: float = Field(
        ge=MIN_EPSILON,
        le=MAX_EPSILON,
        description="The evaluation's total ε (δ = 0). Binary label: half to the confusion "
        "matrix, half to the score histograms behind the ROC curve; multi-class: all to the "
        "K × K confusion matrix; numeric label: ε/5 to each of Σr², Σ|r|, Σy, Σy² and ε/15 to "
        "each of Σr⁴, Σy³, Σy⁴ (residuals r and labels y in the label's [-1, 1] units).",
    )


class EvaluationQuoteRead(ResponseModel):
    """A dry run: what the evaluation would cost. Nothing was spent."""

    dry_run: bool = True
    model_id: str
    dataset_id: str
    cost: FitCost
    epsilon_split: dict[str, float] = Field(description="How ε is divided between releases.")
    budget: BudgetLeft
    warnings: list[str]

    @classmethod
    def from_quote(cls, quote: EvaluationQuote) -> EvaluationQuoteRead:
        return cls(
            model_id=quote.model_id,
            dataset_id=quote.dataset_id,
            cost=FitCost(epsilon=quote.epsilon, delta=quote.delta),
            epsilon_split=quote.epsilon_split,
            budget=BudgetLeft(
                remaining_epsilon=quote.remaining_epsilon,
                remaining_delta=quote.remaining_delta,
                sufficient=quote.epsilon <= quote.remaining_epsilon,
            ),
            warnings=quote.warnings,
        )


class EvaluationRead(ResponseModel):
    """A released private evaluation: for a binary label the noisy confusion matrix, metrics
    with intervals that include the noise and the DP ROC curve; for a multi-class label the
    noisy K × K confusion matrix with per-class metrics; for a numeric label private RMSE, MAE
    and R² with intervals; and its privacy record."""

    id: str = Field(description="The id of the job that computed it.")
    model_id: str
    dataset_id: str
    epsilon: float
    result: dict[str, Any] = Field(
        description="Binary label: `confusion_matrix` (noisy tp, fp, fn, tn), `metrics` "
        "(estimate and interval of accuracy, precision, recall, f1), `confidence`, `roc` (noisy "
        "per-class histograms over public bins, fpr, tpr, auc), `epsilon_split`, `noise`. "
        "Multi-class (`task`: `multiclass`): `classes` in declared order, `confusion_matrix` "
        "(`counts`, rows the true class, columns the class of highest score), `metrics` "
        "(accuracy, macro_f1), `per_class` (precision, recall, f1 of each class), each with "
        "estimate and interval. Numeric label (`task`: `regression`): `metrics` (rmse and mae "
        "in the label's units, r2; an interval end is null when unbounded), `label_bounds`, "
        "the noisy `sums`, `epsilon_split`, `noise`."
    )
    privacy: dict[str, Any] = Field(description="What was protected, how, and warnings.")
    created_at: datetime

    @classmethod
    def from_row(cls, row: Evaluation) -> EvaluationRead:
        return cls(
            id=row.id,
            model_id=row.model_id,
            dataset_id=row.dataset_id,
            epsilon=row.epsilon,
            result=dict(row.result),
            privacy=dict(row.privacy),
            created_at=row.created_at,
        )


class EvaluationList(ResponseModel):
    """A page of a model's evaluations."""

    items: list[EvaluationRead]
    total: int
    limit: int
    offset: int
