"""Fit requests and dry-run quotes (``POST /v1/datasets/{id}/fits``)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from service.api.schemas.base import RequestModel, ResponseModel
from service.api.schemas.options import MechanismRequest
from service.domain.errors import InvalidInputError
from service.domain.fits.submit import AUTO, FitQuote, FitRequest
from service.domain.fits.tuning.request import (
    MAX_CANDIDATES,
    TunedFitRequest,
    step_size_candidates,
)
from service.domain.ranges import (
    MAX_EPSILON,
    MAX_REGULARIZATION,
    MIN_EPSILON,
    MIN_REGULARIZATION,
)
from service.dp import MECHANISMS
from service.dp.core.tasks import TASK_LOSSES

__all__ = ["BudgetLeft", "FitCost", "FitCreate", "FitQuoteRead", "RegularizationCandidates"]

_MECHANISMS = ", ".join(f"`{name}`" for name in sorted(MECHANISMS))
_LOSSES = "; ".join(
    f"{task}: " + ", ".join(f"`{name}`" for name in losses) for task, losses in TASK_LOSSES.items()
)


class RegularizationCandidates(RequestModel):
    """Candidate λs for private tuning (Chaudhuri, Monteleoni and Sarwate 2011): each is fitted
    on its own disjoint part of the data at the full (ε, δ) and one is chosen by the
    exponential mechanism on a held-out part; the total cost stays (ε, δ)."""

    candidates: list[
        Annotated[
            float,
            Field(ge=MIN_REGULARIZATION, le=MAX_REGULARIZATION, allow_inf_nan=False),
        ]
    ] = Field(min_length=1, max_length=MAX_CANDIDATES, description="Distinct λ values.")


class FitCreate(MechanismRequest):
    """A fit of one mechanism on one dataset at a privacy cost (ε, δ)."""

    tunable_params: ClassVar[bool] = True
    body_examples: ClassVar[list[dict[str, Any]]] = [
        {
            "mechanism": "objective_perturbation",
            "epsilon": 0.5,
            "delta": 0.0,
            "loss": "logistic",
            "regularization": "auto",
            "params": {},
        }
    ]

    mechanism: str = Field(
        min_length=1,
        max_length=64,
        description=f"The fit mechanism: one of {_MECHANISMS}; or `auto`: PrivFit chooses the "
        "mechanism (and λ, when `regularization` is omitted) by its predicted accuracy from "
        "public quantities only (n, d, ε, δ, loss; the site's public reference dataset of the "
        "same spec when it has one), at no cost; the job and the model's record say what was "
        "chosen and why. `auto` takes no mechanism options and no candidates (422).",
    )
    epsilon: float | None = Field(
        default=None,
        ge=MIN_EPSILON,
        le=MAX_EPSILON,
        allow_inf_nan=False,
        description="Privacy parameter ε of the whole fit (required except for `non_private`); "
        f"from {MIN_EPSILON:g} to {MAX_EPSILON:g}.",
    )
    delta: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Privacy parameter δ (0 for pure ε-DP mechanisms).",
    )
    loss: str | None = Field(
        default=None,
        max_length=32,
        description="The loss, by the dataset's task (its label): "
        f"{_LOSSES}. Omitted: the task's first (`logistic` for class labels, `squared` "
        "for a numeric label).",
    )
    regularization: (
        Annotated[
            float,
            Field(ge=MIN_REGULARIZATION, le=MAX_REGULARIZATION, allow_inf_nan=False),
        ]
        | RegularizationCandidates
        | Literal["auto"]
        | None
    ) = Field(
        default=None,
        description="λ of the objective (1/n) Σ l(y wᵀx) + (λ/2)‖w‖², from "
        f'{MIN_REGULARIZATION:g} to {MAX_REGULARIZATION:g}; or `{{"candidates": [...]}}` '
        'to let PrivFit choose λ privately within the same (ε, δ); or `"auto"` (the '
        "default when omitted): λ from public quantities only (n, d, the row bound 1, ε, δ, "
        "the loss and the mechanism) by the rule of `service/dp/analysis/regularization.py`, "
        "which costs no privacy; the chosen λ and the rule appear in the calibration as "
        "`regularization_rule`. Not available for `dp_sgd` and the stacking mechanisms, nor "
        "together with step-size candidates (422).",
    )
    selection: Literal["auto", "cms", "papernot_steinke", "liu_talwar"] | None = Field(
        default=None,
        description="How candidates are chosen privately (only with candidates; default "
        "`auto`): `cms` (Chaudhuri, Monteleoni and Sarwate 2011: candidate i fitted on part i "
        "of k + 1 at the full (ε, δ), the exponential mechanism on the held-out part), "
        "`papernot_steinke` (Papernot and Steinke 2022: a random number of runs, each a "
        "uniformly drawn candidate fitted on all rows, the best by a noisy training error "
        "released), `liu_talwar` (Liu and Talwar 2019 random stopping: the same with a "
        "geometric number of runs). `auto` picks from public quantities (k, n, d, ε, δ, the "
        "smallest λ); the quote and the record show the method, the reason and the "
        "per-run budget. Random repetition needs a mechanism that runs at δ = 0, or "
        "`noisy_gd` at δ > 0 (its Gaussian runs are accounted by their Rényi curve). With "
        "`auto` and objective or generalized objective perturbation, the λ that "
        '`"regularization": "auto"` would give is weighed against tuning: when random '
        "repetition's smaller per-run budget would raise the excess-risk bound by a factor "
        "κ > 1.5, selection declines (`selection: automatic_lambda`) and that λ is fitted "
        "once on all rows at the whole (ε, δ); otherwise it joins the candidates. The quote "
        "(`calibration.tuning`), the job (`params.tuning_decision`) and the model's record "
        "show the decision: `tuned`, `cost_factor` (κ), `cost_factor_threshold`, "
        "`automatic_regularization`, `requested_candidates` and `candidates`.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The mechanism's own options (each mechanism's `<Mechanism>Options`: e.g. "
        "`h`, the Huber width; `epochs`, `batch_size`, `eta` for `dp_sgd`). Unknown options "
        'are a 422. For `dp_sgd`, `"eta": {"candidates": [...]}` (1 to '
        f"{MAX_CANDIDATES} distinct step sizes > 0) lets PrivFit choose the step size "
        "privately within the same (ε, δ), alone or with λ candidates: the grid λ × η, at most "
        f"{MAX_CANDIDATES} points.",
    )

    @property
    def auto_regularization(self) -> bool:
        """λ is to be chosen by the public rule (``"auto"``, or omitted)."""
        return self.regularization is None or self.regularization == AUTO

    def check_auto(self) -> None:
        """422 for what contradicts ``auto``: candidates (auto chooses itself)."""
        if self.mechanism != AUTO:
            return
        if isinstance(self.regularization, RegularizationCandidates):
            raise InvalidInputError(
                "auto chooses λ itself (or uses the λ given): λ candidates contradict it",
                errors=[{"loc": ["body", "regularization"], "msg": "candidates with auto"}],
            )
        if isinstance(self.params.get("eta"), dict):
            raise InvalidInputError(
                "auto chooses the mechanism and its settings: step-size candidates contradict it",
                errors=[{"loc": ["body", "params", "eta"], "msg": "candidates with auto"}],
            )

    def to_domain(self) -> FitRequest:
        if isinstance(self.regularization, RegularizationCandidates) or isinstance(
            self.params.get("eta"), dict
        ):
            raise TypeError("a fit with candidates is a TunedFitRequest: use to_tuned()")
        regularization = self.regularization
        return FitRequest(
            mechanism=self.mechanism,
            epsilon=self.epsilon,
            delta=self.delta,
            loss=self.loss or "logistic",
            loss_given=self.loss is not None,
            regularization=AUTO if regularization is None else regularization,
            params=self.params,
        )

    def to_tuned(self) -> TunedFitRequest | None:
        """The privately tuned fit this body asks for (λ candidates, DP-SGD step-size
        candidates ``params.eta = {"candidates": [...]}``, or both: their grid), or None for a
        single λ and η. A malformed step-size object is a 422."""
        step_sizes = step_size_candidates(self.params)
        lambdas = (
            tuple(self.regularization.candidates)
            if isinstance(self.regularization, RegularizationCandidates)
            else None
        )
        if lambdas is None and step_sizes is None:
            if self.selection is not None:
                raise InvalidInputError(
                    "selection applies to candidates only: give regularization or step-size "
                    "candidates",
                    errors=[{"loc": ["body", "selection"], "msg": "no candidates to select"}],
                )
            return None
        if self.auto_regularization:
            raise InvalidInputError(
                "regularization 'auto' (or omitted) cannot be combined with step-size "
                "candidates: give a numeric λ or λ candidates",
                errors=[{"loc": ["body", "regularization"], "msg": "auto with candidates"}],
            )
        params = dict(self.params)
        if step_sizes is not None:
            del params["eta"]
        regularization = self.regularization
        if regularization is None or isinstance(regularization, str):  # pragma: no cover
            raise TypeError("unreachable: auto was refused above")
        base = FitRequest(
            mechanism=self.mechanism,
            epsilon=self.epsilon,
            delta=self.delta,
            loss=self.loss or "logistic",
            loss_given=self.loss is not None,
            regularization=(
                regularization.candidates[0]
                if isinstance(regularization, RegularizationCandidates)
                else regularization
            ),
            params=params,
        )
        return TunedFitRequest(
            base=base,
            candidates=lambdas,
            step_sizes=step_sizes,
            selection=self.selection or "auto",
        )


class FitCost(ResponseModel):
    """The (ε, δ) charged to the dataset's budget."""

    epsilon: float
    delta: float


class BudgetLeft(ResponseModel):
    """The dataset's remaining budget now, and whether it covers the fit."""

    remaining_epsilon: float
    remaining_delta: float
    sufficient: bool


class FitQuoteRead(ResponseModel):
    """A dry run: what the fit would cost and how it would randomise. Nothing was spent."""

    dry_run: bool = True
    mechanism: str
    private: bool = Field(description="False for `non_private`: no DP, nothing charged.")
    cost: FitCost
    expected_noise_norm: float | None = Field(
        description="E‖noise‖ of the mechanism's noise vector, where it has a single one."
    )
    composition: str = Field(description="How the fit's total (ε, δ) arises.")
    calibration: dict[str, Any] = Field(
        description="The calibration: every noise parameter, named as in the papers."
    )
    budget: BudgetLeft
    regularization: float | None = Field(
        default=None,
        description='The λ the fit would use (the chosen one for `"auto"`; None for a '
        "privately tuned fit, whose λ is chosen when it runs).",
    )
    regularization_rule: dict[str, Any] | None = Field(
        default=None,
        description='For `"auto"`: the rule that chose λ (name, formula, public inputs, '
        "constants, the value before and after clamping).",
    )
    auto: dict[str, Any] | None = Field(
        default=None,
        description="For `mechanism: auto`: the choice and every candidate's predicted "
        "figures (`mechanism` above is the chosen one).",
    )
    expected_accuracy: dict[str, Any] | None = Field(
        default=None,
        description="Expected accuracy (mean, p10–p90 of fits simulated on a public "
        "reference) next to the majority-class baseline (`majority_baseline`, null when no "
        'public source gives it). On a numeric label (`metric: "rmse"`): the RMSE band '
        "in the label's units next to predicting the public reference's mean "
        "(`mean_baseline_rmse`). Multi-class and numeric fits have a band when the site has "
        "a public reference dataset, or, for mechanism `auto`, on a synthetic "
        "reference with `private_baseline` (the slice of ε spent on a private baseline, "
        "released when the job runs: the model's record then holds the band against it).",
    )
    warnings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="E.g. `below_majority_baseline`: the expected accuracy is below always "
        "answering the majority class; `worse_than_mean_baseline` (numeric label): the "
        "expected RMSE is above always predicting the public reference's mean.",
    )

    @classmethod
    def from_quote(cls, quote: FitQuote) -> FitQuoteRead:
        return cls(
            auto=quote.auto,
            expected_accuracy=quote.expected_accuracy,
            warnings=list(quote.warnings),
            mechanism=quote.mechanism,
            private=quote.private,
            cost=FitCost(epsilon=quote.epsilon, delta=quote.delta),
            expected_noise_norm=quote.expected_noise_norm,
            composition=quote.composition,
            calibration=quote.calibration,
            budget=BudgetLeft(
                remaining_epsilon=quote.remaining_epsilon,
                remaining_delta=quote.remaining_delta,
                sufficient=quote.affordable,
            ),
            regularization=quote.regularization,
            regularization_rule=(
                None if quote.regularization_rule is None else dict(quote.regularization_rule)
            ),
        )
