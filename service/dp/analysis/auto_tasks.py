"""``"mechanism": "auto"`` on multi-class and regression labels (issue 29). Pure; spends
nothing.

The candidates are read from the registry: every *private* mechanism whose
``capabilities.tasks`` lists the task. The choice is a deterministic function of public
quantities (task, K, n, d, ε, δ, the requested loss and its Huber width), so it costs no
privacy and its record says why:

1. **Regression with δ > 0 and the squared loss** (the default loss of a numeric label):
   ``adassp`` (Wang 2018), when registered. It fits the squared loss, whose error the
   predictions are judged by (RMSE), through sufficient statistics whose sensitivities need
   only ‖x‖ ≤ 1 and |y| ≤ 1, with its own adaptive ridge; the ERM mechanisms fit the Huber
   loss, whose sensitivity 2h trades bias (h small) against noise (h large). Wang 2018 shows
   AdaSSP within constants of the minimax rate for linear regression; its δ > 0 is what it
   needs (≥ its minimum δ). Measured on Adult hours per week (benchmarks/RESULTS.md, issue
   29): the lowest RMSE at ε = 0.1 (11.64 hours against 11.83 for Huber objective
   perturbation at its automatic λ), within 0.04 hours (0.4 %) of it at ε ∈ {0.5, 1, 5}.
2. **Otherwise** (multi-class; regression at δ = 0, or with ``loss: huber`` or a Huber
   width ``h`` and no loss): the candidates
   with a λ rule (:mod:`service.dp.analysis.regularization_tasks`; DP-SGD has none) in the
   public order of :data:`PREFERENCE` — objective perturbation, then output perturbation —
   each at its own rule's λ*; regression candidates fit the Huber loss (width ``h``, default
   0.5). The order is CMS 2011's: objective perturbation's noise enters the gradient and is
   damped by the data's curvature (its Thm 26 needs fewer samples than output
   perturbation's Thm 18 for the same excess risk), which their experiments and the
   multinomial benchmark (service/dp/mechanisms/multiclass.py) confirm. The bound f(λ*) each
   rule minimises is shown per candidate but does not rank them: the noise terms are worst
   cases of different tightness (objective perturbation's ‖b‖²/(n²λ) is a factor ≥ 2 loose
   against output perturbation's ½bᵀHb), so comparing them across mechanisms would prefer
   output perturbation for a looser reason.

The domain layer tries the ranked candidates in order and keeps the first whose calibration
the service admits (:mod:`service.domain.fits.auto_tasks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from service.dp.analysis.regularization import LAMBDA_BOUNDS
from service.dp.analysis.regularization_tasks import (
    TASK_RULE_MECHANISMS,
    auto_regularization_task,
    task_record,
)
from service.dp.core.tasks import TASK_LOSSES
from service.dp.mechanisms import MECHANISMS

__all__ = [
    "PREFERENCE",
    "RULE",
    "TaskCandidate",
    "TaskChoice",
    "rank_for_task",
    "task_candidates",
]

#: The public order of preference among the mechanisms with a λ rule (module docstring);
#: registered mechanisms not listed come after, by name.
PREFERENCE: Final[tuple[str, ...]] = ("adassp", "objective_perturbation", "output_perturbation")
#: The rule in words (the record's ``rule``).
RULE: Final[str] = (
    "regression at δ > 0 with the squared loss: adassp (Wang 2018); otherwise the first of "
    "objective_perturbation, output_perturbation (CMS 2011's order) that fits the task, at "
    "its automatic λ"
)


@dataclass(frozen=True, slots=True)
class TaskCandidate:
    """One mechanism auto considered: its loss, its λ and the rule's record, or why not."""

    mechanism: str
    loss: str | None = None
    regularization: float | None = None
    regularization_rule: Mapping[str, Any] | None = None
    excess_risk_bound: float | None = None
    excluded: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mechanism": self.mechanism}
        if self.excluded is not None:
            return out | {"excluded": self.excluded}
        return out | {
            "loss": self.loss,
            "regularization": self.regularization,
            "excess_risk_bound": self.excess_risk_bound,
        }


@dataclass(frozen=True, slots=True)
class TaskChoice:
    """The ranked candidates (best first) and the reason for the first."""

    task: str
    ranked: tuple[TaskCandidate, ...]
    reason: str
    considered: tuple[TaskCandidate, ...] = field(default_factory=tuple)

    def record(self, chosen: TaskCandidate, why: str | None = None) -> dict[str, Any]:
        """The ``auto`` record of the job, the quote and the model."""
        return {
            "task": self.task,
            "rule": RULE,
            "reason": why or self.reason,
            "chosen": {
                "mechanism": chosen.mechanism,
                "loss": chosen.loss,
                "regularization": chosen.regularization,
            },
            "candidates": [c.to_dict() for c in self.considered],
        }


def task_candidates(task: str) -> list[str]:
    """The registry's private mechanisms that fit ``task``, by name."""
    return sorted(
        name
        for name, mech in MECHANISMS.items()
        if mech.capabilities.private and task in mech.capabilities.tasks
    )


def _adassp_min_delta() -> float:
    from service.dp.mechanisms.noisy_gd import MIN_DELTA

    return MIN_DELTA


def rank_for_task(
    task: str,
    *,
    n_classes: int,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str | None,
    params: Mapping[str, Any] | None = None,
    bounds: tuple[float, float] = LAMBDA_BOUNDS,
    names: Sequence[str] | None = None,
) -> TaskChoice:
    """The candidates of the module docstring's rule, best first. ``loss`` is the requested
    loss (None: the task's default). ``ValueError`` when no candidate remains."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("auto needs a finite ε > 0")
    params = dict(params or {})
    if loss is not None and loss not in TASK_LOSSES.get(task, ()):
        raise ValueError(
            f"the {loss!r} loss does not fit {task} labels (use "
            f"{', '.join(TASK_LOSSES.get(task, ()))})"
        )
    names = task_candidates(task) if names is None else list(names)
    rules = TASK_RULE_MECHANISMS.get(task, frozenset())
    considered: list[TaskCandidate] = []
    usable: list[TaskCandidate] = []
    # a Huber width without a loss asks for the Huber loss
    squared = task == "regression" and (loss == "squared" or (loss is None and "h" not in params))
    for name in names:
        if name not in rules:
            considered.append(
                TaskCandidate(
                    name,
                    excluded="no automatic λ rule (its excess risk depends on "
                    "its steps and epochs as much as on λ)",
                )
            )
            continue
        if name == "adassp":
            if not squared:
                considered.append(TaskCandidate(name, excluded="fits the squared loss only"))
                continue
            if not delta >= _adassp_min_delta():
                considered.append(TaskCandidate(name, excluded="needs δ > 0"))
                continue
            cand_loss = "squared"
        else:
            cand_loss = "huber" if task == "regression" else "logistic"
        try:
            choice = auto_regularization_task(
                name,
                task=task,
                n_classes=n_classes,
                n=n,
                d=d,
                epsilon=epsilon,
                delta=delta,
                loss=cand_loss,
                params=params,
                bounds=bounds,
            )
        except ValueError as exc:
            considered.append(TaskCandidate(name, excluded=str(exc)))
            continue
        candidate = TaskCandidate(
            name,
            loss=cand_loss,
            regularization=choice.regularization,
            regularization_rule=task_record(choice),
            excess_risk_bound=choice.terms.get("excess_risk_bound"),
        )
        considered.append(candidate)
        usable.append(candidate)
    if not usable:
        raise ValueError(f"no private mechanism with an automatic λ fits {task} labels here")
    adassp = [c for c in usable if c.mechanism == "adassp"]
    others = sorted(
        (c for c in usable if c.mechanism != "adassp"),
        key=lambda c: (
            PREFERENCE.index(c.mechanism) if c.mechanism in PREFERENCE else len(PREFERENCE),
            c.mechanism,
        ),
    )
    if adassp:
        reason = (
            f"regression at δ = {delta:g} > 0 with the squared loss: AdaSSP fits the squared "
            "loss with its own adaptive ridge"
        )
    else:
        best = others[0]
        reason = (
            f"{best.mechanism} is first in the public order of preference "
            f"({', '.join(p for p in PREFERENCE if p != 'adassp')}) among the mechanisms "
            f"that fit {task} labels with an automatic λ"
        )
        if task == "regression":
            reason += (
                " with the huber loss (δ = 0 or huber requested: AdaSSP needs δ > 0 and the "
                "squared loss)"
            )
    return TaskChoice(task, tuple(adassp + others), reason, tuple(considered))
