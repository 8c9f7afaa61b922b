"""Site nodes (issue 15): remote contributions, node tasks and dataset offers."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, StrictStr

from service.api.schemas.base import RequestModel, ResponseModel
from service.domain.nodes.offers import OfferView
from service.domain.nodes.remote import RemoteOffer, RemoteView

__all__ = [
    "ModelOfferCreate",
    "ModelOfferRead",
    "NodeTaskRead",
    "OfferCreate",
    "OfferList",
    "OfferRead",
    "RemoteContributionCreate",
    "RemoteContributionList",
    "RemoteContributionRead",
    "TaskResultIn",
]

Cap = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
DeltaCap = Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]
Id = Annotated[StrictStr, Field(min_length=1, max_length=64)]


class RemoteContributionCreate(RequestModel):
    """What a node sends to register one of its datasets in a study: public spec and caps."""

    node_dataset_id: Id = Field(description="The dataset's id on the node (for the records).")
    preprocessing: dict[str, Any] = Field(
        description="The dataset's public preprocessing spec (features, bounds, categories)."
    )
    label: dict[str, Any] = Field(description="The dataset's label column and positive class.")
    n_features: int = Field(ge=1, le=100_000, description="Width of the encoded design.")
    epsilon_cap: Cap = Field(description="The largest ε the node accepts per job.")
    delta_cap: DeltaCap = Field(description="The largest δ the node accepts per job.")

    def to_domain(self) -> RemoteOffer:
        return RemoteOffer(
            node_dataset_id=self.node_dataset_id,
            preprocessing=self.preprocessing,
            label=self.label,
            n_features=self.n_features,
            epsilon_cap=self.epsilon_cap,
            delta_cap=self.delta_cap,
        )


class RemoteContributionRead(ResponseModel):
    id: str
    study_id: str
    site_id: str
    node_dataset_id: str
    n_features: int
    epsilon_cap: float
    delta_cap: float
    created_at: datetime
    withdrawn_at: datetime | None

    @classmethod
    def from_view(cls, view: RemoteView) -> RemoteContributionRead:
        return cls.model_validate(view)


class RemoteContributionList(ResponseModel):
    items: list[RemoteContributionRead]


class NodeTaskRead(ResponseModel):
    """One step of a federated fit asked of a node: only public state."""

    task_id: str
    contribution_id: str
    job_id: str
    seq: int
    step: str
    terms: dict[str, Any]
    vectors: list[list[float]]
    sizes: list[int] | None = None
    plan: dict[str, Any] | None = Field(
        default=None,
        description=(
            "`prepare` only: the job's public plan (every number its steps use, from the "
            "terms and the sizes); the node re-derives it and refuses the job unless equal."
        ),
    )


class TaskResultIn(RequestModel):
    """A node's answer: the step's vector, the join's facts, or a refusal with its reason."""

    vector: list[float] | None = Field(default=None, max_length=100_000)
    n: int | None = Field(default=None, ge=1)
    n_features: int | None = Field(default=None, ge=1)
    charged: dict[str, float] | None = None
    dataset_id: StrictStr | None = Field(default=None, max_length=64)
    refused: StrictStr | None = Field(default=None, max_length=1000)


class OfferCreate(RequestModel):
    study_id: Id = Field(description="The study's id on the coordinator.")
    epsilon_cap: Cap = Field(description="The largest ε one job of the study may charge.")
    delta_cap: DeltaCap = Field(description="The largest δ one job of the study may charge.")


class OfferRead(ResponseModel):
    id: str
    dataset_id: str
    study_id: str
    contribution_id: str
    epsilon_cap: float
    delta_cap: float
    epsilon_spent: float
    delta_spent: float
    created_at: datetime
    withdrawn_at: datetime | None

    @classmethod
    def from_view(cls, view: OfferView) -> OfferRead:
        return cls.model_validate(view)


class ModelOfferCreate(RequestModel):
    study_id: Id = Field(description="The study's id on the coordinator.")


class ModelOfferRead(ResponseModel):
    model_id: str = Field(description="The model on this node.")
    study_id: str
    coordinator_model_id: str = Field(description="The copy uploaded to the coordinator.")
    contribution_id: str = Field(description="The contribution in the coordinator's study.")


class OfferList(ResponseModel):
    items: list[OfferRead]
