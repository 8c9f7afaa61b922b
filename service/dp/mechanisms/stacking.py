"""``stacking_samples`` (PST-S) and ``stacking_features`` (PST-F): privacy-preserving stacking
(Yao et al. 2019, seed 003 Algs. 2 and 3; docs/design.md §3).

Both mechanisms release a :class:`~service.dp.core.released.StackedModel`: K low-level linear
models and one high-level linear model on their meta-features. The base mechanism at every
level is PLR, i.e. PrivFit's ``objective_perturbation`` (Chaudhuri et al. 2011, seed 003
Alg. 1), called as a black box: each call is ε_call-DP with respect to the rows it is given.

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

PST-S (``stacking_samples``). D^l is cut into K = ``n_models`` (default 5) disjoint blocks
S_1, …, S_K of near-equal size; low-level model k is PLR with the full ε on S_k (all columns);
the high level is PLR with the full ε on D^h. Privacy (seed 003 Prop. 3): S_1, …, S_K, D^h are
disjoint, so a replaced record falls into exactly one of them and changes the law of one
release only; the high level uses the low-level models only as fixed public functions.
Parallel composition: ε in total, no δ.

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
:func:`service.dp.multisite.transfer.stacked_transfer_fit`): the same plan, row split and
calibration,
with low-level model k's objective given the extra term (η/2)‖w − u_k‖² around a public centre
u_k. The cost is PST-F's (ε in total); the proof that the extra term changes nothing is in
:mod:`service.dp.multisite.transfer`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions, option
from service.dp.core.plan import plan_kind
from service.dp.core.released import META_FEATURES, MetaFeatureKind, StackedModel, meta_features
from service.dp.core.validation import PrivacyParameterError
from service.dp.data.projection import clip_rows
from service.dp.mechanisms._common import (
    Inputs,
    MechanismPlan,
    certified_minimiser,
    check_common,
    release,
    report,
    require_plan,
)
from service.dp.mechanisms.objective_perturbation import MECHANISM as _PLR
from service.dp.mechanisms.objective_perturbation import ObjectivePerturbationPlan, centred_plan
from service.dp.noise import draws as noise

__all__ = [
    "CAPABILITIES",
    "DEFAULT_HIGH_LEVEL_FRACTION",
    "DEFAULT_N_MODELS",
    "STACKING_FEATURES",
    "STACKING_SAMPLES",
    "FeaturesOptions",
    "SamplesOptions",
    "StackingFeatures",
    "StackingFeaturesPlan",
    "StackingPlan",
    "StackingSamples",
    "StackingSamplesPlan",
    "split_budget",
    "split_rows",
]

FloatArray = NDArray[np.float64]

DEFAULT_N_MODELS = 5
DEFAULT_HIGH_LEVEL_FRACTION = 0.5
_COMMON = (
    "high_level_fraction",
    "meta_features",
    "high_level_intercept",
    "high_level_regularization",
)
_SAMPLES_PARAMS = ("n_models", *_COMMON)
_FEATURES_PARAMS = ("feature_groups", "importance", "n_models", *_COMMON)

# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class _CommonOptions(MechanismOptions):
    """The high level's options, shared by PST-S and PST-F."""

    high_level_fraction: float = option(
        DEFAULT_HIGH_LEVEL_FRACTION,
        "Share of the rows, drawn at random, that train the high-level model (the rest train "
        "the low-level models).",
        gt=0.0,
        lt=1.0,
    )
    meta_features: Literal["sigmoid", "centered_sigmoid"] = option(
        "sigmoid", "The high level's features: the low-level models' scores through σ."
    )
    high_level_intercept: bool = option(True, "Whether the high-level model has an intercept.")
    high_level_regularization: float | None = option(
        None,
        "λ of the high-level model.",
        gt=0.0,
        computed_default="the fit's `regularization`",
    )


@dataclass(frozen=True, slots=True)
class SamplesOptions(_CommonOptions):
    """PST-S: K low-level models on disjoint row blocks. Also checked with the dataset: K ≤ the
    low level's rows."""

    n_models: int = option(
        DEFAULT_N_MODELS, "Number K of low-level models (disjoint row blocks).", ge=1, le=10_000
    )


@dataclass(frozen=True, slots=True)
class FeaturesOptions(_CommonOptions):
    """PST-F: K low-level models on disjoint column groups. Also checked with the dataset: the
    groups are disjoint with columns in range, the weights sum to 1."""

    # JSON arrays; the default is None, never a shared list
    feature_groups: list[list[int]] | None = option(  # noqa: RUF009
        None,
        "Disjoint groups of column indices, one low-level model each (null: `n_models` "
        "near-equal groups of consecutive columns).",
    )
    importance: list[float] | None = option(  # noqa: RUF009
        None,
        "Public budget shares q_k > 0 of the groups, summing to 1 (null: equal shares).",
    )
    n_models: int | None = option(
        None,
        f"Number K of groups when `feature_groups` is not given (null: {DEFAULT_N_MODELS}, at "
        "most d).",
        ge=1,
        le=10_000,
    )


CAPABILITIES = Capabilities()


def split_budget(epsilon: float, weights: Sequence[float]) -> list[float]:
    """ε_k = q_k·ε, nudged down (one ulp at a time) until Σ_k ε_k ≤ ε in exact arithmetic."""
    shares = [w * epsilon for w in weights]
    target = Fraction(epsilon)
    while sum((Fraction(s) for s in shares), Fraction(0)) > target:
        i = max(range(len(shares)), key=shares.__getitem__)
        shares[i] = math.nextafter(shares[i], 0.0)
    return shares


def split_rows(
    n: int, n_high: int, rng: np.random.Generator | None
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """(high, low) row indices from a uniformly random permutation drawn independently of the
    data (CSPRNG uniforms when ``rng`` is None). ``high`` is sorted; ``low`` keeps the random
    order, so that consecutive blocks of it (PST-S) are random subsets even if the rows of X
    are ordered (by time, by label, …)."""
    perm = np.argsort(noise.uniforms(n, rng), kind="stable")
    return np.sort(perm[:n_high]), perm[n_high:]


def _block_sizes(n: int, k: int) -> list[int]:
    q, r = divmod(n, k)
    return [q + 1] * r + [q] * (k - r)


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
        sequential composition (the exact sum of the ε_k)."""
        if self.groups is None:
            return max(p.inputs.epsilon for p in self.low_level)
        return float(sum((Fraction(p.inputs.epsilon) for p in self.low_level), Fraction(0)))

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


def _int(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise PrivacyParameterError(f"{name} must be an integer")
    if not low <= int(value) <= high:
        raise PrivacyParameterError(f"{name} must lie between {low} and {high}, got {value}")
    return int(value)


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

    def _low_level(
        self, problem: Problem, n_low: int
    ) -> tuple[
        tuple[int, ...],
        tuple[tuple[int, ...], ...] | None,
        tuple[float, ...] | None,
        list[Problem],
    ]:
        raise NotImplementedError

    plan_class: type[StackingPlan] = StackingPlan

    def plan(self, problem: Problem, *, transfer_strength: float = 0.0) -> StackingPlan:
        """Sizes, budgets and the base mechanism's plans, for a validated problem
        (:meth:`validate_params`). ``transfer_strength`` η > 0 (PST-H) calibrates every low
        level at strong convexity λ + η: its objective carries the public term
        (η/2)‖w − u_k‖², whose Hessian ηI enters the Jacobian bound
        (``service.dp.multisite.transfer``); the low levels still solve with ridge λ (the
        stacking plan's own λ)."""
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


class StackingSamples(_Stacking):
    """PST-S: K low-level PLRs on disjoint row blocks + a high-level PLR; ε in total."""

    name = "stacking_samples"
    method = "samples"
    options = SamplesOptions
    capabilities = CAPABILITIES
    allowed = _SAMPLES_PARAMS
    plan_class = StackingSamplesPlan

    def _own_params(self, problem: Problem, common: dict[str, Any]) -> dict[str, Any]:
        n_low = problem.n - int(common["_n_high"])
        K = _int(problem.params.get("n_models", DEFAULT_N_MODELS), "n_models", 1, 10_000)
        if n_low < K:
            raise PrivacyParameterError(
                f"n_models = {K} needs at least {K} rows in the low-level part; use fewer "
                "models or a smaller high_level_fraction"
            )
        return {"n_models": K}

    def _low_level(
        self, problem: Problem, n_low: int
    ) -> tuple[
        tuple[int, ...],
        tuple[tuple[int, ...], ...] | None,
        tuple[float, ...] | None,
        list[Problem],
    ]:
        K = int(problem.params["n_models"])
        sizes = _block_sizes(n_low, K)
        subs = [
            self._sub_problem(
                problem, n=s, d=problem.d, epsilon=problem.epsilon, lam=problem.regularization
            )
            for s in sizes
        ]
        return tuple(sizes), None, None, subs


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
            K = _int(raw.get("n_models", DEFAULT_N_MODELS), "n_models", 1, 10_000)
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
                cols = [_int(j, f"column index in feature group {k}", 0, d - 1) for j in g]
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

    def _low_level(
        self, problem: Problem, n_low: int
    ) -> tuple[
        tuple[int, ...],
        tuple[tuple[int, ...], ...] | None,
        tuple[float, ...] | None,
        list[Problem],
    ]:
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
        convexity λ + η (the full argument is in :mod:`service.dp.multisite.transfer`). η = 0 is
        :meth:`run`.
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


STACKING_SAMPLES = StackingSamples()
STACKING_FEATURES = StackingFeatures()
