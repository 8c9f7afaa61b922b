"""Combining site models into one (multi-site methods, docs/design.md §3). Pure numerics.

Average method (seed 000, Alg. 4): given N linear classifiers f_1, …, f_N over the same
encoded features, release

    f̄ = Σ_i π_i f_i,    π_i = w_i / Σ_j w_j,

with public, non-negative weights w (all equal by default: f̄ = (1/N) Σ_i f_i, the thesis's
"treats the importance of each local site equally").

Feature method (seed 000, Alg. 5; seed 003's sigmoid meta-features): stack the site models
into M_f ∈ R^{N×d} (row i = f_iᵀ) and fit a meta-level model ω by a DP mechanism on the
coordinator's own labelled holdout, mapped through the site models:

* ``linear``: x ↦ s·M_f x with the public factor s = 1/‖M_f‖₂ (spectral norm), so that
  ‖s M_f x‖ ≤ ‖x‖ ≤ 1; released as the linear model f_Σ = s·M_fᵀω ∈ R^d (the same scores).
* ``sigmoid``: x ↦ [σ(f_1ᵀx), …, σ(f_Nᵀx), 1]/√(N + 1)
(:func:`service.dp.core.released.meta_features`),
  released as a :class:`~service.dp.core.released.StackedModel`.

Both factors depend on the public site models only, never on the holdout, so the meta-level
design meets the unit-ball precondition and the meta-level fit is (ε, δ)-DP for the holdout
by the chosen mechanism's own proof; the site models are post-processed.

Privacy of the average: f̄ is a function of the released f_i and of public weights only.
It touches no data, so by post-processing it is (ε_i, δ_i)-DP for site i's dataset whenever
f_i was; sites hold disjoint datasets, so the guarantees compose in parallel (each dataset
keeps its own). When any f_i has no guarantee, f̄ has none for that site's data. Nothing
new is spent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.dp.core.base import FitResult, LinearModel, ProgressCallback
from service.dp.core.released import MulticlassModel, StackedModel, meta_features
from service.dp.core.tasks import Task
from service.dp.core.validation import PrivacyParameterError, validate_design
from service.dp.data.projection import clip_rows
from service.dp.mechanisms import MECHANISMS
from service.dp.noise.draws import round_to_grid

__all__ = [
    "FEATURE_MECHANISMS",
    "META_FEATURE_KINDS",
    "FeatureMechanism",
    "MetaFeatureKind",
    "average_coefficients",
    "feature_fit",
    "linear_meta_design",
    "linear_meta_scale",
    "meta_level_mechanisms",
    "normalised_weights",
]


def meta_level_mechanisms() -> tuple[str, ...]:
    """The registry's mechanisms the feature method offers at the meta level (single release,
    linear output: ``capabilities.meta_level``), by name."""
    return tuple(sorted(name for name, m in MECHANISMS.items() if m.capabilities.meta_level))


#: Meta-level mechanisms the feature method offers, read from the registry once; the request
#: schema's type (a ``Literal`` of these names; a plain ``str`` to the type checker).
FEATURE_MECHANISMS: tuple[str, ...] = meta_level_mechanisms()
if TYPE_CHECKING:
    FeatureMechanism = str
else:
    FeatureMechanism = Literal[FEATURE_MECHANISMS]
#: The feature method's meta-features (linear: a linear model; sigmoid: a stacked one).
MetaFeatureKind = Literal["linear", "sigmoid"]
META_FEATURE_KINDS: tuple[str, ...] = get_args(MetaFeatureKind)

FloatArray = NDArray[np.float64]


def normalised_weights(n_models: int, weights: Sequence[float] | None = None) -> FloatArray:
    """π = w / Σw for public weights ``w`` (one per model); equal weights when ``None``.

    Computed as (w / max w) / Σ(w / max w): the same π, and the sum stays in [1, n] so that
    weights near the largest double (whose plain sum overflows) or near the smallest (whose
    sum underflows relative to them) are normalised exactly as moderate ones.

    Raises ``ValueError`` for a count mismatch, a negative or non-finite weight, or weights
    that are all zero.
    """
    if n_models < 1:
        raise ValueError("averaging needs at least one model")
    if weights is None:
        return np.full(n_models, 1.0 / n_models)
    if len(weights) != n_models:
        raise ValueError(f"expected {n_models} weights (one per model), got {len(weights)}")
    w = np.asarray([float(v) for v in weights], dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and non-negative")
    largest = float(w.max())
    if not largest > 0:
        raise ValueError("weights must not all be zero")
    scaled = w / largest
    normalised: FloatArray = scaled / float(scaled.sum())
    return normalised


def average_coefficients(
    coefficients: Sequence[ArrayLike], weights: Sequence[float] | None = None
) -> FloatArray:
    """The weighted average Σ π_i f_i of coefficient arrays of one shape (module doc),
    rounded to the release grid, in that shape: d-vectors (binary and regression models) or
    (K, d) matrices (multi-class models, row k = class k: the average is taken entry by
    entry, W̄ = Σ π_i W_i, so class k's row of W̄ is the average of the sites' rows k).

    Privacy, multi-class and regression: W̄ is a function of the released W_i and public
    weights only, so the post-processing argument of the module doc holds unchanged (nothing
    is spent). A regression model's coefficients score in the [−1, 1] units of its label's
    bounds; models averaged together declare the same bounds (the study's), so their scores
    share one scale and the averaged score maps back through the same bounds.

    Raises ``ValueError`` when there are no models, the arrays differ in shape or hold
    non-finite values, or the weights are invalid (:func:`normalised_weights`).
    """
    if not coefficients:
        raise ValueError("averaging needs at least one model")
    arrays = [np.asarray(c, dtype=np.float64) for c in coefficients]
    shape = arrays[0].shape
    if arrays[0].size == 0 or arrays[0].ndim not in (1, 2) or any(a.shape != shape for a in arrays):
        raise ValueError(
            "every model must have the same, non-zero number of coefficients (and of classes)"
        )
    M = np.vstack([a.reshape(-1) for a in arrays])
    if not np.all(np.isfinite(M)):
        raise ValueError("coefficients must be finite")
    pi = normalised_weights(len(arrays), weights)
    averaged: FloatArray = round_to_grid(pi @ M).reshape(shape)
    return averaged


def _site_matrix(site_models: Sequence[ArrayLike], d: int, n_classes: int = 0) -> FloatArray:
    """The site models stacked by rows: N × d (weight vectors), or N·K × d when
    ``n_classes`` = K ≥ 3 (each model a K × d matrix, its K rows in class order)."""
    if not site_models:
        raise PrivacyParameterError("the feature method needs at least one site model")
    per_model = n_classes if n_classes >= 3 else 1
    arrays = [np.asarray(m, dtype=np.float64) for m in site_models]
    if any(a.size != per_model * d or (per_model > 1 and a.ndim != 2) for a in arrays):
        what = f"{per_model} × {d} weights (one row per class)" if per_model > 1 else f"{d} weights"
        raise PrivacyParameterError(f"every site model must have {what}, one per feature")
    M = np.vstack([a.reshape(per_model, d) for a in arrays])
    if not np.all(np.isfinite(M)):
        raise PrivacyParameterError("site model weights must be finite")
    return M


def linear_meta_scale(M: ArrayLike) -> float:
    """s = 1/‖M‖₂ (1 when M = 0): public, from the site models alone; ‖s M x‖ ≤ ‖x‖."""
    norm = float(np.linalg.norm(np.asarray(M, dtype=np.float64), ord=2))
    return 1.0 if norm == 0.0 else 1.0 / norm


def linear_meta_design(X: ArrayLike, M: ArrayLike) -> FloatArray:
    """Rows s·M x for the rows x of X (clipped to norm ≤ 1 only to absorb rounding)."""
    Mf = np.asarray(M, dtype=np.float64)
    Z = (np.asarray(X, dtype=np.float64) @ Mf.T) * linear_meta_scale(Mf)
    return clip_rows(Z, copy=False)


def feature_fit(
    X: ArrayLike,
    y: ArrayLike,
    site_models: Sequence[ArrayLike],
    *,
    meta: str,
    mechanism: str,
    epsilon: float,
    delta: float = 0.0,
    loss: str = "logistic",
    regularization: float,
    rng: np.random.Generator | None = None,
    progress: ProgressCallback | None = None,
    task: Task = "binary",
    n_classes: int = 2,
) -> FitResult:
    """The feature method (module doc): a DP meta-level fit on the holdout (X, y) over the
    site models' outputs. Raises ``ValueError`` (:class:`PrivacyParameterError`) for bad input
    and ``ConvergenceError`` when the solver does not converge.

    Multi-class and numeric labels (``task``), ``linear`` meta-features only. Regression: the
    site models are weight vectors in the labels' [−1, 1] units, M is N × d as for binary
    labels, and the meta-level fit is a regression fit of y ∈ [−1, 1] on z = s·Mx, released
    as s·Mᵀω. Multi-class: each site model is a K × d matrix W_i; M stacks their rows
    (N·K × d), z = s·Mx ∈ ℝ^{NK} with s = 1/‖M‖₂, so ‖z‖ ≤ ‖x‖ ≤ 1 (the same argument as for
    N rows), and the meta-level fit is a K-class fit of Ω (K × NK) on z, released as the
    K × d matrix s·ΩM (the same scores Ωz). In both cases M and s are functions of the site
    models alone, public to the holdout, so the holdout's guarantee is the meta-level
    mechanism's own, in dimension N (regression) or N·K (multi-class), for its own task:
    no new sensitivity. ``sigmoid`` meta-features (per-model probabilities and a stacked
    model) stay binary."""
    from service.dp import fit  # the package imports this module's siblings only

    if meta not in META_FEATURE_KINDS:
        raise PrivacyParameterError(f"meta_features must be one of {', '.join(META_FEATURE_KINDS)}")
    if mechanism not in meta_level_mechanisms():
        raise PrivacyParameterError(
            f"the meta-level mechanism must be one of {', '.join(meta_level_mechanisms())}"
        )
    if task != "binary" and meta != "linear":
        raise PrivacyParameterError(
            "a multi-class or numeric label takes linear meta-features only (the sigmoid ones "
            "are per-model probabilities of a binary label)"
        )
    Xf, yf = validate_design(X, y, task, n_classes)
    M = _site_matrix(site_models, int(Xf.shape[1]), n_classes if task == "multiclass" else 0)
    if meta == "linear":
        scale = linear_meta_scale(M)
        Z = linear_meta_design(Xf, M)
    else:
        scale = 1.0 / math.sqrt(M.shape[0] + 1)
        Z = meta_features(Xf, list(M), None, kind="sigmoid", intercept=True)
    result = fit(
        Z,
        yf,
        mechanism,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        rng=rng,
        progress=progress,
        task=task,
        n_classes=n_classes,
    )
    omega = np.asarray(result.coef, dtype=np.float64)
    model: LinearModel | MulticlassModel | StackedModel
    if task == "multiclass":
        assert isinstance(result.model, MulticlassModel)  # a multi-class fit releases one
        model = MulticlassModel(coef=round_to_grid(scale * (result.model.coef @ M)))
    elif meta == "linear":
        model = LinearModel(coef=round_to_grid(scale * (M.T @ omega)))
    else:
        model = StackedModel(
            method="samples",
            low_level=tuple(M),
            high_level=omega,
            groups=None,
            n_features=int(Xf.shape[1]),
            meta_features="sigmoid",
            high_level_intercept=True,
        )
    details = dict(result.details)
    details.update(
        meta_features=meta,
        n_site_models=int(M.shape[0]),
        meta_scale=scale,
        meta_mechanism=mechanism,
    )
    return FitResult(
        mechanism="feature",
        model=model,
        epsilon=result.epsilon,
        delta=result.delta,
        details=details,
        composition=result.composition
        + "; the meta-features are a public map of the holdout rows (site models and their "
        "public scale factor), so the meta-level guarantee is the holdout's",
        expected_noise_norm=result.expected_noise_norm,
        seeded=rng is not None,
    )
