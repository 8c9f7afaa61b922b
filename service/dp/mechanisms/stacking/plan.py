"""The plan of one stacking fit: every public number (row split, column groups, budgets, the
base mechanism's plan of every level) and the composition that gives ε in total."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from service.dp.core.accounting import round_up
from service.dp.core.base import Calibration
from service.dp.core.plan import plan_kind
from service.dp.core.released import MetaFeatureKind
from service.dp.mechanisms._common import MechanismPlan
from service.dp.mechanisms.objective_perturbation import ObjectivePerturbationPlan

__all__ = ["StackingFeaturesPlan", "StackingPlan", "StackingSamplesPlan"]


@dataclass(frozen=True, slots=True)
class StackingPlan(MechanismPlan):
    """Everything public about one stacking fit: the split of the rows (n_h high-level rows,
    the low-level blocks), the column groups and importance weights (PST-F), the options of
    the high level, the transfer strength η (PST-H; 0 otherwise), and the plan of every
    base-mechanism fit (objective perturbation: K low levels and the high level)."""

    n_high: int
    low_sizes: tuple[int, ...]
    groups: tuple[tuple[int, ...], ...] | None
    importance: tuple[float, ...] | None
    high_level_fraction: float
    meta_features: MetaFeatureKind
    high_level_intercept: bool
    high_level_regularization: float
    transfer_strength: float
    low_level: tuple[ObjectivePerturbationPlan, ...]
    high_level: ObjectivePerturbationPlan

    @property
    def low_level_epsilon(self) -> float:
        """PST-S: disjoint blocks, parallel composition (max); PST-F: the same rows,
        sequential composition (the exact sum of the ε_k, rounded up: still ≤ ε, never shown
        below what the fits spend)."""
        if self.groups is None:
            return max(p.inputs.epsilon for p in self.low_level)
        return round_up(sum((Fraction(p.inputs.epsilon) for p in self.low_level), Fraction(0)))

    @property
    def epsilon(self) -> float:
        """max(low level, high level): D^l and D^h are disjoint."""
        return max(self.low_level_epsilon, self.high_level.inputs.epsilon)

    def _low_text(self) -> str:
        eps = self.inputs.epsilon
        if self.groups is None:
            sizes = self.low_sizes
            return (
                f"low level: {len(self.low_level)} objective-perturbation fits with ε = "
                f"{eps:g} each on disjoint blocks of {min(sizes)}–{max(sizes)} rows of D^l "
                "(parallel composition)"
            )
        budgets = [p.inputs.epsilon for p in self.low_level]
        return (
            f"low level: {len(self.groups)} objective-perturbation fits on disjoint column "
            f"groups of the same {self.inputs.n - self.n_high} rows of D^l with ε_k = q_k·ε = "
            f"{', '.join(f'{e:.6g}' for e in budgets)} (sequential composition: Σ_k ε_k ≤ "
            f"{eps:g})"
        )

    def details(self) -> dict[str, Any]:
        details = self.inputs.details()
        details.update(
            delta=0.0,
            epsilon=self.epsilon,
            method="samples" if self.groups is None else "features",
            n_models=len(self.low_level),
            rows_high_level=self.n_high,
            rows_low_level=self.inputs.n - self.n_high,
            low_level_rows=list(self.low_sizes),
            feature_groups=None if self.groups is None else [list(g) for g in self.groups],
            importance=None if self.importance is None else list(self.importance),
            low_level_epsilon=[p.inputs.epsilon for p in self.low_level],
            high_level_epsilon=self.high_level.inputs.epsilon,
            meta_features=self.meta_features,
            high_level_intercept=self.high_level_intercept,
            high_level_regularization=self.high_level_regularization,
            meta_scale=1.0 / math.sqrt(self.high_level.inputs.d),
            low_level=[p.details() for p in self.low_level],
            high_level=self.high_level.details(),
        )
        return details

    def calibration(self) -> Calibration:
        low_eps, high_eps, spent = (
            self.low_level_epsilon,
            self.high_level.inputs.epsilon,
            self.epsilon,
        )
        return Calibration(
            epsilon=spent,
            delta=0.0,
            details=self.details(),
            expected_noise_norm=None,
            composition=(
                f"{self._low_text()}; high level: objective perturbation with ε = "
                f"{high_eps:g} on the {self.n_high} rows of D^h; D^l and D^h are disjoint "
                f"(random split independent of the data), so parallel composition gives "
                f"max({low_eps:.6g}, {high_eps:.6g}) = {spent:.6g} in total; no δ is spent"
            ),
            plan=self,
        )


@plan_kind("stacking_samples")
@dataclass(frozen=True, slots=True)
class StackingSamplesPlan(StackingPlan):
    """PST-S's plan (``groups`` and ``importance`` None)."""

    mechanism = "stacking_samples"


@plan_kind("stacking_features")
@dataclass(frozen=True, slots=True)
class StackingFeaturesPlan(StackingPlan):
    """PST-F's (and PST-H's) plan."""

    mechanism = "stacking_features"
