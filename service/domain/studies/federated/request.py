"""A federated fit as the coordinator asks for it, and the answer of its dry run: each
participating dataset's cost, with no row count (the coordinator may not see another site's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from service.domain.records.base import json_safe

__all__ = [
    "MAX_FEDERATED_DATASETS",
    "MIN_FEDERATED_DATASETS",
    "DatasetCost",
    "FederatedQuote",
    "FederatedRequest",
]


MIN_FEDERATED_DATASETS: Final[int] = 2
MAX_FEDERATED_DATASETS: Final[int] = 100
#: A placeholder ε used only to learn whether a protocol with these parameters is private
#: when the request names no ε (a non-private protocol ignores ε).
_PROBE_EPSILON: Final[float] = 1.0


@dataclass(frozen=True, slots=True)
class FederatedRequest:
    """A federated fit as the coordinator asked for it (already well-formed)."""

    protocol: str
    epsilon: float | None
    delta: float = 0.0
    #: None: the protocol's own loss for the study's label (``squared`` for the Lasso,
    #: ``huber`` for another protocol on a numeric label, ``logistic`` otherwise).
    loss: str | None = None
    regularization: float = 0.01
    datasets: Sequence[str] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None

    @property
    def resolved_loss(self) -> str:
        """The loss for a binary label."""
        return self.loss_for("binary")

    def loss_for(self, task: str) -> str:
        """The loss named, or the protocol's default for a label of ``task``."""
        if self.loss is not None:
            return self.loss
        if self.protocol == "distributed_lasso":
            return "squared"
        return "huber" if task == "regression" else "logistic"

    def to_params(self, task: str = "binary") -> dict[str, Any]:
        """The JSON stored as the job's ``params`` (with the study and datasets added)."""
        return {
            "protocol": self.protocol,
            "epsilon": None if self.epsilon is None else float(self.epsilon),
            "delta": float(self.delta),
            "loss": self.loss_for(task),
            "regularization": float(self.regularization),
            "params": json_safe(dict(self.params)),
            "name": self.name,
        }


@dataclass(frozen=True, slots=True)
class DatasetCost:
    """One participating dataset: its owner, its cost and whether it can be paid (its own
    budget, and the study's grant on it). No row count: the coordinator may not see one."""

    dataset_id: str
    site_id: str
    epsilon: float
    delta: float
    dataset_sufficient: bool
    #: Shown to the dataset's owner only (another site's budget is its own business).
    remaining_epsilon: float | None
    remaining_delta: float | None
    grant_left_epsilon: float
    grant_left_delta: float

    @property
    def affordable(self) -> bool:
        return (
            self.dataset_sufficient
            and self.epsilon <= self.grant_left_epsilon
            and self.delta <= self.grant_left_delta
        )


@dataclass(frozen=True, slots=True)
class FederatedQuote:
    """A dry run: per-dataset costs and the calibration; nothing is spent."""

    protocol: str
    private: bool
    rounds: int
    composition: str
    calibration: dict[str, Any]
    notes: tuple[str, ...]
    costs: tuple[DatasetCost, ...]
