"""``stacking_features`` (PST-F, seed 003 Alg. 3): K low-level models on disjoint column
groups of the same rows; and PST-H's run on a transfer target.

PST-F (``stacking_features``). Low-level model k is fitted on the same rows D^l but only on
its column group G_k (``feature_groups``: non-empty, pairwise disjoint lists of column
indices; columns in no group are not used) with public importance q_k > 0, Σ_k q_k = 1
(``importance``, default uniform; it must be fixed without looking at the data, e.g. by an
expert). The sub-vectors x_(k) are clipped to norm ≤ 1 (a no-op for design-matrix rows, which
already have ‖x‖ ≤ 1, hence ‖x_(k)‖ ≤ 1). Model k is PLR with budget ε_k = q_k·ε and the
caller's λ; the high level is PLR with ε on D^h.

Why the q_k cost ε in total. All K low-level models read the same rows, so their costs add
(sequential composition): Σ_k ε_k = ε·Σ_k q_k = ε with respect to D^l (the ε_k are rounded
down so the exact sum of the floats is ≤ ε). Seed 003 phrases the same budget as a sum of
per-group sensitivities: it scales x_(k) to norm ≤ q_k and draws every b_k ∝ exp(−(ε′/2)‖b‖);
replacing a record moves the gradient sum of group k by ≤ 2q_k, so group k's noise part of
the privacy loss is (ε′/2)·2q_k = q_k ε′, and over the K groups Σ_k q_k ε′ = ε′, with the
Jacobian parts 2 ln(1 + c q_k²/(nλ_k)) adding up to ε − ε′ (Lemma 8). Substituting
x_(k) = q_k x̂_(k), v = q_k w shows that group k's PLR on q_k-scaled data with ridge λ_k and
noise rate ε′ is exactly PLR on unit-scaled data with ridge λ_k/q_k² and budget q_k ε′ plus
its Jacobian slack: the importance weight is a share of the budget. PrivFit implements that
reading directly (ε_k = q_k ε per group, with the objective-perturbation calibration of each
group — including its Δ > 0 fallback — computed by the base mechanism), which equals Alg. 3
for uniform q_k and for other q_k differs only in how the Jacobian slack is apportioned
(Alg. 3 pools it, PrivFit charges each group its own). D^l and D^h are disjoint, so the whole
release costs max(Σ_k ε_k, ε) = ε (Thm 4), no δ.

PST-H on the target (seed 003 Alg. 4 step 3, :meth:`StackingFeatures.run_transfer`, called by
:func:`service.dp.multisite.stacked_transfer.stacked_transfer_fit`): the same plan, row split
and calibration, with low-level model k's objective given the extra term (η/2)‖w − u_k‖²
around a public centre u_k. The cost is PST-F's (ε in total); the proof that the extra term
changes nothing is in :mod:`service.dp.multisite.stacked_transfer`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.dp.core.base import Calibration, Problem, ProgressCallback
from service.dp.core.released import StackedModel
from service.dp.core.validation import PrivacyParameterError, check_int_in
from service.dp.mechanisms._common import require_plan
from service.dp.mechanisms.stacking.levels import LowLevel, _checked, _Stacking
from service.dp.mechanisms.stacking.options import (
    _FEATURES_PARAMS,
    CAPABILITIES,
    DEFAULT_N_MODELS,
    FeaturesOptions,
)
from service.dp.mechanisms.stacking.plan import StackingFeaturesPlan

__all__ = ["STACKING_FEATURES", "StackingFeatures", "split_budget"]

FloatArray = NDArray[np.float64]


def split_budget(epsilon: float, weights: Sequence[float]) -> list[float]:
    """ε_k = q_k·ε, nudged down (one ulp at a time) until Σ_k ε_k ≤ ε in exact arithmetic."""
    shares = [w * epsilon for w in weights]
    target = Fraction(epsilon)
    while sum((Fraction(s) for s in shares), Fraction(0)) > target:
        i = max(range(len(shares)), key=shares.__getitem__)
        shares[i] = math.nextafter(shares[i], 0.0)
    return shares


class StackingFeatures(_Stacking):
    """PST-F: K low-level PLRs on disjoint column groups of the same rows with budgets q_k·ε
    + a high-level PLR; ε in total."""

    name = "stacking_features"
    method = "features"
    options = FeaturesOptions
    capabilities = CAPABILITIES
    allowed = _FEATURES_PARAMS
    plan_class = StackingFeaturesPlan

    def _own_params(self, problem: Problem, _common: dict[str, Any]) -> dict[str, Any]:
        raw = problem.params
        d = problem.d
        groups_raw = raw.get("feature_groups")
        if groups_raw is None:
            K = check_int_in(raw.get("n_models", DEFAULT_N_MODELS), "n_models", 1, 10_000)
            K = min(K, d)
            groups = [list(map(int, g)) for g in np.array_split(np.arange(d), K)]
        else:
            if "n_models" in raw and raw["n_models"] is not None:
                raise PrivacyParameterError(
                    "give either feature_groups or n_models, not both (K = len(feature_groups))"
                )
            if isinstance(groups_raw, str | bytes) or not isinstance(groups_raw, Sequence):
                raise PrivacyParameterError("feature_groups must be a list of lists of columns")
            groups = []
            seen: set[int] = set()
            for k, g in enumerate(groups_raw):
                if isinstance(g, str | bytes) or not isinstance(g, Sequence | np.ndarray):
                    raise PrivacyParameterError(f"feature group {k} must be a list of columns")
                cols = [check_int_in(j, f"column index in feature group {k}", 0, d - 1) for j in g]
                if not cols:
                    raise PrivacyParameterError(f"feature group {k} is empty")
                if len(set(cols)) != len(cols) or seen.intersection(cols):
                    raise PrivacyParameterError(
                        "feature groups must be disjoint (each column in at most one group)"
                    )
                seen.update(cols)
                groups.append(cols)
            if not groups:
                raise PrivacyParameterError("feature_groups must name at least one group")
        K = len(groups)
        q_raw = raw.get("importance")
        if q_raw is None:
            q = [1.0 / K] * K
        else:
            if isinstance(q_raw, str | bytes) or not isinstance(q_raw, Sequence | np.ndarray):
                raise PrivacyParameterError("importance must be a list of numbers")
            if len(q_raw) != K:
                raise PrivacyParameterError(
                    f"importance needs one weight per feature group ({K}), got {len(q_raw)}"
                )
            q = []
            for v in q_raw:
                if isinstance(v, bool) or not isinstance(v, int | float | np.floating):
                    raise PrivacyParameterError("importance weights must be numbers")
                fv = float(v)
                if not math.isfinite(fv) or fv <= 0.0:
                    raise PrivacyParameterError(
                        "importance weights must be finite and > 0 (leave a group with no "
                        "importance out of feature_groups instead)"
                    )
                q.append(fv)
            total = math.fsum(q)
            if abs(total - 1.0) > 1e-6:
                raise PrivacyParameterError(
                    f"importance weights must sum to 1 (they are budget shares), got {total:.9g}"
                )
            q = [v / total for v in q]
        return {"feature_groups": groups, "importance": q}

    def _low_level(self, problem: Problem, n_low: int) -> LowLevel:
        groups = tuple(tuple(int(j) for j in g) for g in problem.params["feature_groups"])
        q = tuple(float(v) for v in problem.params["importance"])
        budgets = split_budget(problem.epsilon, q)
        subs = [
            self._sub_problem(problem, n=n_low, d=len(g), epsilon=e_k, lam=problem.regularization)
            for g, e_k in zip(groups, budgets, strict=True)
        ]
        return (n_low,), groups, q, subs

    def run_transfer(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        problem: Problem,
        calibration: Calibration,
        *,
        centres: Sequence[NDArray[np.float64]],
        transfer_strength: float,
        rng: np.random.Generator | None,
        progress: ProgressCallback | None,
    ) -> StackedModel:
        """PST-H on the target (seed 003 Alg. 4 step 3): :meth:`run` with low-level model k
        minimising its objective plus (η/2)‖w − u_k‖², u_k = ``centres[k]`` (public, one entry
        per column of group k), η = ``transfer_strength``; the high level is unchanged.

        The calibration is :meth:`calibrate` with the same η (ε in total): u_k is public and
        the Hessian of the extra term is ηI, so each low level is calibrated at strong
        convexity λ + η (the full argument is in :mod:`service.dp.multisite.stacked_transfer`).
        η = 0 is :meth:`run`.
        """
        del problem  # the plan holds every option
        plan = require_plan(calibration, StackingFeaturesPlan)
        X, y = _checked(X, y, plan)
        eta = float(transfer_strength)
        if not math.isfinite(eta) or eta < 0.0:
            raise PrivacyParameterError("transfer_strength must be a finite number ≥ 0")
        if plan.transfer_strength != eta:
            raise ValueError("the calibration does not belong to this transfer strength")
        assert plan.groups is not None
        if len(centres) != len(plan.groups):
            raise PrivacyParameterError(
                f"one centre per feature group is needed ({len(plan.groups)}), got {len(centres)}"
            )
        us: list[FloatArray] = []
        for k, (u, g) in enumerate(zip(centres, plan.groups, strict=True)):
            arr = np.asarray(u, dtype=np.float64).reshape(-1)
            if arr.size != len(g) or not np.all(np.isfinite(arr)):
                raise PrivacyParameterError(
                    f"the centre of feature group {k} must hold {len(g)} finite weights"
                )
            us.append(arr)
        return self._run_levels(X, y, plan, rng=rng, progress=progress, centres=us)


STACKING_FEATURES = StackingFeatures()
