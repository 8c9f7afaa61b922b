"""What a fit predicts: the three tasks of PrivFit's DP core and how their labels are encoded.

* ``binary``: two classes, y ∈ {−1, +1} (the positive class is +1). Losses: margin losses
  l(y·wᵀx) (``logistic``, ``huber`` — the Huber-smoothed hinge), :mod:`service.dp.core.losses`.
* ``multiclass``: K ≥ 3 classes, y ∈ {0, 1, …, K − 1} (the index of the class in the label
  spec's declared order). The model is a d × K weight matrix W, the score of class k is
  W[:, k]ᵀx. Loss: ``logistic`` here means the multinomial (softmax) logistic loss.
* ``regression``: a numeric label whose public bounds [lower, upper] the domain layer maps
  linearly onto [−1, 1] (y = 2(v − lower)/(upper − lower) − 1, values outside clipped), so
  every row has |y| ≤ 1. Losses: ``squared`` ((y − wᵀx)²/2) and ``huber`` (the Huber loss of
  the residual).

Every privacy proof of a mechanism assumes its task's encoding: :func:`check_labels` enforces
it (a ``ValueError`` naming the rule, never a value) and :func:`check_task` the public pair
(task, K). A mechanism declares the tasks it fits in its capabilities
(:attr:`~service.dp.core.options.Capabilities.tasks`).
"""

from __future__ import annotations

from typing import Any, Final, Literal, cast

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "MAX_CLASSES",
    "TASKS",
    "TASK_LOSSES",
    "Task",
    "check_labels",
    "check_task",
]

Task = Literal["binary", "multiclass", "regression"]
TASKS: Final[tuple[Task, ...]] = ("binary", "multiclass", "regression")
#: The losses each task takes (the first is its default).
TASK_LOSSES: Final[dict[str, tuple[str, ...]]] = {
    "binary": ("logistic", "huber"),
    "multiclass": ("logistic",),
    "regression": ("squared", "huber"),
}
#: The largest number of classes the DP core accepts (the service's setting may be lower).
MAX_CLASSES: Final[int] = 1000


def check_task(task: object, n_classes: object) -> tuple[Task, int]:
    """The checked (task, K): K = 2 for ``binary``, 3 ≤ K ≤ :data:`MAX_CLASSES` for
    ``multiclass``, K = 1 (one output) for ``regression``. ``ValueError`` otherwise."""
    if not isinstance(task, str) or task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if task == "regression":
        return "regression", 1
    if isinstance(n_classes, bool) or not isinstance(n_classes, int | np.integer):
        raise ValueError("n_classes must be an integer")
    k = int(n_classes)
    if task == "binary":
        if k != 2:
            raise ValueError("a binary task has exactly 2 classes")
        return "binary", 2
    if not 3 <= k <= MAX_CLASSES:
        raise ValueError(f"a multiclass task has 3 to {MAX_CLASSES} classes, got {k}")
    return cast(Task, task), k


def check_labels(y: Any, n: int, task: Task = "binary", n_classes: int = 2) -> NDArray[np.float64]:
    """y as a C-contiguous float64 vector of length ``n`` encoded for ``task`` (module doc).

    ``ValueError`` names the rule and how many entries break it, never a value."""
    y_arr = np.asarray(y)
    if y_arr.ndim != 1:
        raise ValueError(f"y must be 1-D, got {y_arr.ndim} dimension(s)")
    if y_arr.shape[0] != n:
        raise ValueError(f"y must have one label per row of X: X has {n} rows, y has {y_arr.size}")
    rule = {
        "binary": "only the labels -1 and +1",
        "multiclass": f"only the class indices 0 to {n_classes - 1}",
        "regression": "only finite numbers in [-1, 1] (the label's bounds mapped onto [-1, 1])",
    }[task]
    if y_arr.dtype == np.bool_ or not np.issubdtype(y_arr.dtype, np.number):
        raise ValueError(f"y must contain {rule}")
    if np.issubdtype(y_arr.dtype, np.complexfloating):
        raise ValueError(f"y must contain {rule}")
    yf = np.ascontiguousarray(y_arr, dtype=np.float64)
    if task == "binary":
        wrong = (yf != 1.0) & (yf != -1.0)
    elif task == "multiclass":
        with np.errstate(invalid="ignore"):
            wrong = ~((yf >= 0.0) & (yf <= n_classes - 1) & (yf == np.floor(yf)))
    else:
        with np.errstate(invalid="ignore"):
            wrong = ~((yf >= -1.0) & (yf <= 1.0))
    bad = int(np.count_nonzero(wrong))
    if bad:
        raise ValueError(f"y must contain {rule}; {bad} entries do not")
    return yf
