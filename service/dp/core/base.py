"""Shared types of PrivFit's DP core: the problem a mechanism solves, its calibration, its result.

A mechanism is split in two steps so that the service can quote a cost without touching data:

1. ``calibrate(problem) -> Calibration``: pure arithmetic on public quantities (n, d, ε, δ,
   loss constants, λ, parameters) of a problem ``validate_params`` has checked and
   normalised (once, in :func:`service.dp.make_problem`). It decides a typed, frozen plan
   (``Calibration.plan``, :mod:`service.dp.core.plan`: the noise law and its parameters β,
   ε′, Δ, σ, …, the release plan, the ε split) and renders from it the (ε, δ) actually spent
   after any internal composition, the record (``details``) and the expected noise norm. A
   dry run calls only this.
2. ``run(X, y, problem, calibration, rng, progress) -> FittedModel``: draws the noise and
   solves, reading only ``calibration.plan`` (a plan stored with a job runs as stored).

``service.dp.fit`` chains the two and wraps the outcome in a :class:`FitResult`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from service.dp.core.options import Capabilities, MechanismOptions
from service.dp.core.plan import Plan
from service.dp.core.tasks import Task

__all__ = [
    "Calibration",
    "FitResult",
    "FittedModel",
    "LinearModel",
    "Mechanism",
    "Problem",
    "ProgressCallback",
]

#: Called with a fraction in [0, 1] as an iterative mechanism advances. It may raise to abort
#: the fit (the job layer uses this for cancellation); the exception propagates unchanged.
ProgressCallback = Callable[[float], None]


@dataclass(frozen=True, slots=True)
class Problem:
    """Public description of one fit: everything a calibration may depend on.

    ``n`` and ``d`` are the rows and columns of X (n is public under replace-one neighbours);
    ``params`` holds the mechanism-specific options, already validated by the mechanism.
    ``task`` and ``n_classes`` say what is predicted and how y is encoded
    (:mod:`service.dp.core.tasks`; K = 2 binary, K ≥ 3 multiclass, 1 for regression).
    """

    mechanism: str
    n: int
    d: int
    epsilon: float
    delta: float
    loss: str
    regularization: float
    huber_h: float = 0.5
    params: Mapping[str, Any] = field(default_factory=dict)
    task: Task = "binary"
    n_classes: int = 2


@dataclass(frozen=True, slots=True)
class Calibration:
    """What a mechanism will spend and how it will randomise.

    ``epsilon``/``delta`` are the totals actually spent by this fit (after composition inside
    the mechanism), ``details`` the noise parameters with their names from the papers,
    ``expected_noise_norm`` E‖noise‖ where it is defined (None for mechanisms without a single
    noise vector), ``composition`` a short human-readable statement of how the total arises.
    """

    epsilon: float
    delta: float
    details: Mapping[str, Any]
    expected_noise_norm: float | None = None
    composition: str = "single release"
    #: The typed plan ``run`` executes (:mod:`service.dp.core.plan`); ``details`` is its record.
    plan: Plan | None = None


@runtime_checkable
class FittedModel(Protocol):
    """A released model: scores rows of the (preprocessed) design matrix."""

    def decision_function(self, X: NDArray[np.float64]) -> NDArray[np.float64]: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class LinearModel:
    """The model x ↦ wᵀx. ``coef`` has already been rounded to the release grid."""

    coef: NDArray[np.float64]

    def decision_function(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(X, dtype=np.float64) @ self.coef

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "linear", "coef": [float(v) for v in self.coef]}


class Mechanism(Protocol):
    """One fit mechanism of docs/design.md §3.

    ``validate_params`` checks and normalises the mechanism's own options (raising
    ``ValueError`` with a message a user can act on, before any data or budget is touched);
    ``calibrate`` and ``run`` are described in the module docstring. ``options`` is the
    frozen dataclass of the options it takes and ``capabilities`` what the rest of the
    service may ask of it (:mod:`service.dp.core.options`).
    """

    name: str

    @property
    def options(self) -> type[MechanismOptions]: ...

    @property
    def capabilities(self) -> Capabilities: ...

    def validate_params(self, problem: Problem) -> Problem: ...

    def calibrate(self, problem: Problem) -> Calibration: ...

    def run(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        problem: Problem,
        calibration: Calibration,
        *,
        rng: np.random.Generator | None,
        progress: ProgressCallback | None,
    ) -> FittedModel: ...


@dataclass(frozen=True, slots=True)
class FitResult:
    """What ``service.dp.fit`` returns.

    ``coef`` is the released weight vector, or None when the model is not a single linear map
    (stacked models); ``epsilon``/``delta`` what was spent; ``details`` the calibration used.
    """

    mechanism: str
    model: FittedModel
    epsilon: float
    delta: float
    details: Mapping[str, Any]
    composition: str
    expected_noise_norm: float | None
    seeded: bool

    @property
    def coef(self) -> NDArray[np.float64] | None:
        return self.model.coef if isinstance(self.model, LinearModel) else None

    def decision_function(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        return self.model.decision_function(X)
