"""Data-independent preprocessing: raw columns → design matrix with rows in the unit ball.

Every ERM mechanism of PrivFit needs ‖x‖ ≤ 1 for every row (docs/design.md §2). The transform below
is built only from a public :class:`PreprocessingSpec` declared by the uploader and acts on
each record separately, so it is a fixed per-record map: applying it before a DP mechanism
costs no privacy and reads nothing from the data (no min/max, no category list, no scale).

For a row, in the order of ``spec.features``:

* **numeric** column with public bounds [a, b]: v ↦ (min(max(v, a), b) − a)/(b − a) ∈ [0, 1]
  (clamp to the declared bounds, then map the interval affinely onto [0, 1]);
* **categorical** column with the declared list (c_1, …, c_m): the one-hot indicator of the
  value's position in the list; a value not in the list gives the all-zero block. Values are
  compared as text: ``str``/``bytes`` as they are, integers in decimal, integral floats as
  integers (``3.0`` → ``"3"``), other floats by ``repr``, booleans as ``"True"``/``"False"``;
* **intercept** (if asked): the constant 1.

Each coordinate lies in [0, 1] and each categorical block has at most one 1, so before the
row-norm step ‖x‖² ≤ (#numeric + #categorical + intercept) =: M². Then

* ``row_norm="clip"`` (default): x ↦ x / max(1, ‖x‖) (rows inside the unit ball are kept
  as they are; the others are projected onto the sphere);
* ``row_norm="scale"``: x ↦ x / M, with the public constant M from the spec alone.

Optionally a public :class:`~service.dp.data.projection.RandomProjection` R (k × d) follows,
x ↦ Rx, and every projected row is clipped to norm ≤ 1 again.

Missing or non-finite values (None, NaN, ±inf) and non-numbers in numeric columns raise
``ValueError`` naming the column and the number of offending rows — never a value. PrivFit
does not impute: an imputation rule would have to be public too, and the uploader decides it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.dp.data.projection import RandomProjection, clip_rows

__all__ = [
    "CategoricalFeature",
    "Feature",
    "NumericFeature",
    "PreprocessingSpec",
    "labels_from_column",
]

FloatArray = NDArray[np.float64]
RowNorm = Literal["clip", "scale"]
_ROW_NORMS = ("clip", "scale")
_SPEC_VERSION = 1


def _check_column_name(column: object) -> str:
    if not isinstance(column, str) or not column:
        raise ValueError(f"a column name must be a non-empty string, got {column!r}")
    return column


def _finite_float(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{what} must be a number, got {type(value).__name__}")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"{what} must be finite, got {out!r}")
    return out


@dataclass(frozen=True, slots=True)
class NumericFeature:
    """A numeric column clamped to the public bounds [lower, upper] and mapped onto [0, 1]."""

    column: str
    lower: float
    upper: float

    def __post_init__(self) -> None:
        _check_column_name(self.column)
        lower = _finite_float(self.lower, f"the lower bound of column {self.column!r}")
        upper = _finite_float(self.upper, f"the upper bound of column {self.column!r}")
        if not lower < upper:
            raise ValueError(
                f"column {self.column!r}: the lower bound must be smaller than the upper bound"
            )
        if not math.isfinite(upper - lower):
            raise ValueError(f"column {self.column!r}: the bounds are too far apart")
        object.__setattr__(self, "lower", lower)
        object.__setattr__(self, "upper", upper)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.column,)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "numeric", "column": self.column, "lower": self.lower, "upper": self.upper}


@dataclass(frozen=True, slots=True)
class CategoricalFeature:
    """A categorical column one-hot encoded against the declared, public category list."""

    column: str
    categories: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_column_name(self.column)
        if isinstance(self.categories, str) or not isinstance(self.categories, Sequence):
            raise ValueError(f"column {self.column!r}: categories must be a list of strings")
        cats = tuple(self.categories)
        if not cats:
            raise ValueError(f"column {self.column!r}: the category list must not be empty")
        if not all(isinstance(c, str) for c in cats):
            raise ValueError(f"column {self.column!r}: every category must be a string")
        if len(set(cats)) != len(cats):
            raise ValueError(f"column {self.column!r}: the categories must be unique")
        object.__setattr__(self, "categories", cats)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"{self.column}={c}" for c in self.categories)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "categorical", "column": self.column, "categories": list(self.categories)}


Feature = NumericFeature | CategoricalFeature


@dataclass(frozen=True, slots=True)
class PreprocessingSpec:
    """The public, data-independent map from raw columns to the design matrix (module doc)."""

    features: tuple[Feature, ...]
    intercept: bool = True
    row_norm: RowNorm = "clip"
    projection: RandomProjection | None = None
    _raw_names: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.features, NumericFeature | CategoricalFeature) or not isinstance(
            self.features, Sequence
        ):
            raise ValueError("features must be a list of numeric or categorical features")
        feats = tuple(self.features)
        if not feats:
            raise ValueError("the preprocessing spec needs at least one feature")
        for f in feats:
            if not isinstance(f, NumericFeature | CategoricalFeature):
                raise ValueError(f"not a feature: {type(f).__name__}")
        columns = [f.column for f in feats]
        dupes = sorted({c for c in columns if columns.count(c) > 1})
        if dupes:
            raise ValueError(f"columns appear more than once: {', '.join(map(repr, dupes))}")
        if not isinstance(self.intercept, bool):
            raise ValueError("intercept must be true or false")
        if self.row_norm not in _ROW_NORMS:
            raise ValueError(f"row_norm must be 'clip' or 'scale', got {self.row_norm!r}")
        names: list[str] = [n for f in feats for n in f.names]
        if self.intercept:
            names.append("intercept")
        clashes = (
            sorted({n for n in names if names.count(n) > 1}) if len(set(names)) < len(names) else []
        )
        if clashes:
            raise ValueError(
                "feature names would clash (rename a column or category): "
                + ", ".join(map(repr, clashes))
            )
        if self.projection is not None:
            if not isinstance(self.projection, RandomProjection):
                raise ValueError("projection must be a RandomProjection")
            if self.projection.d_in != len(names):
                raise ValueError(
                    f"the projection expects {self.projection.d_in} input features but the "
                    f"spec produces {len(names)}"
                )
        object.__setattr__(self, "features", feats)
        object.__setattr__(self, "_raw_names", tuple(names))

    # ---- public description -----------------------------------------------------------------

    @property
    def columns(self) -> tuple[str, ...]:
        """The raw input columns the transform reads."""
        return tuple(f.column for f in self.features)

    def raw_feature_names(self) -> tuple[str, ...]:
        """Names of the encoded features before any projection (e.g. ``workclass=Private``)."""
        return self._raw_names

    def feature_names(self) -> tuple[str, ...]:
        """Names of the design matrix's columns (``proj_0`` … when a projection is used)."""
        if self.projection is not None:
            return tuple(f"proj_{i}" for i in range(self.projection.k))
        return self._raw_names

    @property
    def n_raw_features(self) -> int:
        return len(self._raw_names)

    @property
    def n_features(self) -> int:
        """Columns of the design matrix."""
        return self.projection.k if self.projection is not None else len(self._raw_names)

    @property
    def max_raw_norm(self) -> float:
        """M = √(#numeric + #categorical + intercept): the largest possible ‖x‖ before the
        row-norm step (each numeric entry ≤ 1, each one-hot block has norm ≤ 1). Public."""
        return math.sqrt(len(self.features) + (1 if self.intercept else 0))

    # ---- the transform ----------------------------------------------------------------------

    def transform(self, columns: Mapping[str, ArrayLike]) -> FloatArray:
        """The float64 design matrix (n × n_features); every row has L2 norm ≤ 1."""
        if not isinstance(columns, Mapping):
            raise ValueError("columns must be a mapping from column name to values")
        missing = [c for c in self.columns if c not in columns]
        if missing:
            raise ValueError(f"missing input columns: {', '.join(map(repr, missing))}")
        arrays: dict[str, NDArray[Any]] = {}
        n: int | None = None
        for col in self.columns:
            arr = np.asarray(columns[col])
            if arr.ndim != 1:
                raise ValueError(f"column {col!r} must be one-dimensional")
            if n is None:
                n = arr.shape[0]
            elif arr.shape[0] != n:
                raise ValueError(f"column {col!r} has a different number of rows than the others")
            arrays[col] = arr
        assert n is not None
        numeric = [
            _numeric_values(f.column, arrays[f.column])
            for f in self.features
            if isinstance(f, NumericFeature)
        ]
        codes = [
            _category_codes(f.column, arrays[f.column], f.categories)
            for f in self.features
            if isinstance(f, CategoricalFeature)
        ]
        return self._assemble(n, numeric, codes)

    def transform_codes(
        self, numeric: NDArray[np.floating[Any]], codes: NDArray[np.integer[Any]]
    ) -> FloatArray:
        """:meth:`transform` of columns already reduced to numbers and category codes.

        ``numeric`` is (n, #numeric features) of raw values, ``codes`` (n, #categorical
        features) of indices into each feature's declared list (−1: not declared), both in
        feature order. The result equals ``transform`` of the same rows: this is the same
        data-independent map, without text comparisons (how stored datasets are read back).
        """
        num = np.asarray(numeric, dtype=np.float64)
        cat = np.asarray(codes)
        n_num = sum(isinstance(f, NumericFeature) for f in self.features)
        n_cat = len(self.features) - n_num
        if num.ndim != 2 or cat.ndim != 2 or num.shape[1] != n_num or cat.shape[1] != n_cat:
            raise ValueError(f"expected ({n_num}) numeric and ({n_cat}) categorical columns")
        n = num.shape[0]
        if cat.shape[0] != n:
            raise ValueError("numeric and categorical columns have different numbers of rows")
        if not np.all(np.isfinite(num)):
            raise ValueError("numeric columns must be finite")
        sizes = [len(f.categories) for f in self.features if isinstance(f, CategoricalFeature)]
        for j, size in enumerate(sizes):
            column = cat[:, j]
            if column.size and (column.min() < -1 or column.max() >= size):
                raise ValueError("category codes out of range")
        return self._assemble(
            n,
            [num[:, i].copy() for i in range(n_num)],
            [cat[:, j].astype(np.intp) for j in range(n_cat)],
        )

    def _assemble(
        self, n: int, numeric: list[FloatArray], codes: list[NDArray[np.intp]]
    ) -> FloatArray:
        """Scale numeric values to [0, 1] by their public bounds (clamped), one-hot the
        codes, add the intercept, bring rows into the unit ball, project if configured."""
        X = np.zeros((n, self.n_raw_features), dtype=np.float64)
        offset = 0
        num_iter, code_iter = iter(numeric), iter(codes)
        for f in self.features:
            if isinstance(f, NumericFeature):
                v = next(num_iter)
                np.clip(v, f.lower, f.upper, out=v)
                X[:, offset] = (v - f.lower) / (f.upper - f.lower)
                offset += 1
            else:
                code = next(code_iter)
                known = np.flatnonzero(code >= 0)
                X[known, offset + code[known]] = 1.0
                offset += len(f.categories)
        if self.intercept:
            X[:, offset] = 1.0
        if self.row_norm == "clip":
            X = clip_rows(X, copy=False)
        else:
            X /= self.max_raw_norm
            # x/M has norm ≤ 1 up to rounding; the clip removes the last ulps (a no-op otherwise)
            X = clip_rows(X, copy=False)
        if self.projection is not None:
            X = self.projection.apply(X)
        return X

    # ---- JSON -------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": _SPEC_VERSION,
            "features": [f.to_dict() for f in self.features],
            "intercept": self.intercept,
            "row_norm": self.row_norm,
            "projection": None if self.projection is None else self.projection.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PreprocessingSpec:
        if not isinstance(data, Mapping):
            raise ValueError("a preprocessing spec must be a JSON object")
        unknown = set(data) - {"version", "features", "intercept", "row_norm", "projection"}
        if unknown:
            raise ValueError(f"unknown preprocessing fields: {', '.join(sorted(unknown))}")
        version = data.get("version", _SPEC_VERSION)
        if version != _SPEC_VERSION:
            raise ValueError(f"unsupported preprocessing spec version {version!r}")
        raw_features = data.get("features")
        if not isinstance(raw_features, list):
            raise ValueError("features must be a list")
        features: list[Feature] = []
        for i, item in enumerate(raw_features):
            if not isinstance(item, Mapping):
                raise ValueError(f"feature {i} must be an object")
            kind = item.get("type")
            if kind == "numeric":
                _only_keys(item, {"type", "column", "lower", "upper"}, i)
                features.append(
                    NumericFeature(
                        column=item.get("column"),  # type: ignore[arg-type]
                        lower=item.get("lower"),  # type: ignore[arg-type]
                        upper=item.get("upper"),  # type: ignore[arg-type]
                    )
                )
            elif kind == "categorical":
                _only_keys(item, {"type", "column", "categories"}, i)
                cats = item.get("categories")
                if not isinstance(cats, list):
                    raise ValueError(f"feature {i}: categories must be a list of strings")
                features.append(
                    CategoricalFeature(column=item.get("column"), categories=tuple(cats))  # type: ignore[arg-type]
                )
            else:
                raise ValueError(f"feature {i}: type must be 'numeric' or 'categorical'")
        projection = data.get("projection")
        row_norm = data.get("row_norm", "clip")
        if row_norm not in _ROW_NORMS:
            raise ValueError(f"row_norm must be 'clip' or 'scale', got {row_norm!r}")
        return cls(
            features=tuple(features),
            intercept=data.get("intercept", True),
            row_norm=cast(RowNorm, row_norm),
            projection=None if projection is None else RandomProjection.from_dict(projection),
        )


def _only_keys(item: Mapping[str, Any], allowed: set[str], i: int) -> None:
    unknown = set(item) - allowed
    if unknown:
        raise ValueError(f"feature {i}: unknown fields {', '.join(sorted(unknown))}")


# ---- column conversion ------------------------------------------------------------------------


def _parse_number(v: object) -> tuple[float, bool]:
    """(value, parsed): None and '' count as missing (NaN); unparsable text is not parsed."""
    if v is None:
        return math.nan, True
    if isinstance(v, bool):
        return float(v), True
    if isinstance(v, int | float | np.integer | np.floating):
        return float(v), True
    if isinstance(v, str | bytes):
        text = v.strip()
        if not text:
            return math.nan, True
        try:
            return float(text), True
        except ValueError:
            return math.nan, False
    return math.nan, False


_parse_numbers = np.frompyfunc(_parse_number, 1, 1)


def _numeric_values(column: str, arr: NDArray[Any]) -> FloatArray:
    """The column as a fresh float64 array; raises on missing, non-finite or non-numbers."""
    if arr.dtype.kind in "biuf":
        v = arr.astype(np.float64)
    else:
        try:
            v = arr.astype(np.float64)
        except (ValueError, TypeError):
            pairs = _parse_numbers(arr)
            ok = np.fromiter((p[1] for p in pairs), dtype=bool, count=arr.shape[0])
            bad = int(np.count_nonzero(~ok))
            if bad:
                raise ValueError(
                    f"column {column!r}: {bad} row(s) are not numbers (the values are not shown)"
                ) from None
            v = np.fromiter((p[0] for p in pairs), dtype=np.float64, count=arr.shape[0])
    nonfinite = int(np.count_nonzero(~np.isfinite(v)))
    if nonfinite:
        raise ValueError(
            f"column {column!r}: {nonfinite} row(s) are missing or not finite; PrivFit does not "
            "impute values, drop or fill them with a public rule before uploading"
        )
    return v


def _text_of(v: object) -> str | None:
    """The text a categorical or label value is compared by; None when missing."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        if not math.isfinite(f):
            return None
        return str(int(f)) if f.is_integer() and abs(f) < 2.0**63 else repr(f)
    return str(v)


_texts_of = np.frompyfunc(_text_of, 1, 1)


def _as_text(column: str, values: ArrayLike) -> NDArray[np.str_]:
    """Values as a unicode array (see :func:`_text_of`); raises on missing values."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"column {column!r} must be one-dimensional")
    if arr.dtype.kind == "U":
        return cast(NDArray[np.str_], arr)
    if arr.dtype.kind in "biu":
        if arr.dtype.kind == "b":
            return np.where(arr, "True", "False")
        return cast(NDArray[np.str_], arr.astype(str))
    if arr.dtype.kind == "f":
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        if bad:
            raise ValueError(f"column {column!r}: {bad} row(s) are missing or not finite")
        integral = (arr == np.round(arr)) & (np.abs(arr) < 2.0**63)
        as_int = np.where(integral, arr, 0.0).astype(np.int64).astype(str)
        return np.where(integral, as_int, arr.astype(str))
    texts = _texts_of(arr.astype(object)) if arr.size else np.array([], dtype=object)
    missing = int(np.fromiter((t is None for t in texts), dtype=bool, count=texts.size).sum())
    if missing:
        raise ValueError(f"column {column!r}: {missing} row(s) are missing")
    return cast(NDArray[np.str_], texts.astype(str)) if texts.size else np.array([], dtype=str)


def _category_codes(
    column: str, values: ArrayLike, categories: tuple[str, ...]
) -> NDArray[np.intp]:
    """Index of each value in ``categories`` (−1 when not declared), by binary search."""
    texts = _as_text(column, values)
    cats = np.asarray(categories, dtype=str)
    order = np.argsort(cats, kind="stable")
    sorted_cats = cats[order]
    if texts.size == 0:
        return np.zeros(0, dtype=np.intp)
    pos = np.searchsorted(sorted_cats, texts)
    pos_c = np.minimum(pos, len(sorted_cats) - 1)
    found = sorted_cats[pos_c] == texts
    return np.where(found, order[pos_c], -1).astype(np.intp)


def labels_from_column(values: ArrayLike, positive: object, *, column: str = "label") -> FloatArray:
    """Labels in {−1, +1}: +1 where the value equals ``positive`` (compared as text, like
    categorical values), −1 elsewhere. Missing labels raise ``ValueError`` naming ``column``
    and the number of rows (never a value)."""
    target = _text_of(positive)
    if target is None:
        raise ValueError("the positive label must not be missing")
    texts = _as_text(column, values)
    return np.where(texts == target, 1.0, -1.0)
