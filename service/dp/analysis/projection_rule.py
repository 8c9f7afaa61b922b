"""A public projection dimension for objective perturbation (issue 28 item 3: the settings
``"mechanism": "auto"`` chooses). Pure; spends nothing.

Objective perturbation draws its noise b in every one of the d encoded dimensions
(‖b‖ ~ Gamma(d, 2/ε′)), so on few rows the noise, not the data, decides the model. A public
random projection z = clip(Rx), R ∈ ℝ^{k×d} drawn independently of the data
(:mod:`service.dp.data.projection`; the mechanism's ``projection_dim`` option), lets the fit
pay for k dimensions instead of d, at the price of the part of the signal R does not keep.

Derivation of the form
----------------------
At the automatic λ (:mod:`service.dp.analysis.regularization`) the noise part of objective
perturbation's excess-risk bound is min_λ (λ/2)R² + m₂/(n²λ) = R·√(2m₂)/n with
m₂ = E‖b‖² = 4k(k + 1)/ε², i.e. ≈ 2√2·R·k/(nε): linear in k/(nε). What the projection loses
is data dependent: for a fixed comparator w°, the margins y·w°ᵀx are distorted by R by a
relative amount of order 1/√k (Johnson–Lindenstrauss), and much less when the rows lie close
to a low-dimensional subspace, as correlated real features do. Balancing a/√k against
b·k/(nε) gives k ∝ (nε)^{2/3}. When k is close to d the noise saved, a factor k/d, is small
while the distortion is paid in full, so the rule switches the projection off well below d:

    k = max(k_min, ⌈c·(n·ε)^{2/3}⌉),  no projection when k ≥ d/3 (3k ≥ d),

from public n, d and ε only (the ε the fit runs at). It is public: telling the caller k
releases nothing, and the ledger charges the fit as for any other option.

Calibration
-----------
The form, c ≈ 0.141, k_min = 2 and the off-switch at d/3 were chosen by
``benchmarks/calibrate_projection.py`` on the synthetic logistic families of
``benchmarks/calibrate_lambda.py`` (96 cells) and on Adult (4 cells) only, among the forms
⌈nε/c⌉, ⌈c·(nε)^{2/3}⌉ and ⌈c·√(nε)⌉ with floors 2–8 and off-switches at d, d/2 and d/3: the
largest mean gain (+1.37 accuracy points over objective perturbation without projection, both at
the automatic λ) among the rules with no cell losing beyond two standard errors
(``benchmarks/calibration/projection_rule.json``). Breast cancer, digits and a Fashion-MNIST
binary task were held out for the evaluation (benchmarks/RESULTS.md, "A public projection
dimension for objective perturbation").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from service.dp.analysis.regularization import RegularizationChoice, auto_regularization

__all__ = [
    "MIN_DIMENSION",
    "OFF_FRACTION",
    "PROJECTION_MECHANISMS",
    "SCALE",
    "ProjectionChoice",
    "auto_projection",
    "projected_regularization",
    "rule_dimension",
]

#: c in k = ⌈c·(nε)^{2/3}⌉ (benchmarks/calibration/projection_rule.json: √0.02).
SCALE: Final[float] = 0.1414213562373095
#: k_min: the smallest projection the rule picks.
MIN_DIMENSION: Final[int] = 2
#: θ: no projection when k ≥ θ·d.
OFF_FRACTION: Final[float] = 1.0 / 3.0
#: Mechanisms whose ``projection_dim`` the rule sets.
PROJECTION_MECHANISMS: Final[frozenset[str]] = frozenset({"objective_perturbation"})
_FORMULA = "k = max(k_min, ⌈c·(n·ε)^(2/3)⌉); no projection when k ≥ d/3"


@dataclass(frozen=True, slots=True)
class ProjectionChoice:
    """The projection dimension the rule picked, with what it was computed from (the record's
    ``projection_rule``)."""

    dimension: int
    inputs: Mapping[str, Any]
    constants: Mapping[str, float] = field(
        default_factory=lambda: {
            "c": SCALE,
            "k_min": float(MIN_DIMENSION),
            "off_fraction": OFF_FRACTION,
        }
    )

    def record(self) -> dict[str, Any]:
        """The JSON the auto record shows."""
        return {
            "formula": _FORMULA,
            "projection_dim": self.dimension,
            "inputs": dict(self.inputs),
            "constants": dict(self.constants),
            "source": "benchmarks/calibration/projection_rule.json",
        }


def rule_dimension(n: int, epsilon: float) -> int:
    """max(k_min, ⌈c·(n·ε)^{2/3}⌉) (module docstring), before the comparison with d/3."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("n must be a positive integer")
    if not (math.isfinite(epsilon) and epsilon > 0.0):
        raise ValueError("epsilon must be finite and > 0")
    scaled = SCALE * math.pow(n * epsilon, 2.0 / 3.0)
    return max(MIN_DIMENSION, math.ceil(scaled))


def auto_projection(
    mechanism: str, *, n: int, d: int, epsilon: float, task: str = "binary"
) -> ProjectionChoice | None:
    """The rule's projection for a fit of ``mechanism`` at (n, d, ε), or None: no projection
    (another mechanism, a task other than binary, or k ≥ d/3)."""
    if mechanism not in PROJECTION_MECHANISMS or task != "binary":
        return None
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError("d must be a positive integer")
    k = rule_dimension(n, epsilon)
    if 3 * k >= d:  # k ≥ d/3 (OFF_FRACTION), in integers
        return None
    return ProjectionChoice(dimension=k, inputs={"n": n, "d": d, "epsilon": epsilon})


def projected_regularization(
    mechanism: str,
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float = 0.0,
    loss: str = "logistic",
    params: Mapping[str, Any] | None = None,
) -> tuple[ProjectionChoice, RegularizationChoice] | None:
    """The rule's projection of a binary fit and the automatic λ at d = k (the noise of the
    projected objective lives in ℝ^k), or None when the rule keeps every column. ValueError
    for inputs the λ rule refuses."""
    choice = auto_projection(mechanism, n=n, d=d, epsilon=epsilon)
    if choice is None:
        return None
    rule = auto_regularization(
        mechanism,
        n=n,
        d=choice.dimension,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        params=params,
    )
    return choice, rule
