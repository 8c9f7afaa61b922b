"""A design (X, y) checked once and kept for several fits.

:func:`service.dp.fit` checks its input on every call (finite, rows of norm ≤ 1, labels ±1:
one pass over X) and the solver makes a float32 working copy of X for its first phase (another
pass, plus Xᵀy and a subsample of rows). For a caller that fits the same data again and again
(a site trying several ε, a PrivFit worker serving jobs on a stored dataset) both are the same
work each time. :func:`prepare_design` does the check once and returns a
:class:`PreparedDesign`; passed to ``fit`` in place of X (with ``y=None``), it skips the check
and lets the solver reuse the working copy it made on the first fit.

Nothing about privacy changes: the arrays are the ones that were checked (made read-only, so
they cannot change underneath), every fit still draws fresh noise, and the working copy is a
deterministic function of (X, y) that only ever enters Newton *directions*
(:mod:`service.dp.optimize.solvers`); a fit on a prepared design returns bit for bit what ``fit(X,
y)``
returns with the same noise.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.dp.core.tasks import Task, check_task
from service.dp.core.validation import validate_design

__all__ = ["PreparedDesign", "active_design", "prepare_design", "using"]

_W = TypeVar("_W")


class PreparedDesign:
    """A checked, read-only design: X (float64, n × d, C-contiguous, rows of norm ≤ 1) and
    y (float64, ±1). Build it with :func:`prepare_design`. Derived data the solver needs
    (its float32 working copy) is computed on first use and kept while the object lives;
    safe to share between threads."""

    __slots__ = ("X", "_derived", "_lock", "n_classes", "task", "y")

    def __init__(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        task: Task = "binary",
        n_classes: int = 2,
    ) -> None:
        self.X = X
        self.y = y
        #: The task y was checked for (:mod:`service.dp.core.tasks`).
        self.task: Task = task
        self.n_classes = n_classes
        self._lock = threading.Lock()
        self._derived: dict[str, Any] = {}

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes held: X, y and whatever has been derived so far."""
        with self._lock:
            derived = sum(_nbytes(v) for v in self._derived.values())
        return int(self.X.nbytes + self.y.nbytes + derived)

    def derived(self, key: str, build: Callable[[], _W]) -> _W:
        """``build()`` the first time ``key`` is asked for, the same object afterwards."""
        with self._lock:
            if key in self._derived:
                return self._derived[key]  # type: ignore[no-any-return]
            value = build()
            self._derived[key] = value
            return value


def _nbytes(value: object) -> int:
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, tuple | list):
        return sum(_nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))


def prepare_design(
    X: ArrayLike, y: ArrayLike, task: Task = "binary", n_classes: int = 2
) -> PreparedDesign:
    """Check (X, y) as :func:`service.dp.fit` does (``ValueError`` naming the rule, never a
    value) and return them prepared. Arrays that are already float64, C-contiguous, own their
    memory and are read-only are kept as they are; anything else is copied first, so no later
    write by the caller can reach the checked data."""
    X_in, y_in = np.asarray(X), np.asarray(y)
    task, n_classes = check_task(task, n_classes)
    Xf, yf = validate_design(X_in, y_in, task, n_classes)
    return PreparedDesign(_frozen(Xf, X_in), _frozen(yf, y_in), task, n_classes)


def _frozen(checked: NDArray[np.float64], given: NDArray[Any]) -> NDArray[np.float64]:
    reusable = checked is given and checked.flags.owndata and not checked.flags.writeable
    out = checked if reusable else checked.copy()
    out.flags.writeable = False
    return out


_ACTIVE: ContextVar[PreparedDesign | None] = ContextVar("privfit_prepared_design", default=None)


@contextlib.contextmanager
def using(design: PreparedDesign) -> Iterator[None]:
    """Within the block (this thread or task only), :func:`active_design` is ``design``."""
    token = _ACTIVE.set(design)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_design(X: NDArray[Any], y: NDArray[Any]) -> PreparedDesign | None:
    """The prepared design being fitted when (X, y) are its very arrays, else None: the
    solver keeps derived data only for a design it can be sure of."""
    design = _ACTIVE.get()
    if design is not None and _same(design.X, X) and _same(design.y, y):
        return design
    return None


def _same(kept: NDArray[Any], other: NDArray[Any]) -> bool:
    """Whether ``other`` is ``kept`` or a view of exactly the same memory and layout (the
    solver reshapes y, which makes a new view). ``kept`` is alive, so its memory is not
    reused by anything else."""
    return other is kept or (
        other.ctypes.data == kept.ctypes.data
        and other.shape == kept.shape
        and other.strides == kept.strides
        and other.dtype == kept.dtype
    )
