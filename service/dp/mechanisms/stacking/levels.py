"""What PST-S and PST-F share: the row split, the two levels' validation and planning, and
the run that fits the K low-level models and then the high level on their meta-features.

Row split (both). A uniformly random permutation of the n rows, drawn from the CSPRNG (or
the test rng) **independently of the data**, puts n_h = round(f·n) rows into D^h (high level)
and the other n_l = n − n_h into D^l (low level); f = ``high_level_fraction`` (default 0.5, the
paper's 50/50 setting). The sizes depend on the public n only.

Meta-features. For a row x, m_k(x) = σ(w_kᵀ x_(k)) ∈ (0, 1) (or 2σ − 1 ∈ (−1, 1) with
``meta_features="centered_sigmoid"``), plus a constant 1 when ``high_level_intercept`` (the
default); the vector is multiplied by the public factor 1/√(K + [intercept]), so every
entry has |·| ≤ 1/√(K + [intercept]) and ‖m(x)‖ ≤ 1, as PLR requires. The map x ↦ m(x) is
fixed once the low-level models are released, so the high-level PLR on {(m(x), y) : (x, y) ∈
D^h} is ε-DP with respect to D^h.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.released import META_FEATURES, StackedModel, meta_features
from service.dp.core.validation import PrivacyParameterError
from service.dp.data.projection import clip_rows
from service.dp.mechanisms._common import (
    Inputs,
    certified_minimiser,
    check_common,
    release,
    report,
    require_plan,
)
from service.dp.mechanisms.objective_perturbation import MECHANISM as _PLR
from service.dp.mechanisms.objective_perturbation import centred_plan
from service.dp.mechanisms.stacking.options import DEFAULT_HIGH_LEVEL_FRACTION
from service.dp.mechanisms.stacking.plan import StackingPlan
from service.dp.noise import draws as noise

__all__ = ["split_rows"]

FloatArray = NDArray[np.float64]
#: what a variant's low level is: (row counts, column groups or None, budget shares or None,
#: the low-level problems)
LowLevel = tuple[
    tuple[int, ...], tuple[tuple[int, ...], ...] | None, tuple[float, ...] | None, list[Problem]
]


def split_rows(
    n: int, n_high: int, rng: np.random.Generator | None
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """(high, low) row indices from a uniformly random permutation drawn independently of the
    data (CSPRNG uniforms when ``rng`` is None). ``high`` is sorted; ``low`` keeps the random
    order, so that consecutive blocks of it (PST-S) are random subsets even if the rows of X
    are ordered (by time, by label, …)."""
    perm = np.argsort(noise.uniforms(n, rng), kind="stable")
    return np.sort(perm[:n_high]), perm[n_high:]


class _Stacking:
    """Shared validation, planning and running of PST-S and PST-F."""

    name = ""
    method = ""
    allowed: tuple[str, ...] = ()

    # ---- parameters -----------------------------------------------------------------------

    def _common_params(self, problem: Problem) -> dict[str, Any]:
        raw = problem.params
        out: dict[str, Any] = {}
        f = raw.get("high_level_fraction", DEFAULT_HIGH_LEVEL_FRACTION)
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 < float(f) < 1.0:
            raise PrivacyParameterError("high_level_fraction must be a number in (0, 1)")
        out["high_level_fraction"] = float(f)
        kind = raw.get("meta_features", "sigmoid")
        if kind not in META_FEATURES:
            raise PrivacyParameterError(
                f"meta_features must be one of {', '.join(META_FEATURES)}, got {kind!r}"
            )
        out["meta_features"] = kind
        intercept = raw.get("high_level_intercept", True)
        if not isinstance(intercept, bool):
            raise PrivacyParameterError("high_level_intercept must be true or false")
        out["high_level_intercept"] = intercept
        lam_h = raw.get("high_level_regularization", problem.regularization)
        if (
            isinstance(lam_h, bool)
            or not isinstance(lam_h, int | float)
            or not math.isfinite(lam_h)
            or lam_h <= 0.0
        ):
            raise PrivacyParameterError("high_level_regularization must be a finite number > 0")
        out["high_level_regularization"] = float(lam_h)
        n_high = round(out["high_level_fraction"] * problem.n)
        if n_high < 1 or problem.n - n_high < 1:
            raise PrivacyParameterError(
                "high_level_fraction leaves no rows for one of the two levels; the dataset "
                "needs more rows or a different fraction"
            )
        out["_n_high"] = n_high
        return out

    def _own_params(self, problem: Problem, common: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def validate_params(self, problem: Problem) -> Problem:
        check_common(problem, self.allowed)
        common = self._common_params(problem)
        own = self._own_params(problem, common)
        common.pop("_n_high")
        return replace(problem, params={**common, **own})

    # ---- planning -------------------------------------------------------------------------

    def _sub_problem(
        self, problem: Problem, *, n: int, d: int, epsilon: float, lam: float
    ) -> Problem:
        sub = Problem(
            mechanism=_PLR.name,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=0.0,
            loss=problem.loss,
            regularization=lam,
            huber_h=problem.huber_h,
            params={},
        )
        return _PLR.validate_params(sub)

    def _low_level(self, problem: Problem, n_low: int) -> LowLevel:
        raise NotImplementedError

    plan_class: type[StackingPlan] = StackingPlan

    def plan(self, problem: Problem, *, transfer_strength: float = 0.0) -> StackingPlan:
        """Sizes, budgets and the base mechanism's plans, for a validated problem
        (:meth:`validate_params`). ``transfer_strength`` η > 0 (PST-H) calibrates every low
        level at strong convexity λ + η: its objective carries the public term
        (η/2)‖w − u_k‖², whose Hessian ηI enters the Jacobian bound
        (``service.dp.multisite.stacked_transfer``); the low levels still solve with ridge λ
        (the stacking plan's own λ)."""
        p = problem.params
        n_high = round(float(p["high_level_fraction"]) * problem.n)
        n_low = problem.n - n_high
        low_sizes, groups, importance, low_problems = self._low_level(problem, n_low)
        K = len(low_problems)
        d_high = K + (1 if p["high_level_intercept"] else 0)
        high_problem = self._sub_problem(
            problem,
            n=n_high,
            d=d_high,
            epsilon=problem.epsilon,
            lam=float(p["high_level_regularization"]),
        )
        low_plans = tuple(
            _PLR.plan(
                replace(sp, regularization=sp.regularization + transfer_strength)
                if transfer_strength > 0.0
                else sp
            )
            for sp in low_problems
        )
        return self.plan_class(
            inputs=Inputs.of(problem),
            n_high=n_high,
            low_sizes=low_sizes,
            groups=groups,
            importance=importance,
            high_level_fraction=float(p["high_level_fraction"]),
            meta_features=p["meta_features"],
            high_level_intercept=bool(p["high_level_intercept"]),
            high_level_regularization=float(p["high_level_regularization"]),
            transfer_strength=float(transfer_strength),
            low_level=low_plans,
            high_level=_PLR.plan(high_problem),
        )

    def calibrate(self, problem: Problem, *, transfer_strength: float = 0.0) -> Calibration:
        return self.plan(problem, transfer_strength=transfer_strength).calibration()

    # ---- running --------------------------------------------------------------------------

    def run(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        problem: Problem,
        calibration: Calibration,
        *,
        rng: np.random.Generator | None,
        progress: ProgressCallback | None,
    ) -> FittedModel:
        del problem  # the plan holds every option
        plan = require_plan(calibration, self.plan_class)
        if plan.transfer_strength != 0.0:
            raise ValueError("a transfer plan runs through run_transfer, with its centres")
        X, y = _checked(X, y, plan)
        return self._run_levels(X, y, plan, rng=rng, progress=progress)

    def _run_levels(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        plan: StackingPlan,
        *,
        rng: np.random.Generator | None,
        progress: ProgressCallback | None,
        centres: Sequence[FloatArray] | None = None,
    ) -> StackedModel:
        """Draw the row split, fit the K low-level models (centred on ``centres`` with weight
        η = the plan's ``transfer_strength`` when given, see
        :meth:`StackingFeatures.run_transfer`), then the high level; every fit is the base
        mechanism's certified release of its own plan."""
        n = plan.inputs.n
        K = len(plan.low_level)
        lam = plan.inputs.regularization
        eta = plan.transfer_strength
        report(progress, 0.0)
        high_rows, low_rows = split_rows(n, plan.n_high, rng)
        coefs: list[FloatArray] = []
        bounds = np.concatenate([[0], np.cumsum(plan.low_sizes)]).astype(np.intp)
        for k in range(K):
            if plan.groups is None:
                rows = np.sort(low_rows[bounds[k] : bounds[k + 1]])
                Xk = X[rows]
                yk = y[rows]
            else:
                Xk = clip_rows(X[np.ix_(low_rows, np.asarray(plan.groups[k], np.intp))])
                yk = y[low_rows]
            if centres is None:
                coef = certified_minimiser(Xk, yk, plan.low_level[k], regularization=lam, rng=rng)
            else:
                # the extra public term (η/2)‖w − u‖²: the certificate's bound grows by η‖u‖
                centred = centred_plan(plan.low_level[k], centres[k], eta)
                coef = certified_minimiser(
                    Xk,
                    yk,
                    centred,
                    regularization=lam,
                    rng=rng,
                    centre=centres[k],
                    centre_weight=eta,
                )
            coefs.append(release(coef).coef)
            report(progress, (k + 1) / (K + 1))
        M = meta_features(
            X[high_rows],
            coefs,
            plan.groups,
            kind=plan.meta_features,
            intercept=plan.high_level_intercept,
        )
        high = release(
            certified_minimiser(
                M,
                y[high_rows],
                plan.high_level,
                regularization=plan.high_level.inputs.regularization,
                rng=rng,
            )
        )
        stacked = StackedModel(
            method="samples" if plan.groups is None else "features",
            low_level=tuple(coefs),
            high_level=high.coef,
            groups=plan.groups,
            n_features=plan.inputs.d,
            meta_features=plan.meta_features,
            high_level_intercept=plan.high_level_intercept,
        )
        report(progress, 1.0)
        return stacked


def _checked(
    X: NDArray[np.float64], y: NDArray[np.float64], plan: StackingPlan
) -> tuple[FloatArray, FloatArray]:
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
    if X.shape != (plan.inputs.n, plan.inputs.d) or y.shape[0] != plan.inputs.n:
        raise ValueError("X and y do not match the problem's n and d")
    return X, y
