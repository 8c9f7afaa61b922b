"""The public dataset spec: label classes, features with public bounds or categories, budget
caps and the missing-value policy → a :class:`~service.dp.data.preprocessing.PreprocessingSpec`.

* **Data-independent preprocessing.** The spec declares the label column and what it holds
  (:mod:`.labels`): two classes (positive and negative), 3 or more ``classes`` in a public
  order (any other label value is refused), or a number with public bounds ``lower``/``upper``
  (values outside are clipped to them and counted), every feature column
  with public bounds (numeric) or a public category list (categorical), the budget caps and
  the missing-value policy. Nothing is read from the data to build the preprocessing: a
  numeric feature without bounds is refused with an explanation.
  The resulting preprocessing (clamp, one-hot, intercept, rows clipped to norm ≤ 1) is what
  every fit and ``predict`` applies.
* **No data values in errors.** The errors below name columns and count rows; they never
  quote a cell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from service.domain.datasets.labels import DEFAULT_MAX_CLASSES, LabelTask, finite_bound
from service.domain.errors import InvalidInputError
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, to_units
from service.dp.core.tasks import Task
from service.dp.data.preprocessing import (
    CategoricalFeature,
    Feature,
    NumericFeature,
    PreprocessingSpec,
)

MissingPolicy = Literal["error", "drop"]
RowNorm = Literal["clip", "scale"]
#: Cells (CSV text) that count as missing unless the spec overrides the list. "NaN", "inf"
#: are deliberately not here: in a numeric column they are non-finite values, an error.
DEFAULT_MISSING_VALUES: Final[tuple[str, ...]] = ("", "?", "NA", "N/A", "NULL", "null")
MAX_NAME_LENGTH: Final[int] = 200

# ---- errors ---------------------------------------------------------------------------------


class DatasetInputError(InvalidInputError):
    """A rejected upload (422). ``detail`` is safe to show (column names and counts, no
    values); ``errors`` lists the individual problems as ``{"loc": [...], "msg": ...}``."""

    slug = "invalid-dataset"
    title = "Invalid dataset upload"


class DatasetSpecError(DatasetInputError):
    """The spec itself is unacceptable (before any data is read)."""

    slug = "invalid-dataset-spec"
    title = "Invalid dataset spec"


class DatasetFileError(DatasetInputError):
    """The file cannot be read as declared: empty, malformed, unknown columns, wrong types,
    NaN/inf, no rows left, a label without positive (or negative) rows."""

    slug = "invalid-dataset-file"
    title = "Invalid dataset file"


class DatasetTooWideError(DatasetFileError):
    """The file has far more columns than its spec reads (or a header or Parquet footer larger
    than the bounds): refused before its rows are parsed."""

    slug = "dataset-too-wide"
    title = "Dataset file too wide"


class LabelValuesError(DatasetFileError):
    """Label cells of no declared class (neither the positive nor the negative class, none of
    the declared ``classes``, or, for a spec that names only the positive class, more than
    one other value). Counts rows, never shows a value; ``rows`` is how many label cells are
    not of a declared class."""

    slug = "invalid-label-values"
    title = "Label values outside the declared classes"

    def __init__(self, detail: str, *, column: str, rows: int, classes: int = 2) -> None:
        which = "neither declared class" if classes == 2 else f"none of the {classes} classes"
        super().__init__(
            detail,
            errors=[
                {"loc": ["file", column], "msg": f"{rows} row(s) hold a label value of {which}"}
            ],
        )
        self.column = column
        self.rows = rows

    def extensions(self) -> dict[str, Any]:
        return {**super().extensions(), "label_column": self.column, "label_rows": self.rows}


class MissingValuesError(DatasetInputError):
    """Missing values under ``"missing": "error"``; ``columns`` maps column → rows missing."""

    slug = "missing-values"
    title = "Missing values in the dataset"

    def __init__(self, detail: str, *, columns: Mapping[str, int], rows: int) -> None:
        super().__init__(
            detail,
            errors=[
                {"loc": ["file", c], "msg": f"{k} row(s) have no value"} for c, k in columns.items()
            ],
        )
        self.columns = dict(columns)
        self.rows = rows

    def extensions(self) -> dict[str, Any]:
        return {**super().extensions(), "missing_columns": self.columns, "missing_rows": self.rows}


# ---- the spec -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """Server-side maxima for a dataset's (ε, δ) caps (settings)."""

    max_epsilon: float
    max_delta: float


@dataclass(frozen=True, slots=True)
class FeatureInput:
    """A feature as the uploader wrote it, before validation (bounds may be absent)."""

    column: str
    type: Literal["numeric", "categorical"]
    lower: float | None = None
    upper: float | None = None
    categories: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """A validated upload spec. Build it with :func:`build_spec`.

    ``epsilon_cap_units``/``delta_cap_units`` are the caps in ledger units, rounded down.
    ``task`` is what the label holds (:mod:`.labels`): for ``binary``, ``positive`` and
    ``negative`` are its classes (``negative`` is ``None`` only for a spec that names the
    positive class alone, the earlier form, whose label column must then hold exactly one
    other value, checked when the file is read); ``multiclass`` declares ``classes`` in their
    public order (class k is ``classes[k]``); ``regression`` a numeric label with public
    bounds ``label_lower`` < ``label_upper``. ``positive`` is ``None`` unless binary.
    """

    name: str
    label_column: str
    positive: str | None
    preprocessing: PreprocessingSpec
    epsilon: float
    delta: float
    epsilon_cap_units: int
    delta_cap_units: int
    missing: MissingPolicy = "error"
    missing_values: tuple[str, ...] = DEFAULT_MISSING_VALUES
    allow_non_private: bool = False
    negative: str | None = None
    #: Public prior frequency of the positive class (never read from the data), or None:
    #: the majority-class baseline fits are compared with (issue 28 item 4).
    positive_fraction: float | None = None
    task: Task = "binary"
    classes: tuple[str, ...] | None = None
    label_lower: float | None = None
    label_upper: float | None = None

    @property
    def label_task(self) -> LabelTask:
        """What the label holds and how it is encoded for the DP core."""
        return LabelTask.from_label(self.label)

    @property
    def numeric_columns(self) -> frozenset[str]:
        """Columns read as numbers: the numeric features and a numeric label."""
        numeric = {f.column for f in self.features if isinstance(f, NumericFeature)}
        if self.task == "regression":
            numeric.add(self.label_column)
        return frozenset(numeric)

    @property
    def features(self) -> tuple[Feature, ...]:
        return self.preprocessing.features

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column read from the file: the features, then the label."""
        return (*self.preprocessing.columns, self.label_column)

    @property
    def label(self) -> dict[str, Any]:
        """The label as normalised JSON: column and positive, negative (when declared) for a
        binary label; column and classes for a multi-class one; column, lower and upper for
        a numeric one."""
        out: dict[str, Any] = {"column": self.label_column}
        if self.task == "multiclass":
            out["classes"] = list(self.classes or ())
        elif self.task == "regression":
            out["lower"] = self.label_lower
            out["upper"] = self.label_upper
        else:
            out["positive"] = self.positive
            if self.negative is not None:
                out["negative"] = self.negative
        return out

    def to_dict(self) -> dict[str, Any]:
        """The spec as normalised JSON (what ``GET /v1/datasets/{id}`` shows)."""
        return {
            "name": self.name,
            "label": self.label,
            "features": [f.to_dict() for f in self.features],
            "budget": {"epsilon": self.epsilon, "delta": self.delta},
            "missing": self.missing,
            "missing_values": list(self.missing_values),
            "allow_non_private": self.allow_non_private,
            "row_norm": self.preprocessing.row_norm,
            **(
                {}
                if self.positive_fraction is None
                else {"positive_fraction": self.positive_fraction}
            ),
        }


def _label_text(value: str | int | bool) -> str:
    """The text a label value is compared by (the rule of ``service.dp.data.preprocessing``)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return value


LabelValue = str | int | bool
#: Records one problem of a spec: its location and message.
_Problem = Callable[[list[str | int], str], None]


@dataclass(frozen=True, slots=True)
class _Label:
    """The label part of a spec once its form is checked (see :func:`_check_label`)."""

    task: Task
    positive: str | None = None
    negative: str | None = None
    classes: tuple[str, ...] | None = None
    lower: float | None = None
    upper: float | None = None


def _check_label(
    problem: _Problem,
    *,
    positive: LabelValue | None,
    negative: LabelValue | None,
    classes: Sequence[LabelValue] | None,
    lower: object,
    upper: object,
    markers: Sequence[str],
    max_classes: int,
) -> _Label:
    """The label's form: positive (and negative), classes, or lower and upper; a mixture of
    forms is refused naming each field that does not belong (``problem(loc, msg)``)."""
    bounded = lower is not None or upper is not None
    if classes is not None:
        for field_name, value in (("positive", positive), ("negative", negative)):
            if value is not None:
                problem(
                    ["label", field_name],
                    f"a label with classes takes no {field_name}: declare the classes alone "
                    "(two classes: the first is the negative, the second the positive class)",
                )
        for field_name, bound in (("lower", lower), ("upper", upper)):
            if bound is not None:
                problem(
                    ["label", field_name],
                    f"a label with classes takes no {field_name}: bounds declare a numeric label",
                )
        return _classes(problem, classes, markers, max_classes)
    if bounded:
        for field_name, value in (("positive", positive), ("negative", negative)):
            if value is not None:
                problem(
                    ["label", field_name],
                    f"a numeric label (lower, upper) takes no {field_name} class",
                )
        return _bounds(problem, lower, upper)
    if positive is None:
        problem(
            ["label"],
            "declare the label's classes: positive and negative (binary), classes (3 or "
            "more, in a public order), or lower and upper (a numeric label)",
        )
        return _Label("binary")
    positive_text = _label_text(positive)
    if positive_text in markers:
        problem(
            ["label", "positive"],
            f"the positive class {positive_text!r} is also a missing-value marker; "
            "change missing_values",
        )
    negative_text = None if negative is None else _label_text(negative)
    if negative_text is not None:
        if negative_text == positive_text:
            problem(["label", "negative"], "the negative class must differ from the positive class")
        elif negative_text in markers:
            problem(
                ["label", "negative"],
                f"the negative class {negative_text!r} is also a missing-value marker; "
                "change missing_values",
            )
    return _Label("binary", positive=positive_text, negative=negative_text)


def _classes(
    problem: _Problem, classes: Sequence[LabelValue], markers: Sequence[str], max_classes: int
) -> _Label:
    texts = tuple(_label_text(c) for c in classes)
    loc: list[str | int] = ["label", "classes"]
    if not 2 <= len(texts) <= max_classes:
        problem(loc, f"declare 2 to {max_classes} classes, got {len(texts)}")
        return _Label("multiclass", classes=texts)
    dupes = sorted({c for c in texts if texts.count(c) > 1})
    if dupes:
        problem(loc, f"{len(dupes)} class(es) are listed more than once (compared as text)")
    clash = [c for c in texts if c in markers]
    if clash:
        problem(
            loc,
            "classes " + ", ".join(map(repr, clash)) + " are also missing-value markers; "
            "change missing_values",
        )
    if len(texts) == 2:
        return _Label("binary", positive=texts[1], negative=texts[0])
    return _Label("multiclass", classes=texts)


def _bounds(problem: _Problem, lower: object, upper: object) -> _Label:
    for field_name, value in (("lower", lower), ("upper", upper)):
        if value is None:
            problem(
                ["label", field_name],
                f"a numeric label needs both public bounds: {field_name} is missing",
            )
        elif not finite_bound(value):
            problem(
                ["label", field_name], f"the label's {field_name} bound must be a finite number"
            )
    if not (finite_bound(lower) and finite_bound(upper)):
        return _Label("regression")
    low, high = float(lower), float(upper)  # type: ignore[arg-type]
    if not low < high:
        problem(["label", "upper"], "the label's lower bound must be smaller than its upper bound")
    elif not math.isfinite(high - low):
        problem(["label", "upper"], "the label's range upper − lower must be a finite number")
    return _Label("regression", lower=low, upper=high)


def build_spec(
    *,
    name: str,
    label_column: str,
    positive: LabelValue | None,
    features: Sequence[FeatureInput],
    epsilon: float,
    delta: float,
    limits: BudgetLimits,
    missing: MissingPolicy = "error",
    missing_values: Sequence[str] | None = None,
    allow_non_private: bool = False,
    row_norm: RowNorm = "clip",
    negative: LabelValue | None = None,
    positive_fraction: float | None = None,
    classes: Sequence[LabelValue] | None = None,
    label_lower: float | None = None,
    label_upper: float | None = None,
    max_classes: int = DEFAULT_MAX_CLASSES,
) -> DatasetSpec:
    """Validate an upload spec; raise :class:`DatasetSpecError` listing every problem.

    Rules: a name of 1-200 characters; at least one feature; no column used twice (the label
    is not a feature); numeric features declare finite bounds with lower < upper (PrivFit never
    reads bounds from the data); categorical features declare a non-empty list of distinct
    categories; 0 < ε ≤ the server's maximum and 0 ≤ δ < 1, δ ≤ the server's maximum; no
    declared category and no label class is also a missing-value marker; the label is one
    of the forms of :mod:`.labels` (positive and negative, distinct; 2 to ``max_classes``
    distinct classes, where two are the binary form; finite bounds lower < upper), and a
    mixture of forms is refused naming each field that does not belong.
    """
    errors: list[dict[str, Any]] = []

    def problem(loc: list[str | int], msg: str) -> None:
        errors.append({"loc": loc, "msg": msg})

    if not name.strip() or len(name) > MAX_NAME_LENGTH:
        problem(["name"], f"the name must have 1 to {MAX_NAME_LENGTH} characters")
    if not label_column:
        problem(["label", "column"], "the label column must be named")
    markers = tuple(DEFAULT_MISSING_VALUES if missing_values is None else missing_values)
    label = _check_label(
        problem,
        positive=positive,
        negative=negative,
        classes=classes,
        lower=label_lower,
        upper=label_upper,
        markers=markers,
        max_classes=max_classes,
    )
    if missing not in ("error", "drop"):
        problem(["missing"], "missing must be 'error' or 'drop'")
    if row_norm not in ("clip", "scale"):
        problem(["row_norm"], "row_norm must be 'clip' or 'scale'")
    if positive_fraction is not None and not (
        isinstance(positive_fraction, float | int) and 0.0 < float(positive_fraction) < 1.0
    ):
        problem(["positive_fraction"], "positive_fraction must be a number in (0, 1)")
    elif positive_fraction is not None and label.task != "binary":
        problem(["positive_fraction"], "positive_fraction applies to a binary label only")

    if not features:
        problem(["features"], "declare at least one feature column")
    seen: dict[str, int] = {}
    built: list[Feature] = []
    unbounded: list[str] = []
    for i, f in enumerate(features):
        seen[f.column] = seen.get(f.column, 0) + 1
        loc: list[str | int] = ["features", i]
        if not f.column:
            problem([*loc, "column"], "the column must be named")
            continue
        if f.type == "numeric":
            if f.categories is not None:
                problem([*loc, "categories"], "a numeric feature takes bounds, not categories")
            if f.lower is None or f.upper is None:
                unbounded.append(f.column)
                problem(
                    loc,
                    f"numeric feature {f.column!r} needs public bounds 'lower' and 'upper'. "
                    "PrivFit will not read bounds from the data: the minimum and maximum of a "
                    "column are themselves private, and bounds computed from the rows would "
                    "void the privacy guarantee. Declare bounds known without looking at the "
                    "data (a valid range, a published top-code, a domain limit).",
                )
                continue
            if not (math.isfinite(f.lower) and math.isfinite(f.upper)):
                problem(loc, f"numeric feature {f.column!r}: the bounds must be finite")
                continue
            if not f.lower < f.upper:
                problem(loc, f"numeric feature {f.column!r}: lower must be smaller than upper")
                continue
            try:
                built.append(NumericFeature(column=f.column, lower=f.lower, upper=f.upper))
            except ValueError as exc:
                problem(loc, str(exc))
        elif f.type == "categorical":
            if f.lower is not None or f.upper is not None:
                problem(loc, f"categorical feature {f.column!r} takes categories, not bounds")
            cats = f.categories or ()
            if not cats:
                problem(
                    [*loc, "categories"],
                    f"categorical feature {f.column!r} needs its public list of categories",
                )
                continue
            dupes = sorted({c for c in cats if cats.count(c) > 1})
            if dupes:
                problem(
                    [*loc, "categories"],
                    f"categorical feature {f.column!r} lists a category more than once: "
                    + ", ".join(map(repr, dupes)),
                )
                continue
            clash = [c for c in cats if c in markers]
            if clash:
                problem(
                    [*loc, "categories"],
                    f"categorical feature {f.column!r}: categories "
                    + ", ".join(map(repr, clash))
                    + " are also missing-value markers; change missing_values",
                )
                continue
            built.append(CategoricalFeature(column=f.column, categories=tuple(cats)))
        else:
            problem([*loc, "type"], "type must be 'numeric' or 'categorical'")
    for column, count in seen.items():
        if count > 1:
            problem(["features"], f"column {column!r} is declared {count} times")
    if label_column and label_column in seen:
        problem(["label", "column"], f"the label column {label_column!r} is also a feature")

    eps_units = delta_units = 0
    if not (math.isfinite(epsilon) and epsilon > 0):
        problem(["budget", "epsilon"], "epsilon must be a finite number > 0")
    elif epsilon > limits.max_epsilon:
        problem(
            ["budget", "epsilon"],
            f"epsilon {epsilon!r} exceeds this server's maximum of {limits.max_epsilon!r}",
        )
    else:
        eps_units = to_units(epsilon, EPSILON_UNIT, "down")
        if eps_units == 0:
            problem(["budget", "epsilon"], f"epsilon must be at least {EPSILON_UNIT!r}")
    if not (math.isfinite(delta) and 0 <= delta < 1):
        problem(["budget", "delta"], "delta must satisfy 0 <= delta < 1")
    elif delta > limits.max_delta:
        problem(
            ["budget", "delta"],
            f"delta {delta!r} exceeds this server's maximum of {limits.max_delta!r}",
        )
    else:
        delta_units = to_units(delta, DELTA_UNIT, "down")

    prep: PreprocessingSpec | None = None
    if not errors:
        try:
            prep = PreprocessingSpec(features=tuple(built), intercept=True, row_norm=row_norm)
        except ValueError as exc:
            problem(["features"], str(exc))
    if errors or prep is None:
        if unbounded and len(errors) == len(unbounded):
            detail = (
                errors[0]["msg"]
                if len(unbounded) == 1
                else (
                    "numeric features "
                    + ", ".join(map(repr, unbounded))
                    + " need public bounds 'lower' and 'upper'. PrivFit will not read bounds from "
                    "the data: the minimum and maximum of a column are themselves private, and "
                    "bounds computed from the rows would void the privacy guarantee."
                )
            )
        elif len(errors) == 1:
            detail = f"invalid dataset spec: {errors[0]['msg']}"
        else:
            detail = f"invalid dataset spec: {len(errors)} problems (see errors)"
        raise DatasetSpecError(detail, errors=errors)
    return DatasetSpec(
        name=name,
        label_column=label_column,
        positive=label.positive,
        preprocessing=prep,
        epsilon=float(epsilon),
        delta=float(delta),
        epsilon_cap_units=eps_units,
        delta_cap_units=delta_units,
        missing=missing,
        missing_values=markers,
        allow_non_private=allow_non_private,
        negative=label.negative,
        positive_fraction=None if positive_fraction is None else float(positive_fraction),
        task=label.task,
        classes=label.classes if label.task == "multiclass" else None,
        label_lower=label.lower,
        label_upper=label.upper,
    )


def build_feature_spec(
    *,
    name: str,
    label_column: str,
    positive: str | int | bool | None,
    features: Sequence[FeatureInput],
    row_norm: RowNorm = "clip",
    negative: str | int | bool | None = None,
    classes: Sequence[LabelValue] | None = None,
    label_lower: float | None = None,
    label_upper: float | None = None,
    max_classes: int = DEFAULT_MAX_CLASSES,
) -> DatasetSpec:
    """:func:`build_spec` for a label and features that carry no budget (a study's shared
    spec, an uploaded model's): the same rules (any of the three label forms), with a
    placeholder budget that always passes. Only ``label``, ``task``, ``label_column``,
    ``positive``, ``negative``, ``classes``, the label bounds and ``preprocessing`` of the
    result are meaningful."""
    return build_spec(
        name=name,
        label_column=label_column,
        positive=positive,
        negative=negative,
        features=features,
        epsilon=1.0,
        delta=0.0,
        limits=BudgetLimits(max_epsilon=1.0, max_delta=0.0),
        row_norm=row_norm,
        classes=classes,
        label_lower=label_lower,
        label_upper=label_upper,
        max_classes=max_classes,
    )
