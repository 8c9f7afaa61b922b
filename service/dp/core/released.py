"""Released models beyond a single weight vector, and JSON (de)serialisation of every model.

:class:`~service.dp.core.base.LinearModel` scores x ↦ wᵀx. :class:`MulticlassModel` scores the K
classes of a multi-class fit, x ↦ Wx ∈ ℝ^K (row k of ``coef`` is class k's weights, the layout
of scikit-learn's ``coef_``), with class probabilities softmax(Wx). :class:`StackedModel` is the
two-level model of privacy-preserving stacking (seed 003, PST-S and PST-F):

    a_k(x) = w_kᵀ x_(k)                         (low-level model k on its columns G_k,
                                                 x_(k) = x restricted to G_k, or all of x)
    m_k(x) = σ(a_k(x))                          ("sigmoid" meta-features, in (0, 1))
           | 2σ(a_k(x)) − 1 = tanh(a_k(x)/2)    ("centered_sigmoid", in (−1, 1))
    m(x)   = [m_1(x), …, m_K(x), (1)] / √(K + [intercept])
    score  = w_hᵀ m(x)

The constant 1/√(K + [intercept]) is public and puts every meta-feature vector in the unit
ball (each entry has absolute value ≤ 1), which is what the high-level mechanism needs.
Low-level sub-vectors x_(k) are clipped to norm ≤ 1 before scoring (a no-op for rows of a
design matrix, whose full norm is already ≤ 1; it keeps scoring identical to training).

:func:`model_from_dict` rebuilds any released model from its ``to_dict()`` output, so the
service can store models as JSON and load them back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import NDArray
from scipy import special

from service.dp.core.base import FittedModel, LinearModel
from service.dp.data.projection import clip_rows

__all__ = [
    "META_FEATURES",
    "STACKING_METHODS",
    "MulticlassModel",
    "StackedModel",
    "meta_features",
    "model_from_dict",
]

FloatArray = NDArray[np.float64]
MetaFeatureKind = Literal["sigmoid", "centered_sigmoid"]
StackingMethod = Literal["samples", "features"]
META_FEATURES: tuple[str, ...] = ("sigmoid", "centered_sigmoid")
STACKING_METHODS: tuple[str, ...] = ("samples", "features")


def _vector(values: object, what: str) -> FloatArray:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise ValueError(f"{what} must be a list of numbers")
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a list of numbers") from None
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be a non-empty list of finite numbers")
    return arr


def _as_2d(X: NDArray[np.float64]) -> FloatArray:
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError("X must be a 2-D array (rows × features)")
    return arr


@dataclass(frozen=True, slots=True)
class MulticlassModel:
    """The multinomial linear model of a K-class fit (K ≥ 3): ``coef`` of shape (K, d), row k
    the weights of class k (the class at position k of the label spec's declared order).

    ``decision_function`` returns the (n, K) scores XWᵀ, ``predict`` the index of the largest
    score, ``predict_proba`` softmax of the scores (rows sum to 1). ``coef`` has already been
    rounded to the release grid; it is read-only."""

    coef: FloatArray

    def __post_init__(self) -> None:
        coef = _matrix(self.coef, "coef")
        coef.setflags(write=False)
        object.__setattr__(self, "coef", coef)

    @property
    def n_classes(self) -> int:
        return int(self.coef.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.coef.shape[1])

    def decision_function(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        X = _as_2d(X)
        if X.shape[1] != self.n_features:
            raise ValueError(f"X must have {self.n_features} columns, got {X.shape[1]}")
        return np.asarray(X @ self.coef.T, dtype=np.float64)

    def predict(self, X: NDArray[np.float64]) -> NDArray[np.int64]:
        """The class index with the largest score (the first one on ties)."""
        return np.asarray(np.argmax(self.decision_function(X), axis=1), dtype=np.int64)

    def predict_proba(self, X: NDArray[np.float64]) -> FloatArray:
        """softmax of the scores: P(class k | x) = exp(s_k)/Σ_j exp(s_j)."""
        return np.asarray(special.softmax(self.decision_function(X), axis=1), dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "multiclass", "coef": [[float(v) for v in row] for row in self.coef]}


def _matrix(values: object, what: str) -> FloatArray:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise ValueError(f"{what} must be a list of lists of numbers")
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a list of lists of numbers of equal length") from None
    if arr.ndim != 2 or arr.shape[0] < 3 or arr.shape[1] == 0:
        raise ValueError(f"{what} must hold one non-empty list of weights per class (≥ 3)")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must contain finite numbers only")
    return arr


def meta_features(
    X: FloatArray,
    low_level: Sequence[FloatArray],
    groups: Sequence[Sequence[int]] | None,
    *,
    kind: str = "sigmoid",
    intercept: bool = True,
) -> FloatArray:
    """The scaled meta-feature matrix m(X) (rows in the unit ball), see the module doc."""
    if kind not in META_FEATURES:
        raise ValueError(f"meta_features must be one of {', '.join(META_FEATURES)}, got {kind!r}")
    X = _as_2d(X)
    K = len(low_level)
    M = np.empty((X.shape[0], K + (1 if intercept else 0)), dtype=np.float64)
    for k, w in enumerate(low_level):
        if groups is None:
            sub = X
        else:
            sub = clip_rows(X[:, np.asarray(groups[k], dtype=np.intp)], copy=False)
        a = sub @ w
        M[:, k] = special.expit(a) if kind == "sigmoid" else np.tanh(a / 2.0)
    if intercept:
        M[:, K] = 1.0
    M /= math.sqrt(M.shape[1])
    # every entry has |m| ≤ 1, so ‖m‖ ≤ 1 up to rounding; the clip removes the last ulps
    return clip_rows(M, copy=False)


@dataclass(frozen=True, slots=True)
class StackedModel:
    """Two-level stacked model (seed 003). ``groups`` is None for PST-S (every low-level model
    sees all columns) and the column indices of each low-level model for PST-F."""

    method: StackingMethod
    low_level: tuple[FloatArray, ...]
    high_level: FloatArray
    groups: tuple[tuple[int, ...], ...] | None
    n_features: int
    meta_features: MetaFeatureKind = "sigmoid"
    high_level_intercept: bool = True

    def __post_init__(self) -> None:
        if self.method not in STACKING_METHODS:
            raise ValueError(f"method must be one of {', '.join(STACKING_METHODS)}")
        if self.meta_features not in META_FEATURES:
            raise ValueError(f"meta_features must be one of {', '.join(META_FEATURES)}")
        if isinstance(self.n_features, bool) or not isinstance(self.n_features, int):
            raise ValueError("n_features must be an integer")
        if self.n_features < 1:
            raise ValueError("n_features must be at least 1")
        low = tuple(_vector(w, f"low-level model {k}") for k, w in enumerate(self.low_level))
        if not low:
            raise ValueError("a stacked model needs at least one low-level model")
        high = _vector(self.high_level, "the high-level model")
        expected = len(low) + (1 if self.high_level_intercept else 0)
        if high.size != expected:
            raise ValueError(f"the high-level model needs {expected} weights, got {high.size}")
        groups: tuple[tuple[int, ...], ...] | None = None
        if self.groups is None:
            if self.method == "features":
                raise ValueError("feature stacking needs the column groups")
            for k, w in enumerate(low):
                if w.size != self.n_features:
                    raise ValueError(
                        f"low-level model {k} has {w.size} weights for {self.n_features} features"
                    )
        else:
            if len(self.groups) != len(low):
                raise ValueError("there must be one column group per low-level model")
            groups = tuple(tuple(int(j) for j in g) for g in self.groups)
            seen: set[int] = set()
            for k, (g, w) in enumerate(zip(groups, low, strict=True)):
                if not g or any(j < 0 or j >= self.n_features for j in g):
                    raise ValueError(f"column group {k} must hold valid column indices")
                if seen.intersection(g) or len(set(g)) != len(g):
                    raise ValueError("column groups must be disjoint")
                seen.update(g)
                if w.size != len(g):
                    raise ValueError(
                        f"low-level model {k} has {w.size} weights for {len(g)} columns"
                    )
        for arr in (*low, high):
            arr.setflags(write=False)
        object.__setattr__(self, "low_level", low)
        object.__setattr__(self, "high_level", high)
        object.__setattr__(self, "groups", groups)

    @property
    def n_models(self) -> int:
        return len(self.low_level)

    @property
    def meta_scale(self) -> float:
        """The public factor 1/√(K + [intercept]) applied to the meta-feature vector."""
        return 1.0 / math.sqrt(self.n_models + (1 if self.high_level_intercept else 0))

    def meta(self, X: NDArray[np.float64]) -> FloatArray:
        """The meta-feature matrix m(X) fed to the high-level model."""
        X = _as_2d(X)
        if X.shape[1] != self.n_features:
            raise ValueError(f"X must have {self.n_features} columns, got {X.shape[1]}")
        return meta_features(
            X,
            self.low_level,
            self.groups,
            kind=self.meta_features,
            intercept=self.high_level_intercept,
        )

    def decision_function(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(self.meta(X) @ self.high_level, dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "stacked",
            "method": self.method,
            "n_features": self.n_features,
            "meta_features": self.meta_features,
            "high_level_intercept": self.high_level_intercept,
            "meta_scale": self.meta_scale,
            "low_level": [
                {
                    "columns": None if self.groups is None else list(self.groups[k]),
                    "coef": [float(v) for v in w],
                }
                for k, w in enumerate(self.low_level)
            ],
            "high_level": {"coef": [float(v) for v in self.high_level]},
        }


def model_from_dict(data: Mapping[str, Any]) -> FittedModel:
    """Rebuild a :class:`LinearModel`, :class:`MulticlassModel` or :class:`StackedModel` from
    its ``to_dict()``."""
    if not isinstance(data, Mapping):
        raise ValueError("a model must be a JSON object")
    kind = data.get("kind")
    if kind == "linear":
        _only(data, {"kind", "coef"})
        coef = _vector(data.get("coef"), "coef").copy()
        return LinearModel(coef=coef)
    if kind == "multiclass":
        _only(data, {"kind", "coef"})
        return MulticlassModel(coef=_matrix(data.get("coef"), "coef"))
    if kind == "stacked":
        _only(
            data,
            {
                "kind",
                "method",
                "n_features",
                "meta_features",
                "high_level_intercept",
                "meta_scale",
                "low_level",
                "high_level",
            },
        )
        low = data.get("low_level")
        high = data.get("high_level")
        if not isinstance(low, list) or not low:
            raise ValueError("low_level must be a non-empty list")
        if not isinstance(high, Mapping):
            raise ValueError("high_level must be an object with a coef list")
        coefs: list[FloatArray] = []
        columns: list[Any] = []
        for k, item in enumerate(low):
            if not isinstance(item, Mapping):
                raise ValueError(f"low-level model {k} must be an object")
            _only(item, {"columns", "coef"})
            coefs.append(_vector(item.get("coef"), f"low-level model {k}"))
            columns.append(item.get("columns"))
        if all(c is None for c in columns):
            groups = None
        elif any(c is None for c in columns):
            raise ValueError("either every low-level model has columns or none has")
        else:
            groups = []
            for k, c in enumerate(columns):
                if not isinstance(c, list) or not all(
                    isinstance(j, int) and not isinstance(j, bool) for j in c
                ):
                    raise ValueError(f"columns of low-level model {k} must be a list of integers")
                groups.append(tuple(c))
        intercept = data.get("high_level_intercept", True)
        if not isinstance(intercept, bool):
            raise ValueError("high_level_intercept must be true or false")
        model = StackedModel(
            method=cast(StackingMethod, data.get("method")),
            low_level=tuple(coefs),
            high_level=_vector(high.get("coef"), "the high-level model"),
            groups=None if groups is None else tuple(groups),
            n_features=data.get("n_features"),  # type: ignore[arg-type]
            meta_features=cast(MetaFeatureKind, data.get("meta_features", "sigmoid")),
            high_level_intercept=intercept,
        )
        scale = data.get("meta_scale")
        if scale is not None and (
            not isinstance(scale, int | float) or not math.isclose(scale, model.meta_scale)
        ):
            raise ValueError("meta_scale does not match the number of low-level models")
        return model
    raise ValueError(f"unknown model kind {kind!r}; expected 'linear', 'multiclass' or 'stacked'")


def _only(item: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = set(item) - allowed
    if unknown:
        raise ValueError(f"unknown model fields: {', '.join(sorted(unknown))}")
