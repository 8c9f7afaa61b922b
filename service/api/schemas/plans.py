"""Privacy–utility plans (``POST /v1/datasets/{id}/plans``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from service.api.schemas.base import ResponseModel
from service.api.schemas.options import MechanismRequest
from service.domain.errors import InvalidInputError
from service.domain.fits.plans import MAX_GRID, PlanRequest
from service.domain.ranges import (
    MAX_EPSILON,
    MAX_REGULARIZATION,
    MIN_EPSILON,
    MIN_REGULARIZATION,
)
from service.dp.analysis.planning import MAX_SIMULATED_FITS

__all__ = ["PlanCreate", "PlanRead"]


class PlanCreate(MechanismRequest):
    """A grid of ε (and λ) for one mechanism; optionally a public reference dataset to
    simulate on and a target accuracy."""

    body_examples: ClassVar[list[dict[str, Any]]] = [
        {
            "mechanism": "objective_perturbation",
            "epsilons": [0.1, 0.5, 1.0, 2.0],
            "regularizations": [0.001],
            "reference_dataset_id": "0" * 32,
            "repeats": 10,
            "target_accuracy": 0.8,
            "target_probability": 0.9,
        }
    ]

    mechanism: str = Field(
        min_length=1,
        max_length=64,
        description="A private mechanism, or `auto`: per ε, the mechanism and λ auto would "
        "choose (each point names it), simulated on `reference_dataset_id` or by default on "
        "your public reference dataset of the same spec (else a synthetic reference); at most "
        "8 ε, no target accuracy. Without a public baseline, each point is the dry run of the "
        "auto fit at its ε: the choice, λ and band at ε less the private baseline's slice "
        "(`private_baseline`), with `spent_epsilon` the whole ε.",
    )
    epsilons: list[float] = Field(min_length=1, max_length=MAX_GRID)
    regularizations: list[float | Literal["auto"]] = Field(
        default=[1e-3],
        min_length=1,
        max_length=MAX_GRID,
        description='λ values; `"auto"` adds, at each ε, the λ of the public rule used by '
        "fits without a λ (its record is on the point as `regularization_rule`).",
    )
    delta: float = Field(default=0.0, ge=0.0, lt=1.0)
    loss: str | None = Field(
        default=None,
        max_length=16,
        description="The loss; without one, the dataset's task's default (`logistic` for "
        "class labels, `squared` for numeric ones).",
    )
    params: dict[str, Any] = Field(default_factory=dict)
    reference_dataset_id: str | None = Field(
        default=None,
        max_length=64,
        description="A dataset of yours uploaded with `allow_non_private` (public rows) and "
        "the same spec, to simulate the mechanism on.",
    )
    repeats: int = Field(
        default=10,
        ge=2,
        le=50,
        description=f"Simulated fits per grid point (grid × repeats ≤ {MAX_SIMULATED_FITS}).",
    )
    target_accuracy: float | None = Field(default=None, ge=0.0, le=1.0)
    target_probability: float = Field(default=0.9, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)

    def to_domain(self) -> PlanRequest:
        for name, values, lo, hi in (
            ("epsilons", self.epsilons, MIN_EPSILON, MAX_EPSILON),
            ("regularizations", self.regularizations, MIN_REGULARIZATION, MAX_REGULARIZATION),
        ):
            for i, v in enumerate(values):
                if isinstance(v, str):  # "auto"
                    continue
                if not lo <= v <= hi:
                    raise InvalidInputError(
                        f"{name}[{i}] must be between {lo:g} and {hi:g}",
                        errors=[{"loc": ["body", name, i], "msg": "out of range"}],
                    )
        return PlanRequest(
            mechanism=self.mechanism,
            epsilons=list(self.epsilons),
            regularizations=list(self.regularizations),
            delta=self.delta,
            loss=self.loss or "logistic",
            loss_given=self.loss is not None,
            params=dict(self.params),
            reference_dataset_id=self.reference_dataset_id,
            repeats=self.repeats,
            target_accuracy=self.target_accuracy,
            target_probability=self.target_probability,
            seed=self.seed,
        )


class PlanRead(ResponseModel):
    """Expected noise, excess-risk bound and (with a reference) simulated accuracy per grid
    point; the smallest ε reaching the target. Nothing was spent."""

    dataset_id: str
    mechanism: str
    n: int
    d: int
    reference_dataset_id: str | None
    points: list[dict[str, Any]] = Field(
        description="Per (ε, λ): `epsilon`, `regularization`, `spent_epsilon`, `spent_delta`, "
        "`expected_noise_norm`, `excess_risk_bound` and, when simulated, the band. A point of "
        "`auto` names its `mechanism` (and `projection_rule` when auto's public rule projects "
        "the rows of objective perturbation to k dimensions); without a public baseline (no "
        "public reference, nor a declared prior on a binary label) the fit at that ε spends a "
        "slice of it on a private trivial-model baseline and chooses and fits at the rest, and "
        "the point says so: the choice, λ, noise and bound at ε less the slice, "
        "`private_baseline` (the slice: its `epsilon`, `share`, `fit_epsilon` and rule) and "
        "`expected_accuracy` (the band), both as the fit's dry run shows them."
    )
    target: dict[str, Any] | None
    notes: list[str]
    majority_baseline: float | None = Field(
        default=None,
        description="With a reference: the accuracy of always answering its majority class; "
        "each simulated point says whether its mean is below it (`below_majority_baseline`).",
    )
    spent: dict[str, float]
