"""Studies, contributions and aggregations (``/v1/studies``, issue 5, docs/design.md §5)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictStr

from service.api.schemas.base import RequestModel, ResponseModel
from service.api.schemas.datasets import DatasetLabelIn, FeatureIn, feature_inputs
from service.api.schemas.fits import BudgetLeft, FitCost
from service.db.models import Model, StudyContribution
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units
from service.domain.ranges import (
    MAX_EPSILON,
    MAX_REGULARIZATION,
    MIN_EPSILON,
    MIN_REGULARIZATION,
)
from service.domain.studies.aggregations import (
    AggregationQuote,
    AggregationRequest,
    FeatureRequest,
    TransferRequest,
)
from service.domain.studies.membership import MAX_MEMBERS, StudySpecInput, StudyView
from service.dp.multisite.aggregation import FeatureMechanism, MetaFeatureKind

__all__ = [
    "AggregationCreate",
    "AverageAggregationIn",
    "ContributionRead",
    "DatasetGrantIn",
    "FeatureAggregationIn",
    "ModelContributionIn",
    "StudyCreate",
    "StudyList",
    "StudyMemberRead",
    "StudyRead",
    "StudyResultRead",
    "StudySpecIn",
    "TransferAggregationIn",
]

#: PrivFit's ids are 32 lowercase hex characters; the pattern is documented so that clients
#: and fuzzers generate well-formed ids (any other string is simply not found).
_ID = Annotated[
    StrictStr,
    Field(min_length=1, max_length=64, json_schema_extra={"pattern": "^[0-9a-f]{32}$"}),
]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]

#: Models one aggregation may combine.
MAX_AGGREGATION_MODELS = 1_000
#: Feature groups of one PST-H transfer, and names in one group.
MAX_FEATURE_GROUPS = 32
MAX_FEATURE_GROUP_SIZE = 512


class StudySpecIn(RequestModel):
    """The features and label every contribution must encode: the shape of a dataset spec's
    `label`, `features` and `row_norm` (public bounds and category lists). The label takes any
    of a dataset spec's three forms (binary, multi-class `classes`, numeric `lower`/`upper`);
    a contribution must declare the same form: the same positive class, the same classes in
    the same order, or the same bounds."""

    label: DatasetLabelIn
    features: list[FeatureIn] = Field(min_length=1)
    row_norm: Literal["clip", "scale"] = "clip"

    def to_domain(self) -> StudySpecInput:
        return StudySpecInput(
            label_column=self.label.column,
            positive=self.label.positive,
            negative=self.label.negative,
            features=feature_inputs(self.features),
            row_norm=self.row_norm,
            classes=self.label.classes,
            lower=self.label.lower,
            upper=self.label.upper,
        )


class StudyCreate(RequestModel):
    """A new study; the caller becomes its coordinator (and a member)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "adult-consortium",
                    "members": ["5f0c6d7e8a9b4c3d2e1f0a9b8c7d6e5f"],
                    "spec": {
                        "label": {"column": "income", "positive": ">50K"},
                        "features": [
                            {"column": "age", "type": "numeric", "lower": 17, "upper": 90},
                            {
                                "column": "sex",
                                "type": "categorical",
                                "categories": ["Female", "Male"],
                            },
                        ],
                    },
                }
            ]
        }
    )

    name: Annotated[StrictStr, Field(min_length=1, max_length=200)]
    members: list[_ID] = Field(
        min_length=1,
        max_length=MAX_MEMBERS + 1,
        description="Ids of the member sites (besides the coordinator, who is always one).",
    )
    spec: StudySpecIn


class ModelContributionIn(RequestModel):
    """Contribute a model the calling site owns (fitted by PrivFit or uploaded)."""

    model_id: _ID


class DatasetGrantIn(RequestModel):
    """Let the study spend up to (ε, δ) of one of the calling site's datasets (used by
    federated fits); the caps must fit within the dataset's own budget caps."""

    dataset_id: _ID
    epsilon_cap: FiniteFloat = Field(ge=MIN_EPSILON, le=MAX_EPSILON)
    delta_cap: FiniteFloat = Field(default=0.0, ge=0, lt=1)


class StudyMemberRead(ResponseModel):
    """A member site and its role."""

    site_id: str
    role: Literal["coordinator", "member"]


class ContributionRead(ResponseModel):
    """A contribution: a model, or a grant on a dataset's budget."""

    id: str
    site_id: str = Field(description="The contributing site.")
    kind: Literal["model", "dataset"]
    model_id: str | None
    dataset_id: str | None
    epsilon_cap: float | None = Field(description="For a grant: the most ε the study may spend.")
    delta_cap: float | None
    epsilon_spent: float | None = Field(
        description="For a grant: the ε the study's federated fits have charged through it."
    )
    delta_spent: float | None
    used: bool = Field(
        description="Used by an aggregation or federated fit: it can no longer be withdrawn."
    )
    created_at: datetime

    @classmethod
    def from_row(cls, row: StudyContribution) -> ContributionRead:
        return cls(
            id=row.id,
            site_id=row.site_id,
            kind=row.kind,  # type: ignore[arg-type]
            model_id=row.model_id,
            dataset_id=row.dataset_id,
            epsilon_cap=None
            if row.epsilon_cap_units is None
            else from_units(row.epsilon_cap_units, EPSILON_UNIT),
            delta_cap=None
            if row.delta_cap_units is None
            else from_units(row.delta_cap_units, DELTA_UNIT),
            epsilon_spent=None
            if row.kind != "dataset"
            else from_units(row.epsilon_spent_units, EPSILON_UNIT),
            delta_spent=None
            if row.kind != "dataset"
            else from_units(row.delta_spent_units, DELTA_UNIT),
            used=row.used_at is not None,
            created_at=row.created_at,
        )


class StudyResultRead(ResponseModel):
    """A model released to the study (readable by every member at `/v1/models/{id}`)."""

    model_id: str
    job_id: str | None
    method: str | None
    guarantee: str | None = Field(description="The result's privacy guarantee, in one word.")
    created_at: datetime

    @classmethod
    def from_row(cls, row: Model) -> StudyResultRead:
        return cls(
            model_id=row.id,
            job_id=row.job_id,
            method=row.mechanism,
            guarantee=(row.privacy or {}).get("guarantee"),
            created_at=row.created_at,
        )


class StudyRead(ResponseModel):
    """A study as its members see it."""

    id: str
    name: str
    coordinator: str = Field(description="The coordinating site's id.")
    members: list[StudyMemberRead]
    spec: dict[str, Any] = Field(description="The label and features, normalised.")
    feature_names: list[str] = Field(description="The encoded features, intercept included.")
    contributions: list[ContributionRead]
    results: list[StudyResultRead]
    created_at: datetime

    @classmethod
    def from_view(cls, view: StudyView) -> StudyRead:
        study = view.study
        return cls(
            id=study.id,
            name=study.name,
            coordinator=study.coordinator_site_id,
            members=[
                StudyMemberRead(site_id=m.site_id, role=m.role)  # type: ignore[arg-type]
                for m in view.members
            ],
            spec=dict(study.spec),
            feature_names=list(study.feature_names),
            contributions=[ContributionRead.from_row(c) for c in view.contributions],
            results=[StudyResultRead.from_row(m) for m in view.results],
            created_at=study.created_at,
        )


class StudyList(ResponseModel):
    """One page of studies, newest first."""

    items: list[StudyRead]
    total: int
    limit: int
    offset: int


class AverageAggregationIn(RequestModel):
    """`average` (seed 000, Alg. 4): the (optionally weighted) average of the contributed
    models' coefficients. Nothing is charged; the result's privacy record lists the guarantee
    each input carried."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {"method": "average"},
                {
                    "method": "average",
                    "models": [
                        "5f0c6d7e8a9b4c3d2e1f0a9b8c7d6e5f",
                        "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
                    ],
                    "weights": [1.0, 3.0],
                },
            ]
        }
    )

    method: Literal["average"]
    models: list[_ID] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_AGGREGATION_MODELS,
        description="Contributed model ids to combine; default: every contributed model.",
    )
    weights: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_AGGREGATION_MODELS,
        description="Public, non-negative weights, one per model in `models` order (or in "
        "contribution order); normalised to sum 1. Default: equal weights.",
    )
    name: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None

    def to_domain(self) -> AggregationRequest:
        return AggregationRequest(
            method=self.method, models=self.models, weights=self.weights, name=self.name
        )


class TransferAggregationIn(RequestModel):
    """`transfer` (hypothesis transfer, seed 003): an ε-DP objective-perturbation fit on the
    coordinator's own target dataset with the regulariser (η/2)‖w − w₀‖² centred on the
    average w₀ of the source models. ε is charged to the target dataset.

    With `feature_groups` it is PST-H (seed 003 Alg. 4): PST-F stacking on the target — the
    rows split at random into a low and a high level; low-level model k is objective
    perturbation on group k's columns with budget q_k·ε and the regulariser centred on w₀
    restricted to group k; the high level is objective perturbation with ε on the other rows —
    released as a stacked model. Its whole cost is still ε, charged to the target.

    In a study of multi-class labels the fit is the K-class multinomial model pulled towards
    the entry-by-entry average of the sources' K × d models; in a study of numeric labels it is
    the Huber-residual fit (`loss: huber`) pulled towards the sources' average, in the labels'
    [−1, 1] units. Both cost ε, calibrated at λ + η. `feature_groups` (PST-H) takes binary
    labels only: its high level stacks the groups' probabilities of the positive class."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "method": "transfer",
                    "target_dataset_id": "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
                    "epsilon": 1.0,
                    "transfer_strength": 0.1,
                },
                {
                    "method": "transfer",
                    "target_dataset_id": "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
                    "epsilon": 1.0,
                    "transfer_strength": 0.1,
                    "feature_groups": [["age", "intercept"], ["color"]],
                    "importance": [2.0, 1.0],
                },
            ]
        }
    )

    method: Literal["transfer"]
    target_dataset_id: _ID = Field(description="A dataset the coordinator owns.")
    source_models: list[_ID] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_AGGREGATION_MODELS,
        description="Contributed model ids whose average is the source w₀; default: all.",
    )
    epsilon: FiniteFloat = Field(
        ge=MIN_EPSILON, le=MAX_EPSILON, description="ε charged to the target dataset."
    )
    transfer_strength: FiniteFloat = Field(
        ge=0, le=1e6, description="η: how strongly the fit is pulled towards the source."
    )
    regularization: FiniteFloat = Field(
        default=0.01, ge=MIN_REGULARIZATION, le=MAX_REGULARIZATION, description="λ."
    )
    loss: Literal["logistic", "huber"] = Field(
        default="logistic",
        description="The loss: `logistic` or `huber` for binary labels, `logistic` (the "
        "multinomial loss) for multi-class labels, `huber` (of the residual) for numeric labels.",
    )
    name: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None
    feature_groups: (
        list[
            Annotated[
                list[Annotated[StrictStr, Field(min_length=1, max_length=200)]],
                Field(min_length=1, max_length=MAX_FEATURE_GROUP_SIZE),
            ]
        ]
        | None
    ) = Field(
        default=None,
        min_length=1,
        max_length=MAX_FEATURE_GROUPS,
        description="PST-H: disjoint, non-empty groups of the study's encoded feature names "
        "(`age`, `color=red`, `intercept`), or of categorical column names standing for their "
        "whole one-hot block. Features in no group are not used by the low level; `intercept` "
        "is a feature like any other (in no group, the high level's own intercept carries the "
        "constant). Default: no groups (plain transfer).",
    )
    importance: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_FEATURE_GROUPS,
        description="PST-H: public importance q_k, one per feature group, > 0, normalised to "
        "sum 1; group k's low-level model gets the budget share q_k·ε. It must be fixed "
        "without looking at the data. Default: equal weights. Needs `feature_groups`.",
    )
    meta_features: Literal["sigmoid", "centered_sigmoid"] | None = Field(
        default=None,
        description="PST-H: the high level's inputs, σ(group score) (`sigmoid`, seed 003, the "
        "default) or 2σ − 1 (`centered_sigmoid`, which avoids the high level collapsing onto "
        "the majority class on unbalanced labels). Needs `feature_groups`.",
    )

    def to_domain(self) -> TransferRequest:
        return TransferRequest(
            target_dataset_id=self.target_dataset_id,
            epsilon=self.epsilon,
            transfer_strength=self.transfer_strength,
            source_models=self.source_models,
            regularization=self.regularization,
            loss=self.loss,
            name=self.name,
            feature_groups=self.feature_groups,
            importance=self.importance,
            meta_features=self.meta_features,
        )


class FeatureAggregationIn(RequestModel):
    """`feature` (seed 000, Alg. 5): stack the site models and fit the meta-level model with a
    DP mechanism on the coordinator's own holdout dataset, whose budget is charged.
    `linear` meta-features x ↦ s·M_f x are released as the linear model s·M_fᵀω; `sigmoid`
    ones (seed 003) as a stacked model. The scale comes from the public site models only."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "method": "feature",
                    "holdout_dataset_id": "0a1b2c3d4e5f60718293a4b5c6d7e8f9",
                    "epsilon": 1.0,
                    "mechanism": "objective_perturbation",
                    "regularization": 0.01,
                    "meta_features": "linear",
                }
            ]
        }
    )

    method: Literal["feature"]
    holdout_dataset_id: _ID = Field(description="A labelled dataset the coordinator owns.")
    source_models: list[_ID] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_AGGREGATION_MODELS,
        description="Contributed model ids to stack; default: all.",
    )
    epsilon: FiniteFloat = Field(
        ge=MIN_EPSILON, le=MAX_EPSILON, description="ε charged to the holdout dataset."
    )
    delta: FiniteFloat = Field(default=0.0, ge=0, lt=1)
    mechanism: FeatureMechanism = "objective_perturbation"
    regularization: FiniteFloat = Field(
        default=0.01,
        ge=MIN_REGULARIZATION,
        le=MAX_REGULARIZATION,
        description="λ of the meta level.",
    )
    meta_features: MetaFeatureKind = "linear"
    loss: Literal["logistic", "huber"] = "logistic"
    name: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None

    def to_domain(self) -> FeatureRequest:
        return FeatureRequest(
            holdout_dataset_id=self.holdout_dataset_id,
            epsilon=self.epsilon,
            delta=self.delta,
            mechanism=self.mechanism,
            regularization=self.regularization,
            meta_features=self.meta_features,
            source_models=self.source_models,
            loss=self.loss,
            name=self.name,
        )


AggregationCreate = Annotated[
    AverageAggregationIn | FeatureAggregationIn | TransferAggregationIn,
    Field(discriminator="method"),
]


class AggregationQuoteRead(ResponseModel):
    """A dry run of an aggregation: what it would charge the coordinator's dataset (nothing
    for `average`) and how it would randomise. Nothing was spent."""

    dry_run: bool = True
    method: str
    dataset_id: str | None = Field(
        description="The coordinator's dataset the aggregation is charged to; null for `average`."
    )
    cost: FitCost
    expected_noise_norm: float | None = Field(
        description="E‖noise‖ of the mechanism's noise vector, where it has a single one."
    )
    composition: str = Field(description="How the aggregation's total (ε, δ) arises.")
    calibration: dict[str, Any] = Field(
        description="The calibration: every noise parameter, named as in the papers."
    )
    budget: BudgetLeft | None = Field(
        description="The charged dataset's remaining budget now; null for `average`."
    )

    @classmethod
    def from_quote(cls, quote: AggregationQuote) -> AggregationQuoteRead:
        budget = None
        if quote.remaining_epsilon is not None and quote.remaining_delta is not None:
            budget = BudgetLeft(
                remaining_epsilon=quote.remaining_epsilon,
                remaining_delta=quote.remaining_delta,
                sufficient=quote.epsilon <= quote.remaining_epsilon
                and quote.delta <= quote.remaining_delta,
            )
        return cls(
            method=quote.method,
            dataset_id=quote.dataset_id,
            cost=FitCost(epsilon=quote.epsilon, delta=quote.delta),
            expected_noise_norm=quote.expected_noise_norm,
            composition=quote.composition,
            calibration=quote.calibration,
            budget=budget,
        )
