"""The inputs of an aggregation: the study's contributed models the coordinator named (or all of
them), checked to be contributions of this study, and their average when it is asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.db.models import Model, Study
from service.db.uow import UnitOfWork
from service.domain.errors import (
    ConflictError,
    InvalidInputError,
)
from service.domain.ids import refuse_duplicates
from service.dp.multisite.aggregation import (
    average_coefficients,
    normalised_weights,
)


@dataclass(frozen=True, slots=True)
class SourceInput:
    model: Model
    site_id: str
    contribution_id: str


def select_inputs(
    uow: UnitOfWork, study: Study, requested: Sequence[str] | None
) -> list[SourceInput]:
    contributed = {
        c.model_id: c
        for c in uow.studies.contributions(study.id)
        if c.kind == "model" and c.model_id is not None
    }
    if requested is None:
        ids = list(contributed)
        if not ids:
            raise InvalidInputError(
                "the study has no contributed models to aggregate",
                errors=[{"loc": ["body", "models"], "msg": "no contributed models"}],
            )
    else:
        ids = list(requested)
        refuse_duplicates(ids, field="models", what="model")
        foreign = [i for i, m in enumerate(ids) if m not in contributed]
        if foreign:
            raise InvalidInputError(
                "only models contributed to this study can be aggregated; not contributed: "
                + ", ".join(repr(ids[i]) for i in foreign),
                errors=[
                    {"loc": ["body", "models", i], "msg": "not a contribution of this study"}
                    for i in foreign
                ],
            )
    inputs: list[SourceInput] = []
    for model_id in ids:
        contribution = contributed[model_id]
        model = uow.models.get(model_id)
        if model is None:  # pragma: no cover - the foreign key keeps contributed models
            raise InvalidInputError(f"model {model_id!r} no longer exists")
        inputs.append(
            SourceInput(model=model, site_id=contribution.site_id, contribution_id=contribution.id)
        )
    return inputs


def mark_used(uow: UnitOfWork, inputs: Sequence[SourceInput], at: datetime) -> None:
    """Mark the inputs' contributions used, or 409 when one was withdrawn meanwhile."""
    if uow.studies.mark_used([i.contribution_id for i in inputs], at=at) != len(inputs):
        raise ConflictError("a contribution was withdrawn while the aggregation was prepared")


#: Model bodies that are one linear map: a weight vector (binary, regression) or a (K, d)
#: matrix (multi-class).
AVERAGEABLE_KINDS = ("linear", "multiclass")


def average_inputs(
    inputs: Sequence[SourceInput], weights: Sequence[float] | None
) -> tuple[Any, Any]:
    """(π, the averaged coefficients: a vector, or a (K, d) matrix for multi-class models).
    The inputs match the study's spec, label form included, so they share one shape."""
    stacked = [
        i.model.id for i in inputs if (i.model.body or {}).get("kind") not in AVERAGEABLE_KINDS
    ]
    if stacked:
        raise InvalidInputError(
            "only linear models can be averaged; stacked (two-level) models have no single "
            "weight vector: " + ", ".join(map(repr, stacked)),
            errors=[{"loc": ["body", "models"], "msg": "stacked models cannot be averaged"}],
        )
    try:
        pi = normalised_weights(len(inputs), weights)
        coef = average_coefficients([i.model.body["coef"] for i in inputs], weights)
    except ValueError as exc:
        raise InvalidInputError(
            f"cannot average: {exc}", errors=[{"loc": ["body", "weights"], "msg": str(exc)}]
        ) from exc
    return pi, coef
