"""λ from public quantities (issue 28 item 1): the ``"auto"`` regularisation. Pure; spends nothing.

The rule sees only what the request makes public — n, d, the row bound ‖x‖ ≤ 1, ε, δ, the loss
(through its curvature bound c) and the mechanism — and one constant R calibrated on public
synthetic data shipped with the repository (``benchmarks/calibrate_lambda.py``, its output in
``benchmarks/calibration/lambda_rule.json``), never on the data being fitted. Its value is
therefore public: choosing it costs no privacy, and the ledger charges the fit at the chosen λ
exactly as if the caller had typed it.

Derivation
----------
Write L(w) = E ℓ(y wᵀx) for the population risk, J(w) = (1/n) Σᵢ ℓ(yᵢ wᵀxᵢ) + (λ/2)‖w‖² for
the regularised empirical objective, ŵ its minimiser and w_priv the released model. Let
w° be any fixed comparator (the best model, say) and R ≥ ‖w°‖. With |ℓ′| ≤ 1 and ‖x‖ ≤ 1
(1-Lipschitz losses) and 0 ≤ ℓ″ ≤ c, three terms bound the excess risk E L(w_priv) − L(w°):

1. **Regularisation bias and estimation** (Shalev-Shwartz & Ben-David 2014, Cor. 13.8, in the
   (λ/2)‖w‖² convention: λ-strongly convex RERM with 1-Lipschitz losses is 2/(λn)-stable):
   E L(ŵ) − L(w°) ≤ (λ/2)R² + 2/(λn).
2. **Noise of output perturbation** (CMS 2011 Alg. 1): w_priv = ŵ + b, b independent of the
   data with a uniform direction and E‖b‖² = d(d + 1)(2/(nλε))² (‖b‖ ~ Gamma(d, 2/(nλε))).
   The Hessian of J is everywhere ⪯ cS + λI with S = (1/n) Σ xᵢxᵢᵀ, tr S ≤ 1, so for an
   isotropic b, E[J(ŵ + b) − J(ŵ)] ≤ ½ E[bᵀ(cS + λI)b] ≤ ½ (c/d + λ) E‖b‖²
   = 2(d + 1)(c + dλ)/(n²λ²ε²).
3. **Noise of objective perturbation** (CMS 2011 Alg. 2; Kifer et al. 2012; Rajkumar &
   Agarwal 2012): w_priv minimises J_b = J + bᵀw/n. Then J(w_priv) − J(ŵ) =
   [J_b(w_priv) − J_b(ŵ)] + bᵀ(ŵ − w_priv)/n ≤ ‖b‖·‖ŵ − w_priv‖/n ≤ ‖b‖²/(n²λ) (the first
   bracket is ≤ 0, and λ-strong convexity gives ‖ŵ − w_priv‖ ≤ ‖b‖/(nλ)); in expectation
   m₂/(n²λ) with m₂ = E‖b‖² the noise law's second moment:
   * ``objective_perturbation`` and ``generalized_objective_perturbation`` at δ = 0:
     ‖b‖ ~ Gamma(d, 2/ε), m₂ = 4d(d + 1)/ε²;
   * ``gaussian_objective_perturbation``: b ~ N(0, σ²I), σ = σ*(d, ε, δ) of
     :func:`~service.dp.mechanisms.gaussian_objective.gop_sigma`, m₂ = dσ²;
   * ``generalized_objective_perturbation`` at δ > 0: b ~ N(0, σ²I), σ of
     :func:`~service.dp.mechanisms.generalized_objective.gaussian_sigma`, m₂ = dσ².

   The noise budget is taken as the whole ε: the Jacobian part ln(1 + c/(n(λ + Δ))) and the
   certified-release part ε_r are small at the λ this rule picks for all but tiny n, and
   when they are not the mechanism adds its own Δ (extra regularisation), which only moves
   the effective λ up towards the rule's.

The three bounds are worst cases of different tightness (the estimation term holds for every
distribution, the noise terms for every Hessian), so the estimation term enters with a
calibrated weight A (A = 1 is the worst case). Minimising the sum over λ:

* objective-type mechanisms: f(λ) = (λ/2)R² + (2A/n + m₂/n²)/λ, so

      λ* = √(4A·n + 2m₂) / (n·R);

  ``generalized_objective_perturbation`` already adds Δ = Δ_K/n with Δ_K = ``kifer_Delta``
  (default 2c/ε), which is regularisation too: its λ is λ* − Δ (clamped below);
* ``output_perturbation``: f(λ) = (λ/2)R² + 2A/(λn) + 2(d + 1)(c + dλ)/(n²λ²ε²); f′(λ)·λ³ = 0
  is

      (R²/2)λ³ − (2A/n + 2d(d + 1)/(n²ε²))·λ − 4c(d + 1)/(n²ε²) = 0,

  a cubic with exactly one positive root (Descartes: one sign change), found by bisection
  on its increasing part (to relative 1e-12);
* ``non_private``: no noise term, λ* = 2√A/(R√n).

Every λ* (for ``generalized_objective_perturbation`` the total λ* = λ + Δ) decreases as n or
ε grows (m₂ decreases in ε; in the cubic the negative coefficients
shrink), and grows with d. DP-SGD (whose excess risk depends on the step sizes and epochs as
much as on λ) and the stacking mechanisms have no rule here: ``auto`` refuses them
(:data:`AUTO_MECHANISMS`).

Calibration of R and A
----------------------
The comparator norm R that makes the rule pick the best λ is not a known ‖w°‖: R
(:data:`NORM_CONSTANT`) and A (:data:`ESTIMATION_WEIGHT`) are public constants fitted once by
``benchmarks/calibrate_lambda.py`` to the λ that maximised test accuracy of
objective perturbation on synthetic logistic families drawn from a fixed public law
(d ∈ {10, 30, 100}, n ∈ {10³, 10⁴, 3·10⁴}, ε ∈ {0.05, 0.1, 0.5, 1}, two signal strengths; no
real data set), over the grid R ∈ {2 … 250} × A ∈ {0.01, 0.03, 0.1, 0.3, 1}: R = 10, A = 0.01
(mean gap to the best λ in hindsight 1.35 accuracy points over the 72 cells; A = 1 gave 1.71,
and A → 0 no better than 0.01 — the worst-case stability bound is far from binding next to the
noise; A > 0 keeps a non-private λ). The same constants serve every mechanism. The result is
finally clamped to the service's λ range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from service.dp.core.losses import get_loss

__all__ = [
    "AUTO_MECHANISMS",
    "ESTIMATION_WEIGHT",
    "NORM_CONSTANT",
    "RULE_NAME",
    "RegularizationChoice",
    "auto_regularization",
    "noise_second_moment",
    "objective_lambda",
    "output_lambda",
]

#: The calibrated comparator norm R (benchmarks/calibration/lambda_rule.json).
NORM_CONSTANT: Final[float] = 10.0
#: The calibrated weight A of the estimation (stability) term (A = 1: the worst-case bound).
ESTIMATION_WEIGHT: Final[float] = 0.01
#: The name the record shows.
RULE_NAME: Final[str] = "excess_risk_minimiser"
#: Mechanisms with a rule (``auto`` is refused for the others).
AUTO_MECHANISMS: Final[frozenset[str]] = frozenset(
    {
        "non_private",
        "output_perturbation",
        "objective_perturbation",
        "generalized_objective_perturbation",
        "gaussian_objective_perturbation",
    }
)
#: The service's λ range (equal to service.domain.ranges', checked by a test; service.dp may
#: not import the domain layer).
LAMBDA_BOUNDS: Final[tuple[float, float]] = (1e-10, 1e6)

_OBJECTIVE_FORMULA = "λ = √(4A·n + 2m₂)/(n·R) − Δ_extra, m₂ = E‖b‖² of the noise law"
_OUTPUT_FORMULA = (
    "λ = the positive root of (R²/2)λ³ − (2A/n + 2d(d+1)/(n²ε²))λ − 4c(d+1)/(n²ε²) = 0"
)
_NON_PRIVATE_FORMULA = "λ = 2√A/(R·√n)"


@dataclass(frozen=True, slots=True)
class RegularizationChoice:
    """The chosen λ and everything needed to recompute it by hand (the record's
    ``regularization_rule``)."""

    regularization: float
    mechanism: str
    formula: str
    inputs: Mapping[str, Any]
    constants: Mapping[str, float]
    unclamped: float
    clamped: bool
    terms: Mapping[str, float] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The JSON the calibration, the record and the response show."""
        return {
            "name": RULE_NAME,
            "mechanism": self.mechanism,
            "formula": self.formula,
            "inputs": dict(self.inputs),
            "constants": dict(self.constants),
            "terms": dict(self.terms),
            "unclamped": self.unclamped,
            "clamped": self.clamped,
            "regularization": self.regularization,
            "source": "docstring of service/dp/analysis/regularization.py; R calibrated by "
            "benchmarks/calibrate_lambda.py on synthetic public data",
        }


def noise_second_moment(mechanism: str, *, d: int, epsilon: float, delta: float) -> float:
    """m₂ = E‖b‖² of an objective-type mechanism's noise at the whole budget (docstring)."""
    if mechanism == "objective_perturbation" or (
        mechanism == "generalized_objective_perturbation" and delta == 0.0
    ):
        return 4.0 * d * (d + 1) / epsilon**2
    if mechanism == "gaussian_objective_perturbation":
        from service.dp.mechanisms.gaussian_objective import gop_sigma

        if not 0.0 < delta < 1.0:
            raise ValueError("gaussian_objective_perturbation needs 0 < δ < 1")
        sigma, _ = gop_sigma(d, epsilon, delta)
        return d * sigma**2
    if mechanism == "generalized_objective_perturbation":
        from service.dp.mechanisms.generalized_objective import (
            gaussian_sigma,
            gaussian_tail_quantile,
        )

        sigma = gaussian_sigma(epsilon, gaussian_tail_quantile(d, delta))
        return d * sigma**2
    raise ValueError(f"no noise law for {mechanism!r}")


def objective_lambda(n: int, second_moment: float, norm: float, weight: float) -> float:
    """λ* = √(4A·n + 2m₂)/(n·R): the minimiser of (λ/2)R² + (2A/n + m₂/n²)/λ."""
    return math.sqrt(4.0 * weight * n + 2.0 * second_moment) / (n * norm)


def output_lambda(n: int, d: int, epsilon: float, c: float, norm: float, weight: float) -> float:
    """The positive root of (R²/2)λ³ − pλ − q = 0, p = 2A/n + 2d(d+1)/(n²ε²),
    q = 4c(d+1)/(n²ε²) (docstring), by bisection to relative 1e-12."""
    a = norm * norm / 2.0
    p = 2.0 * weight / n + 2.0 * d * (d + 1) / (n * n * epsilon * epsilon)
    q = 4.0 * c * (d + 1) / (n * n * epsilon * epsilon)

    def g(lam: float) -> float:
        return a * lam**3 - p * lam - q

    # g(0) = −q < 0, g is negative on (0, √(p/(3a))] (it decreases there), so the root lies
    # above lo = √(p/(3a)), and g(hi) > 0 for hi = √(2p/a) + (2q/a)^(1/3).
    lo = math.sqrt(p / (3.0 * a))
    hi = math.sqrt(2.0 * p / a) + float(math.pow(2.0 * q / a, 1.0 / 3.0))
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if g(mid) > 0.0:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def auto_regularization(
    mechanism: str,
    *,
    n: int,
    d: int,
    epsilon: float | None,
    delta: float = 0.0,
    loss: str = "logistic",
    params: Mapping[str, Any] | None = None,
    bounds: tuple[float, float] = LAMBDA_BOUNDS,
    norm: float = NORM_CONSTANT,
    weight: float = ESTIMATION_WEIGHT,
) -> RegularizationChoice:
    """λ for ``mechanism`` from public n, d, ε, δ, loss (and the Huber width ``params['h']``,
    Kifer's ``params['kifer_Delta']``), clamped to ``bounds``. ``ValueError`` for a
    mechanism without a rule or invalid inputs (the caller turns it into a 422)."""
    params = dict(params or {})
    if mechanism not in AUTO_MECHANISMS:
        raise ValueError(
            f"regularization 'auto' has no rule for {mechanism!r} (rules exist for "
            f"{', '.join(sorted(AUTO_MECHANISMS))}): give a numeric regularization"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("n must be a positive integer")
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError("d must be a positive integer")
    if not (math.isfinite(norm) and norm > 0 and math.isfinite(weight) and weight > 0):
        raise ValueError("the rule's constants must be finite and > 0")
    h = params.get("h", 0.5)
    if isinstance(h, bool) or not isinstance(h, int | float) or not (0 < h < math.inf):
        raise ValueError("the Huber width h must be a finite number > 0")
    c = float(get_loss(loss, h=float(h)).c)
    inputs: dict[str, Any] = {"n": n, "d": d, "row_norm_bound": 1.0, "loss": loss, "c": c}
    constants = {"R": float(norm), "A": float(weight)}
    terms: dict[str, float] = {}
    if mechanism == "non_private":
        value = 2.0 * math.sqrt(weight) / (norm * math.sqrt(n))
        formula = _NON_PRIVATE_FORMULA
    else:
        if epsilon is None or not (math.isfinite(epsilon) and epsilon > 0):
            raise ValueError("ε must be a finite number > 0")
        if not (math.isfinite(delta) and 0.0 <= delta < 1.0):
            raise ValueError("δ must be in [0, 1)")
        inputs.update(epsilon=float(epsilon), delta=float(delta))
        if mechanism == "output_perturbation":
            value = output_lambda(n, d, float(epsilon), c, norm, weight)
            formula = _OUTPUT_FORMULA
        else:
            m2 = noise_second_moment(mechanism, d=d, epsilon=epsilon, delta=delta)
            extra = 0.0
            if mechanism == "generalized_objective_perturbation":
                kifer = params.get("kifer_Delta", 2.0 * c / float(epsilon))
                if isinstance(kifer, bool) or not isinstance(kifer, int | float) or kifer < 0:
                    raise ValueError("kifer_Delta must be a number ≥ 0")
                extra = float(kifer) / n
            total = objective_lambda(n, m2, norm, weight)
            terms = {"m2": m2, "lambda_total": total, "Delta_extra": extra}
            value = terms["lambda_total"] - extra
            formula = _OBJECTIVE_FORMULA
    lo, hi = bounds
    chosen = min(max(value, lo), hi)
    return RegularizationChoice(
        regularization=float(chosen),
        mechanism=mechanism,
        formula=formula,
        inputs=inputs,
        constants=constants,
        unclamped=float(value),
        clamped=chosen != value,
        terms=terms,
    )
