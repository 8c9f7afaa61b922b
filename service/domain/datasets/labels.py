"""What a dataset's label holds, and how it is stored, given to the DP core and mapped back.

A label spec has one of three forms (all public, never read from the data):

* ``{"column", "positive", "negative"}``: **binary**. Stored as int8 ±1; the DP core gets
  y ∈ {−1, +1}. (A ``classes`` list of exactly two values is this form with
  ``negative = classes[0]``, ``positive = classes[1]``.)
* ``{"column", "classes": [c_0, …, c_{K−1}]}``, 3 ≤ K ≤ ``settings.max_classes``:
  **multiclass**. Stored as the class index k (int8 or int16, the smallest that holds K − 1);
  the DP core gets y = k as a float64 holding an integer (class k is ``classes[k]``).
* ``{"column", "lower": L, "upper": U}``, L < U finite: **regression**. A value v is clipped
  to [L, U] when the file is read (the rows clipped are counted in the ingest report) and
  stored as that float64, exactly. The DP core gets

      y = 2(v − L)/(U − L) − 1 ∈ [−1, 1]

  (each step is a correctly rounded, monotone float operation, so L ≤ v ≤ U gives
  −1 ≤ y ≤ 1 exactly), and a score s of a released model maps back to

      v̂ = L + (clip(s, −1, 1) + 1)/2 · (U − L) ∈ [L, U],

  so every prediction lies within the public bounds.

The form is read back from the stored label JSON by :meth:`LabelTask.from_label`; a label
without ``classes`` and without bounds is binary, so every dataset and model stored before
reads back unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.domain.errors import InvalidInputError
from service.dp.core.tasks import Task

__all__ = [
    "DEFAULT_MAX_CLASSES",
    "LabelTask",
    "UnsupportedTaskError",
    "require_binary",
]

#: The default of ``settings.max_classes``.
DEFAULT_MAX_CLASSES: Final[int] = 100


class UnsupportedTaskError(InvalidInputError):
    """An operation whose analysis or encoding assumes another kind of label (422; the message
    gives the reason)."""

    slug = "unsupported-label-task"
    title = "Not available for this kind of label"


@dataclass(frozen=True, slots=True)
class LabelTask:
    """The public facts of a label: its task, its classes (multiclass, in declared order) or
    its bounds (regression). See the module docstring for the encodings."""

    task: Task
    classes: tuple[str, ...] = ()
    lower: float | None = None
    upper: float | None = None

    @classmethod
    def from_label(cls, label: Mapping[str, Any] | None) -> LabelTask:
        """The task of a stored label JSON (a dataset spec's or a model's ``label``)."""
        if not label:
            return cls("binary")
        if label.get("classes") is not None:
            return cls("multiclass", classes=tuple(str(c) for c in label["classes"]))
        if label.get("lower") is not None and label.get("upper") is not None:
            return cls("regression", lower=float(label["lower"]), upper=float(label["upper"]))
        return cls("binary")

    @property
    def n_classes(self) -> int:
        """K as the DP core counts it: 2 (binary), K (multiclass), 1 (regression)."""
        if self.task == "multiclass":
            return len(self.classes)
        return 1 if self.task == "regression" else 2

    @property
    def dp_kwargs(self) -> dict[str, Any]:
        """``task`` and ``n_classes`` for :func:`service.dp.fit` and its relatives."""
        return {"task": self.task, "n_classes": self.n_classes}

    def _bounds(self) -> tuple[float, float]:
        if self.lower is None or self.upper is None:
            raise ValueError("a numeric label needs its bounds")
        return self.lower, self.upper

    def to_unit(self, values: NDArray[Any]) -> NDArray[np.float64]:
        """Numeric labels v ∈ [L, U] → y = 2(v − L)/(U − L) − 1 ∈ [−1, 1]."""
        low, high = self._bounds()
        v = np.asarray(values, dtype=np.float64)
        y = 2.0 * ((v - low) / (high - low)) - 1.0
        return np.clip(y, -1.0, 1.0)

    def from_unit(self, scores: NDArray[Any]) -> NDArray[np.float64]:
        """Scores s (in [−1, 1] units) → L + (clip(s, −1, 1) + 1)/2 · (U − L) ∈ [L, U]."""
        low, high = self._bounds()
        s = np.clip(np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=0.0), -1.0, 1.0)
        return np.clip(low + (s + 1.0) / 2.0 * (high - low), low, high)

    def dp_labels(self, stored: NDArray[Any]) -> NDArray[np.float64]:
        """Stored labels (±1, class indices, or clipped numbers) in the DP core's encoding."""
        if self.task == "regression":
            return self.to_unit(stored)
        return np.asarray(stored, dtype=np.float64)

    def describe(self) -> str:
        """A label kind in words, for messages (never a value)."""
        if self.task == "multiclass":
            return f"a multi-class label ({len(self.classes)} classes)"
        if self.task == "regression":
            return "a numeric label"
        return "a binary label"


def require_binary(
    label: Mapping[str, Any] | None, what: str, *, loc: list[str], why: str | None = None
) -> None:
    """422 :class:`UnsupportedTaskError` unless ``label`` is binary: ``what`` (e.g. offering a
    dataset to a study from a node) assumes labels ±1; the message gives ``why`` (by default,
    that it assumes labels ±1)."""
    task = LabelTask.from_label(label)
    if task.task == "binary":
        return
    reason = why or (
        "it assumes labels y = ±1 (a positive and a negative class), which a multi-class or "
        "numeric label does not have"
    )
    raise binary_only(task, what, loc=loc, why=reason)


def binary_only(
    task: LabelTask,
    what: str,
    *,
    loc: Sequence[str | int],
    why: str,
    scope: str = "binary labels",
) -> UnsupportedTaskError:
    """The 422 :class:`UnsupportedTaskError` for ``what``, defined for ``scope`` only (binary
    labels, or studies of them), met with the label ``task``, for the reason ``why``."""
    msg = f"{what} is available for {scope} only ({task.describe()}): {why}"
    return UnsupportedTaskError(msg, errors=[{"loc": list(loc), "msg": msg}])


def finite_bound(value: object) -> bool:
    """Whether a label bound is a finite number (not a boolean)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
