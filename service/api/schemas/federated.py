"""Federated fits across a study's granted datasets (``POST /v1/studies/{id}/federated-fits``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, StrictStr

from service.api.schemas.base import RequestModel, ResponseModel
from service.domain.ranges import (
    MAX_EPSILON,
    MAX_REGULARIZATION,
    MIN_EPSILON,
    MIN_REGULARIZATION,
)
from service.domain.studies.federated.request import (
    MAX_FEDERATED_DATASETS,
    FederatedQuote,
    FederatedRequest,
)
from service.dp.federated import FEDERATED_PROTOCOLS

__all__ = ["FederatedCostRead", "FederatedFitCreate", "FederatedQuoteRead"]

#: PrivFit's ids are 32 lowercase hex characters; the pattern is documented so that clients
#: and fuzzers generate well-formed ids (any other string is simply not found).
_ID = Annotated[
    StrictStr,
    Field(min_length=1, max_length=64, json_schema_extra={"pattern": "^[0-9a-f]{32}$"}),
]


class FederatedFitCreate(RequestModel):
    """A multiparty protocol over the datasets members granted to the study."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "protocol": "psgd",
                    "epsilon": 1.0,
                    "delta": 1e-6,
                    "loss": "logistic",
                    "regularization": 0.001,
                    "params": {"iterations": 50},
                },
                {
                    "protocol": "admm",
                    "epsilon": 2.0,
                    "regularization": 0.01,
                    "params": {"perturbation": "dual", "iterations": 20, "topology": "ring"},
                },
                {
                    "protocol": "admm",
                    "epsilon": 1.0,
                    "delta": 1e-6,
                    "regularization": 0.001,
                    "params": {"noise": "gaussian"},
                },
            ]
        }
    )

    protocol: str = Field(
        min_length=1,
        max_length=64,
        json_schema_extra={"enum": list(FEDERATED_PROTOCOLS)},
        description="`noisy_average`, `psgd`, `admm` or `distributed_lasso`.",
    )
    datasets: list[_ID] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_FEDERATED_DATASETS,
        description="Granted dataset ids taking part; default: every dataset granted to the "
        "study (at least two).",
    )
    epsilon: float | None = Field(
        default=None,
        ge=MIN_EPSILON,
        le=MAX_EPSILON,
        allow_inf_nan=False,
        description="ε each participating dataset may be charged (required unless the "
        f"protocol's parameters make it non-private); from {MIN_EPSILON:g} to {MAX_EPSILON:g}.",
    )
    delta: float = Field(default=0.0, ge=0, lt=1, allow_inf_nan=False, description="δ per dataset.")
    loss: str | None = Field(
        default=None,
        max_length=32,
        description="`logistic` (default) or `huber` (`h` in `params`); `squared` (the default) "
        "for `distributed_lasso`.",
    )
    regularization: float = Field(
        default=0.01,
        ge=MIN_REGULARIZATION,
        le=MAX_REGULARIZATION,
        allow_inf_nan=False,
        description="λ of the objective (for `distributed_lasso`: the L1 strength), from "
        f"{MIN_REGULARIZATION:g} to {MAX_REGULARIZATION:g}.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The protocol's own options (e.g. `iterations`; `perturbation`, "
        "`topology`, `delta_prime` for `admm`, and `noise`: `laplace` (default) or `gaussian` "
        "(primal perturbation accounted in zCDP, needs `delta` > 0; `zcdp_conversion`: `cks` "
        "or `bun_steinke`); `noise` for `distributed_lasso`). Unknown options are a 422.",
    )
    name: Annotated[StrictStr, Field(min_length=1, max_length=200)] | None = None

    def to_domain(self) -> FederatedRequest:
        return FederatedRequest(
            protocol=self.protocol,
            epsilon=self.epsilon,
            delta=self.delta,
            loss=self.loss,
            regularization=self.regularization,
            datasets=self.datasets,
            params=self.params,
            name=self.name,
        )


class FederatedCostRead(ResponseModel):
    """What one participating dataset would be charged and whether it can pay. Another site's
    remaining budget and row count are not shown."""

    dataset_id: str
    site_id: str
    epsilon: float
    delta: float
    dataset_sufficient: bool = Field(description="The dataset's own budget covers the cost.")
    remaining_epsilon: float | None = Field(
        description="Left on the dataset's own budget; only for the caller's own datasets."
    )
    remaining_delta: float | None
    grant_left_epsilon: float = Field(description="Left under the study's grant on it.")
    grant_left_delta: float
    sufficient: bool


class FederatedQuoteRead(ResponseModel):
    """A dry run of a federated fit: per-dataset costs and the calibration; nothing spent."""

    dry_run: bool = True
    protocol: str
    private: bool = Field(description="False when the parameters make the protocol non-private.")
    rounds: int = Field(description="Communication rounds the protocol will run.")
    composition: str = Field(description="How each dataset's total (ε, δ) arises.")
    calibration: dict[str, Any] = Field(
        description="The public calibration numbers (none that depends on a site's row count)."
    )
    assumptions: list[str]
    costs: list[FederatedCostRead]

    @classmethod
    def from_quote(cls, quote: FederatedQuote) -> FederatedQuoteRead:
        return cls(
            protocol=quote.protocol,
            private=quote.private,
            rounds=quote.rounds,
            composition=quote.composition,
            calibration=quote.calibration,
            assumptions=list(quote.notes),
            costs=[
                FederatedCostRead(
                    dataset_id=c.dataset_id,
                    site_id=c.site_id,
                    epsilon=c.epsilon,
                    delta=c.delta,
                    dataset_sufficient=c.dataset_sufficient,
                    remaining_epsilon=c.remaining_epsilon,
                    remaining_delta=c.remaining_delta,
                    grant_left_epsilon=c.grant_left_epsilon,
                    grant_left_delta=c.grant_left_delta,
                    sufficient=c.affordable,
                )
                for c in quote.costs
            ],
        )
