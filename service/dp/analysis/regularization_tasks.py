"""λ ``"auto"`` for multi-class and regression fits (issue 29): the binary rule's bound with
the new tasks' constants. Pure; spends nothing.

The binary rule (:mod:`service.dp.analysis.regularization`, whose derivation this module
extends and whose constants R and A it reuses) minimises over λ

    f(λ) = (λ/2)R² + (estimation term) + (noise term)

from public quantities. Three constants of the task's loss enter, all stated by the
mechanisms' own proofs (:mod:`service.dp.mechanisms.multiclass`,
:mod:`service.dp.core.regression_losses`):

* **L**, the Lipschitz constant of one row's loss in the model's norm (Frobenius for a K × d
  matrix). Binary: 1. Multinomial logistic: ‖(p − e_y)xᵀ‖_F ≤ √2, L = √2. Huber regression
  of width h: |ℓ′| ≤ h, L = h. The replace-one gradient sensitivity is 2L, so every noise law
  scales with L: the norm-exponential noise of objective perturbation has ‖b‖ ~ Gamma(D, 2L/ε)
  and output perturbation's Gamma(D, 2L/(nλε)); the stability of λ-strongly convex RERM with
  L-Lipschitz losses is 2L²/(λn) (Shalev-Shwartz & Ben-David 2014, Cor. 13.8), so the
  estimation term is 2A·L²/(λn).
* **D**, the noise dimension: d (binary, regression), dK (multi-class: the release is vec C
  ∈ ℝ^{dK}).
* **c_tr**, a bound on the trace of the loss part of J's Hessian (what output perturbation's
  isotropic noise sees: E bᵀHb = E‖b‖²·tr H / D). Binary: c (tr S ≤ 1). Multinomial:
  (1/n)Σ tr(diag p − ppᵀ)‖x‖² ≤ 1 − ‖p‖² ≤ 1 − 1/K. Huber regression: ℓ″ ≤ 1, c_tr = 1.

Then, exactly as in the binary derivation:

* objective perturbation: m₂ = E‖b‖² = D(D + 1)(2L/ε)² and f(λ) = (λ/2)R² + (2AL²/n +
  m₂/n²)/λ, so λ* = √(4AL²·n + 2m₂)/(n·R). Multi-class: m₂ = 8·dK(dK + 1)/ε², L² = 2.
  Regression (Huber h): m₂ = 4h²·d(d + 1)/ε², L² = h².
* output perturbation: E‖b‖² = D(D + 1)(2L/(nλε))², noise term ½(c_tr/D + λ)E‖b‖² =
  2L²(D + 1)(c_tr + Dλ)/(n²λ²ε²); f′(λ)·λ³ = 0 is

      (R²/2)λ³ − (2AL²/n + 2L²D(D + 1)/(n²ε²))λ − 4L²c_tr(D + 1)/(n²ε²) = 0,

  which is the binary cubic of :func:`~service.dp.analysis.regularization.output_lambda` at
  (d, ε, c, A) → (D, ε/L, c_tr, A·L²): the same positive root, found by the same bisection.
* ``non_private``: λ* = 2L√A/(R√n). For the squared loss (no global L) L = 1, the bound on
  |ℓ′(r)| = |y| at w = 0 (labels in [−1, 1]): the local constant where the ridge starts.
* ``adassp`` (regression, squared loss): its own adaptive ridge λ_A = max(0, σ₂(2√d + t) − λ̃)
  (Wang 2018 Alg. 2, :mod:`service.dp.mechanisms.adassp`) is the data-adaptive λ, computed
  from released values inside the fit; the request's λ only adds nλ on top. So λ "auto" is
  the smallest λ the service accepts, and the ridge is AdaSSP's own.

DP-SGD (its excess risk depends on the steps and epochs as much as on λ) has no rule, as for
binary fits; objective and output perturbation have none for the squared regression loss,
which they refuse (no Lipschitz bound). Both are a ``ValueError`` (→ 422, nothing charged).

Constants. A = 0.01 is the binary calibration's. The comparator norm R is calibrated per task
and mechanism (:data:`TASK_NORMS`) by ``benchmarks/calibrate_lambda_tasks.py`` on synthetic
multi-class (softmax) and regression (linear, clipped) families only — never the benchmark
datasets — as the R of the grid 0.25…50 with the smallest mean gap to the best λ in hindsight
(72 cells: d ∈ {10, 30}, n ∈ {2000, 10⁴}, ε ∈ {0.5, 1}, K ∈ {3, 5}, λ grid 10⁻⁵…10; output
in ``benchmarks/calibration/lambda_rule_tasks.json``; benchmarks/RESULTS.md, "Automatic λ for
multi-class and regression"):

* multi-class objective perturbation: R = 10 (the binary value; gap 1.3 accuracy points);
* multi-class output perturbation: R = 5ε (below; the first study's constant R = 0.5 had
  gap 2.3 points there, 7.5 at R = 10);
* regression objective perturbation (Huber): R = 3, from the wider Huber study below (the
  first study's centred families gave R = 5, gap 0.003 RMSE in [−1, 1] units);
* regression output perturbation (Huber): R = 1 (gap 0.013; 0.20 at R = 10), confirmed by the
  wider study.

The wider Huber study (``calibrate_lambda_tasks --huber``; 216 cells, synthetic only) adds
what the first one lacked and real bounded labels have: labels centred off the middle of
their bounds (offset 0 or −0.4 in [−1, 1] units; the ridge shrinks every prediction towards
the middle, 0, not towards the mean), d up to 100 and ε down to 0.1, n ∈ {2000, 10⁴}, and
widths h ∈ {0.1, 0.25, 0.5}. Mean RMSE gap to the best λ in hindsight at h = ½: objective
perturbation 0.018 at R = 3 against 0.024 at R = 5; output perturbation 0.014 at R = 1
(0.014 at 1.5, 0.020 at 2).

The Huber width h stays the request's (default ½); the rule takes it as given. Why the study
found it nearly irrelevant (best-R gaps 0.016–0.020 for h ∈ {0.1, 0.25, ½}): for residuals
beyond h the loss is h|r| − h²/2, whose minimiser at λ is that of |r| at λ/h, and its noise
(∝ L = h) shrinks with h as fast as the curvature of the rows it still sees; below h it is the
squared loss, whose noise grows with h at the same curvature. So h only trades the fraction
of residuals in the quadratic part against noise ∝ h, and the λ rule (which scales with L = h)
absorbs most of it; no public rule for h from the bounds or ε beat the default here.

That output perturbation wants a much larger λ than its bound gives at R = 10 is measured,
not derived (a smaller R moves every λ* up): its bound is on the regularised objective J,
while the test score depends on how the noise of norm ~ 2LD/(nλε) moves the predictions.
``non_private`` keeps R = 10 (not calibrated here).

Multi-class output perturbation on encoded tabular rows (``calibrate_lambda_tasks --sparse``,
``--combine``; RESULTS.md, "Multi-class output perturbation on sparse one-hot rows"): at a
large λ the release is ≈ ∇J(0)/λ, the class-centroid classifier. On centred softmax families
that is nearly as good as the fit, so a too-large λ costs little; on non-negative one-hot rows
(a large common component) with imbalanced classes its term (n_k − n/K)·μᵀx makes it predict
the majority class, and the best λ sits just above the noise cliff (≈ 0.01 at ε ≥ 0.5). No
public quantity separates the two kinds (n, d, K, ε span the same ranges in both), and a
constant R fits both badly (best mean gap over the families 0.027 at R = 0.5). What does
separate their needs is ε: at ε = 0.1 the noise cliff sits above the plateau's start and both
kinds want R ≈ 0.5; at ε ≥ 0.5 the sparse kind wants R ≈ 5. So the comparator norm grows with
the budget, **R = 5ε** (grid R₁ε^a, R₁ ∈ 0.5…10, a ∈ {0, ½, 1, 3/2, 2}; mean gap over the
families 0.020: softmax 0.033, sparse 0.014), measured, not derived. At ε = 0.1 it is the old
R = 0.5; in the cubic's linear regime λ ≈ 2L·D/(n·ε·R) = 2L·D/(5n·ε²).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from service.dp.analysis.regularization import (
    ESTIMATION_WEIGHT,
    LAMBDA_BOUNDS,
    NORM_CONSTANT,
    RegularizationChoice,
    objective_lambda,
    output_lambda,
)
from service.dp.core.options import DEFAULT_HUBER_H

__all__ = [
    "ADASSP_RULE",
    "TASK_NORMS",
    "TASK_NORMS_PER_EPSILON",
    "TASK_RULE_MECHANISMS",
    "TaskConstants",
    "auto_regularization_task",
    "excess_risk_objective",
    "task_constants",
    "task_record",
]

#: The calibrated comparator norm R per (task, mechanism) (module docstring); those of
#: :data:`TASK_NORMS_PER_EPSILON` scale with ε, others use the binary R.
TASK_NORMS: Final[dict[tuple[str, str], float]] = {
    ("multiclass", "objective_perturbation"): 10.0,
    ("regression", "objective_perturbation"): 3.0,
    ("regression", "output_perturbation"): 1.0,
}
#: (task, mechanism) whose comparator norm grows with the privacy budget: R = coefficient · ε
#: (module docstring, "Multi-class output perturbation on encoded tabular rows").
TASK_NORMS_PER_EPSILON: Final[dict[tuple[str, str], float]] = {
    ("multiclass", "output_perturbation"): 5.0,
}
#: Mechanisms with a rule, per task (anything else is a ValueError → 422).
TASK_RULE_MECHANISMS: Final[dict[str, frozenset[str]]] = {
    "multiclass": frozenset({"objective_perturbation", "output_perturbation", "non_private"}),
    "regression": frozenset(
        {"objective_perturbation", "output_perturbation", "non_private", "adassp"}
    ),
}
#: The formula the record of an ``adassp`` fit shows.
ADASSP_RULE: Final[str] = (
    "λ = the smallest accepted λ: AdaSSP's own adaptive ridge λ_A = max(0, σ₂(2√d + t) − λ̃) "
    "(Wang 2018 Alg. 2) regularises; the request's λ only adds nλ"
)
_OBJECTIVE_FORMULA = "λ = √(4A·L²·n + 2m₂)/(n·R), m₂ = D(D + 1)(2L/ε)²"
_OUTPUT_FORMULA = (
    "λ = the positive root of (R²/2)λ³ − (2AL²/n + 2L²D(D+1)/(n²ε²))λ − 4L²c_tr(D+1)/(n²ε²) = 0"
)
_NON_PRIVATE_FORMULA = "λ = 2L√A/(R·√n)"
_SOURCE = (
    "docstring of service/dp/analysis/regularization_tasks.py (the binary rule's bound with "
    "the task's L, D and c_tr); R calibrated per task and mechanism by "
    "benchmarks/calibrate_lambda_tasks.py, A by benchmarks/calibrate_lambda.py, on synthetic "
    "public data"
)


@dataclass(frozen=True, slots=True)
class TaskConstants:
    """L (Lipschitz constant of a row's loss), D (noise dimension) and c_tr (bound on the
    trace of the loss Hessian) of a task and loss (module docstring)."""

    lipschitz: float
    dimension: int
    curvature_trace: float


def task_constants(
    task: str, *, d: int, n_classes: int, loss: str, h: float = DEFAULT_HUBER_H
) -> TaskConstants:
    """The constants of the module docstring; ``ValueError`` for a loss the task has none for."""
    if task == "multiclass":
        if loss != "logistic":
            raise ValueError("multi-class fits use the logistic (multinomial) loss")
        K = int(n_classes)
        return TaskConstants(math.sqrt(2.0), d * K, 1.0 - 1.0 / K)
    if task == "regression":
        if loss == "huber":
            return TaskConstants(float(h), d, 1.0)
        if loss == "squared":
            return TaskConstants(math.inf, d, 1.0)
        raise ValueError("regression fits use the squared or huber loss")
    raise ValueError(f"no task rule for {task!r} (binary fits use the binary rule)")


def excess_risk_objective(
    mechanism: str,
    lam: float,
    *,
    n: int,
    epsilon: float,
    constants: TaskConstants,
    norm: float = NORM_CONSTANT,
    weight: float = ESTIMATION_WEIGHT,
) -> float:
    """f(λ), the bound the rule minimises (module docstring), for objective or output
    perturbation: what ``auto`` compares between them."""
    L2 = constants.lipschitz**2
    D = constants.dimension
    bias = lam / 2.0 * norm * norm
    estimation = 2.0 * weight * L2 / (lam * n)
    if mechanism == "objective_perturbation":
        m2 = D * (D + 1) * 4.0 * L2 / epsilon**2
        return bias + estimation + m2 / (n * n * lam)
    if mechanism == "output_perturbation":
        noise = 2.0 * L2 * (D + 1) * (constants.curvature_trace + D * lam)
        return bias + estimation + noise / (n * n * lam * lam * epsilon**2)
    raise ValueError(f"no excess-risk bound for {mechanism!r}")


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer")
    return value


def auto_regularization_task(
    mechanism: str,
    *,
    task: str,
    n_classes: int,
    n: int,
    d: int,
    epsilon: float | None,
    delta: float = 0.0,
    loss: str,
    params: Mapping[str, Any] | None = None,
    bounds: tuple[float, float] = LAMBDA_BOUNDS,
    norm: float | None = None,
    weight: float = ESTIMATION_WEIGHT,
) -> RegularizationChoice:
    """λ for ``mechanism`` on a multi-class or regression problem from public n, d, K, ε, δ,
    the loss and its Huber width ``params['h']``, clamped to ``bounds``; the same record as
    the binary rule, with the task's constants in ``inputs``. ``ValueError`` (→ 422) for a
    mechanism or loss without a rule."""
    params = dict(params or {})
    per_epsilon = TASK_NORMS_PER_EPSILON.get((task, mechanism)) if norm is None else None
    if per_epsilon is not None and epsilon is not None and epsilon > 0:
        norm = per_epsilon * float(epsilon)  # a bad ε is refused below
    if norm is None:
        norm = TASK_NORMS.get((task, mechanism), NORM_CONSTANT)
    rules = TASK_RULE_MECHANISMS.get(task)
    if rules is None:
        raise ValueError(f"no task rule for {task!r}")
    if mechanism not in rules:
        raise ValueError(
            f"regularization 'auto' has no rule for {mechanism!r} on {task} labels (rules "
            f"exist for {', '.join(sorted(rules))}): give a numeric regularization"
        )
    n, d = _positive_int(n, "n"), _positive_int(d, "d")
    h = params.get("h", DEFAULT_HUBER_H)
    if isinstance(h, bool) or not isinstance(h, int | float) or not (0 < h < math.inf):
        raise ValueError("the Huber width h must be a finite number > 0")
    if mechanism == "adassp" and loss != "squared":
        raise ValueError("adassp fits the squared loss")
    constants = task_constants(task, d=d, n_classes=int(n_classes), loss=loss, h=float(h))
    L = constants.lipschitz
    inputs: dict[str, Any] = {
        "n": n,
        "d": d,
        "task": task,
        "n_classes": int(n_classes),
        "row_norm_bound": 1.0,
        "loss": loss,
        "noise_dimension": constants.dimension,
        "curvature_trace": constants.curvature_trace,
    }
    if loss == "huber":
        inputs["huber_h"] = float(h)
    terms: dict[str, float] = {}
    lo, hi = bounds
    if mechanism == "adassp":
        inputs["lipschitz"] = None
        value, formula = lo, ADASSP_RULE
    elif mechanism == "non_private":
        L = 1.0 if math.isinf(L) else L
        inputs["lipschitz"] = L
        value = 2.0 * L * math.sqrt(weight) / (norm * math.sqrt(n))
        formula = _NON_PRIVATE_FORMULA
    else:
        if math.isinf(L):
            raise ValueError(
                f"{mechanism} fits regression with the huber loss only (the squared loss has "
                "no Lipschitz bound): no rule for the squared loss"
            )
        if epsilon is None or not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError("ε must be a finite number > 0")
        if not (math.isfinite(delta) and 0.0 <= delta < 1.0):
            raise ValueError("δ must be in [0, 1)")
        inputs.update(epsilon=float(epsilon), delta=float(delta), lipschitz=L)
        D = constants.dimension
        if mechanism == "objective_perturbation":
            m2 = D * (D + 1) * 4.0 * L * L / float(epsilon) ** 2
            terms["m2"] = m2
            value = objective_lambda(n, m2, norm, weight * L * L)
            formula = _OBJECTIVE_FORMULA
        else:
            value = output_lambda(
                n, D, float(epsilon) / L, constants.curvature_trace, norm, weight * L * L
            )
            formula = _OUTPUT_FORMULA
            if per_epsilon is not None:
                formula += f", R = {per_epsilon:g}ε"
        terms["excess_risk_bound"] = excess_risk_objective(
            mechanism,
            value,
            n=n,
            epsilon=float(epsilon),
            constants=constants,
            norm=norm,
            weight=weight,
        )
    chosen = min(max(value, lo), hi)
    return RegularizationChoice(
        regularization=float(chosen),
        mechanism=mechanism,
        formula=formula,
        inputs=inputs,
        constants={"R": float(norm), "A": float(weight)},
        unclamped=float(value),
        clamped=chosen != value,
        terms=terms,
    )


def task_record(choice: RegularizationChoice) -> dict[str, Any]:
    """The record of a task rule's choice: the binary record's fields, with this module as
    its source."""
    return choice.record() | {"source": _SOURCE}
