"""PST-H: hypothesis transfer with feature groups (seed 003 Alg. 4, target side; docs/design.md
§3 ``transfer`` with ``feature_groups``).

:func:`stacked_transfer_fit` runs PST-F (``stacking_features``,
:mod:`service.dp.mechanisms.stacking`) on the target rows with every low-level objective
centred on the source: groups G_1, …, G_K (disjoint column sets), public importance q_k > 0
with Σ_k q_k = 1, and a random split, independent of the data, of the n target rows into D^l
(n_l rows) and D^h (n_h rows). Low-level model k releases

    w_k = argmin_w (1/n_l) Σ_{i∈D^l} l(y_i wᵀx_i,(k)) + (λ/2)‖w‖² + (Δ_k/2)‖w‖²
                   + (η/2)‖w − u_k‖² + b_kᵀw/n_l,

with (ε′_k, Δ_k, β_k = ε′_k/2) the objective-perturbation calibration of (n_l, d_k = |G_k|, λ + η,
ε_k = q_k·ε) and b_k ∝ exp(−β_k‖b‖); the high level is PST-F's (objective perturbation with ε
on the meta-features of D^h), uncentred (seed 003 trains no source high-level model).

Centres (the source's group-k score on the target's group-k scale). The source w₀ (the
average of the public source models) and the target share the study's public preprocessing, so
w₀ scores a design row x as w₀ᵀx = Σ_k w₀[G_k]ᵀx_(k) + (columns in no group). Suppose the low
level of group k sees x′_(k) = a_k·x_(k) for a public factor a_k > 0. Then

    u_k = w₀[G_k] / a_k   gives   u_kᵀx′_(k) = w₀[G_k]ᵀx_(k)  for every x,

i.e. u_k reproduces the source's group-k score (:func:`group_centres`). PrivFit's PST-F does not
rescale groups (a_k = 1: it clips ‖x_(k)‖ ≤ 1, a no-op since ‖x_(k)‖ ≤ ‖x‖ ≤ 1, and spends
the importance as the budget share ε_k = q_k ε), so u_k = w₀[G_k]. Seed 003 scales group k to
norm ≤ q_k (a_k = q_k) and centres on the source's per-group model: its centre is w₀[G_k]/q_k,
and its term (η/2)‖v − w₀[G_k]/q_k‖² in the variable w = q_k v is (η/(2q_k²))‖w − w₀[G_k]‖²,
the same centre on PrivFit's scale with a group-dependent strength; PrivFit uses one η for all
groups on the unit scale. Columns in no group (the ``intercept`` column too, unless a group
names it) are not read by the low level; their source weights do not enter any centre, and the
high level's own intercept carries a constant.

Privacy (ε-DP for the target dataset, replace-one neighbours, no δ). Fix the split (it does not
depend on the data) and one low-level model k. Its objective is (λ + Δ_k + η)-strongly convex,
and the first-order condition gives the bijection

    b_k = −Σ_{i∈D^l} l′(y_i wᵀx_i,(k)) y_i x_i,(k) − n_l(λ + Δ_k + η) w + n_l η u_k.

* Noise part: n_l η u_k and n_l(λ + Δ_k + η) w do not depend on the rows (u_k is a function of
  released models and public names only), so for neighbours ‖b_D(w) − b_D′(w)‖ ≤ 2‖x_(k)‖ ≤ 2
  and the density ratio of b_k is ≤ e^{2β_k} = e^{ε′_k}.
* Jacobian part: ∇b_k = −(M + uuᵀ) with M = Σ_{j≠i} l″ x_(k)x_(k)ᵀ + n_l(λ + Δ_k + η)I
  shared by neighbours and ‖u‖² ≤ c, so by the matrix determinant lemma the ratio is
  ≤ 1 + c/(n_l(λ + η + Δ_k)).

So w_k is (ε′_k + ln(1 + c/(n_l(λ + η + Δ_k)))) = ε_k-DP for D^l: the strong-convexity
constant that enters the calibration is λ + η (+ Δ_k), since the transfer term is public.
The K low-level models read the same rows D^l: sequential composition gives
Σ_k ε_k ≤ ε (ε_k rounded down so the exact sum is ≤ ε). The high level is ε-DP for D^h given
the released low-level models (a fixed public map x ↦ m(x)); D^l and D^h are disjoint, so the
whole release is max(Σ_k ε_k, ε) = ε-DP for the target dataset. That ε is the true cost of
everything this job fits on the target rows and is what the target is charged.

Sources. Seed 003's source side trains K per-group PLRs, each with the full ε_src, on the same
source rows and claims ε_src (Cor. 6); by sequential composition that is K·ε_src. PrivFit fits
nothing on the source data here: the centres are post-processing of source models that are
already released, each with the cost its own dataset was charged. When several source models
come from one dataset the caller composes their costs (they add), so the record states what the
source data really spent, never the seed's per-model ε_src.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.dp import as_charged, make_problem
from service.dp.core.base import Calibration, FitResult, Problem, ProgressCallback
from service.dp.core.validation import PrivacyParameterError, validate_design
from service.dp.mechanisms.stacking.features import STACKING_FEATURES
from service.dp.multisite.transfer import check_transfer_strength

__all__ = [
    "group_centres",
    "stacked_transfer_calibration",
    "stacked_transfer_fit",
]


def group_centres(
    source: ArrayLike,
    groups: Sequence[Sequence[int]],
    scales: Sequence[float] | None = None,
) -> list[NDArray[np.float64]]:
    """u_k = w₀[G_k] / a_k: the centre on which group k's low-level model reproduces the
    source's group-k score w₀[G_k]ᵀx_(k) when it sees x′_(k) = a_k·x_(k) (module doc).
    ``scales`` (the public a_k > 0) defaults to 1 for every group, PrivFit's PST-F scale."""
    w0 = np.asarray(source, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(w0)):
        raise PrivacyParameterError("the source model must have finite weights")
    a = [1.0] * len(groups) if scales is None else [float(v) for v in scales]
    if len(a) != len(groups) or not all(math.isfinite(v) and v > 0.0 for v in a):
        raise PrivacyParameterError("one finite scale > 0 per feature group is needed")
    out: list[NDArray[np.float64]] = []
    for g, a_k in zip(groups, a, strict=True):
        cols = np.asarray(list(g), dtype=np.intp)
        if cols.size == 0 or cols.min() < 0 or cols.max() >= w0.size:
            raise PrivacyParameterError(
                f"a feature group names a column outside the source's {w0.size} weights"
            )
        out.append(w0[cols] / a_k)
    return out


def _stacked_problem(
    n: int,
    d: int,
    *,
    feature_groups: Sequence[Sequence[int]],
    importance: Sequence[float] | None,
    epsilon: float,
    regularization: float,
    loss: str,
    high_level_fraction: float | None,
    meta_features: str | None,
    high_level_regularization: float | None,
) -> Problem:
    params: dict[str, Any] = {
        "feature_groups": [[int(j) for j in g] for g in feature_groups],
        "importance": None if importance is None else [float(v) for v in importance],
    }
    if high_level_fraction is not None:
        params["high_level_fraction"] = high_level_fraction
    if meta_features is not None:
        params["meta_features"] = meta_features
    if high_level_regularization is not None:
        params["high_level_regularization"] = high_level_regularization
    _, problem = make_problem(
        STACKING_FEATURES.name,
        n=n,
        d=d,
        epsilon=epsilon,
        delta=0.0,
        loss=loss,
        regularization=regularization,
        params=params,
    )
    return problem


def stacked_transfer_calibration(
    n: int,
    d: int,
    *,
    feature_groups: Sequence[Sequence[int]],
    importance: Sequence[float] | None = None,
    epsilon: float,
    transfer_strength: float,
    regularization: float,
    loss: str = "logistic",
    high_level_fraction: float | None = None,
    meta_features: str | None = None,
    high_level_regularization: float | None = None,
) -> Calibration:
    """Dry run of :func:`stacked_transfer_fit` from public quantities: PST-F's calibration
    (ε in total, no δ) plus the transfer's own numbers (module doc)."""
    eta = check_transfer_strength(transfer_strength)
    problem = _stacked_problem(
        n,
        d,
        feature_groups=feature_groups,
        importance=importance,
        epsilon=epsilon,
        regularization=regularization,
        loss=loss,
        high_level_fraction=high_level_fraction,
        meta_features=meta_features,
        high_level_regularization=high_level_regularization,
    )
    return _stacked_calibrated(problem, eta, epsilon, d)


def _stacked_calibrated(problem: Problem, eta: float, epsilon: float, d: int) -> Calibration:
    """:func:`stacked_transfer_calibration` of an already built ``problem`` (η checked)."""
    base = as_charged(
        STACKING_FEATURES.calibrate(problem, transfer_strength=eta), problem, epsilon, 0.0
    )
    details = dict(base.details)
    used = {int(j) for g in details["feature_groups"] for j in g}
    details.update(
        variant="pst_h",
        transfer_strength=eta,
        calibration_strong_convexity="λ + η + Δ_k (the transfer term's ηI counted)",
        centre_scales=[1.0] * int(details["n_models"]),
        unused_columns=[j for j in range(d) if j not in used],
    )
    return Calibration(
        epsilon=base.epsilon,
        delta=0.0,
        details=details,
        expected_noise_norm=None,
        plan=base.plan,
        composition=(
            base.composition
            + f"; every low-level objective also has (η/2)‖w − u_k‖² with η = {eta:g} around a "
            "public centre u_k (the source restricted to group k), which adds strong convexity "
            "ηI and a data-independent term only: each low level is calibrated at λ + η"
        ),
    )


def stacked_transfer_fit(
    X: ArrayLike,
    y: ArrayLike,
    source: ArrayLike,
    *,
    feature_groups: Sequence[Sequence[int]],
    importance: Sequence[float] | None = None,
    epsilon: float,
    transfer_strength: float,
    regularization: float,
    loss: str = "logistic",
    high_level_fraction: float | None = None,
    meta_features: str | None = None,
    high_level_regularization: float | None = None,
    rng: np.random.Generator | None = None,
    progress: ProgressCallback | None = None,
) -> FitResult:
    """PST-H on the target (seed 003 Alg. 4 step 3, module doc): ε-DP for (X, y), no δ.

    ``feature_groups`` are disjoint, non-empty lists of column indices; ``importance`` the
    public q_k (> 0, Σ = 1; default uniform); the other options are ``stacking_features``'s.
    Releases a :class:`~service.dp.core.released.StackedModel` (method ``features``). Raises
    :class:`PrivacyParameterError` for bad parameters or a source of the wrong length, and
    ``ConvergenceError`` when a solver does not reach the exact minimiser.
    """
    Xf, yf = validate_design(X, y)
    n, d = int(Xf.shape[0]), int(Xf.shape[1])
    w0 = np.asarray(source, dtype=np.float64).reshape(-1)
    if w0.size != d or not np.all(np.isfinite(w0)):
        raise PrivacyParameterError(
            f"the source model must have {d} finite weights, one per feature"
        )
    eta = check_transfer_strength(transfer_strength)
    problem = _stacked_problem(
        n,
        d,
        feature_groups=feature_groups,
        importance=importance,
        epsilon=epsilon,
        regularization=regularization,
        loss=loss,
        high_level_fraction=high_level_fraction,
        meta_features=meta_features,
        high_level_regularization=high_level_regularization,
    )
    calibration = _stacked_calibrated(problem, eta, epsilon, d)
    groups = problem.params["feature_groups"]
    centres = group_centres(w0, groups)
    model = STACKING_FEATURES.run_transfer(
        Xf,
        yf,
        problem,
        calibration,
        centres=centres,
        transfer_strength=eta,
        rng=rng,
        progress=progress,
    )
    details = dict(calibration.details)
    details.update(
        source_norm=float(np.linalg.norm(w0)),
        centre_norms=[float(np.linalg.norm(u)) for u in centres],
    )
    return FitResult(
        mechanism="transfer",
        model=model,
        epsilon=calibration.epsilon,
        delta=0.0,
        details=details,
        composition=calibration.composition,
        expected_noise_norm=None,
        seeded=rng is not None,
    )
