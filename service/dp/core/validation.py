"""Input checks shared by PrivFit's fit entry points and mechanisms.

The ERM privacy proofs rely on preconditions that the server enforces rather than assumes
(docs/design.md §2): labels in {−1, +1}, every row of X in the unit L2 ball, finite inputs, λ > 0.
Error messages name the rule and count offending entries; they never quote data values.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.dp.core.tasks import Task, check_labels

__all__ = [
    "ROW_NORM_TOLERANCE",
    "PrivacyParameterError",
    "check_dimensions",
    "check_int_in",
    "check_known_params",
    "check_positive_number",
    "check_regularization",
    "nonnegative_float_param",
    "positive_float_param",
    "validate_design",
]

#: Rows may exceed norm 1 by this much (rounding in the caller's preprocessing); such rows are
#: scaled back into the unit ball before any mechanism sees them (``validate_design``).
ROW_NORM_TOLERANCE = 1e-9

_UNIT_ROUNDOFF = 2.0**-53


class PrivacyParameterError(ValueError):
    """A privacy or mechanism parameter is invalid (the domain layer maps it to a 422)."""


def validate_design(
    X: ArrayLike, y: ArrayLike, task: Task = "binary", n_classes: int = 2
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Check and convert (X, y): X a finite real n×d array (n, d ≥ 1) whose rows all have
    L2 norm ≤ 1 (+ ``ROW_NORM_TOLERANCE``), y of length n encoded for ``task``
    (:func:`service.dp.core.tasks.check_labels`: {−1, +1} for a binary task).

    Exactness. Every sensitivity bound assumes ‖x_i‖ ≤ 1 exactly. The computed squared norm
    s = fl(Σ_j x_ij²) satisfies |s − ‖x‖²| ≤ γ‖x‖² with γ = (d+2)u/(1 − (d+2)u), u = 2⁻⁵³
    (Higham, Thm 3.1 for a sum of d non-negative rounded products, any summation order), so a
    row with s ≤ 1 − 2γ has ‖x‖ < 1. Rows with s above that (up to the tolerance) are
    multiplied by f = 1/(√s·(1 + 4γ)): the result has norm ≤ (1 + u)³√(1 + γ)/(1 + 4γ) < 1
    (one rounding each in √s, f and the product). The map is row by row and public, so
    neighbouring datasets stay neighbours.

    Returns float64 arrays (X C-contiguous); no copy is made when the input already is one and
    no row needs rescaling.
    """
    X_arr = np.asarray(X)
    if X_arr.dtype == np.bool_ or not np.issubdtype(X_arr.dtype, np.number):
        raise ValueError(f"X must be a real numeric array, got dtype {X_arr.dtype}")
    if np.issubdtype(X_arr.dtype, np.complexfloating):
        raise ValueError("X must be real, got a complex array")
    if X_arr.ndim != 2:
        raise ValueError(f"X must be 2-D (rows × features), got {X_arr.ndim} dimension(s)")
    n, d = X_arr.shape
    if n < 1 or d < 1:
        raise ValueError(f"X must have at least one row and one column, got shape {n}×{d}")
    Xf = np.ascontiguousarray(X_arr, dtype=np.float64)
    # One pass over X: a NaN or infinite entry makes its row's squared norm non-finite, so X
    # is scanned entry by entry only when some row norm is (a huge finite row overflows to
    # inf too: then no entry is bad and the row is counted as too long below).
    sq_norms = np.einsum("ij,ij->i", Xf, Xf)
    if not np.isfinite(sq_norms).all():
        bad = int(np.count_nonzero(~np.isfinite(Xf)))
        if bad:
            raise ValueError(f"X must be finite; {bad} entries are NaN or infinite")
    over = int(np.count_nonzero(sq_norms > (1.0 + ROW_NORM_TOLERANCE) ** 2))
    if over:
        rows = "row exceeds" if over == 1 else "rows exceed"
        raise ValueError(f"every row of X must have L2 norm ≤ 1; {over} {rows} it")
    gamma = (d + 2) * _UNIT_ROUNDOFF / (1.0 - (d + 2) * _UNIT_ROUNDOFF)
    near = np.flatnonzero(sq_norms > 1.0 - 2.0 * gamma)
    if near.size:
        if Xf is X_arr or np.shares_memory(Xf, X_arr):
            Xf = Xf.copy()
        factors = 1.0 / (np.sqrt(sq_norms[near]) * (1.0 + 4.0 * gamma))
        Xf[near] *= factors[:, None]

    yf = check_labels(y, n, task, n_classes)
    return Xf, yf


def check_regularization(value: object) -> float:
    """λ must be a finite number > 0 (the proofs need a strongly convex objective)."""
    return check_positive_number(value, "regularization")


def check_dimensions(n: object, d: object) -> tuple[int, int]:
    """n (rows) and d (features) must be positive integers."""
    for name, value in (("n", n), ("d", d)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise PrivacyParameterError(f"{name} must be a positive integer, got {value!r}")
    return int(n), int(d)  # type: ignore[call-overload]


def check_int_in(value: object, name: str, low: int, high: int) -> int:
    """``value`` as an int with low ≤ value ≤ high (Python or NumPy integers, not bools)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise PrivacyParameterError(f"{name} must be an integer")
    if not low <= int(value) <= high:
        raise PrivacyParameterError(f"{name} must lie between {low} and {high}, got {value}")
    return int(value)


def check_positive_number(value: object, name: str) -> float:
    """``value`` (an int or float, not a bool) as a finite float > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PrivacyParameterError(f"{name} must be a number")
    out = float(value)
    if not math.isfinite(out) or out <= 0.0:
        raise PrivacyParameterError(f"{name} must be a finite number > 0, got {value!r}")
    return out


def check_known_params(params: Mapping[str, Any], allowed: Collection[str], owner: str) -> None:
    """Reject parameters ``owner`` does not understand, listing the ones it does."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        choices = ", ".join(sorted(allowed)) if allowed else "none"
        raise PrivacyParameterError(
            f"unknown parameter(s) for {owner}: {', '.join(unknown)}; allowed: {choices}"
        )


def positive_float_param(params: Mapping[str, Any], name: str, default: float) -> float:
    """``params[name]`` (or ``default``) as a finite float > 0."""
    return _float_param(params, name, default, strict=True)


def nonnegative_float_param(params: Mapping[str, Any], name: str, default: float) -> float:
    """``params[name]`` (or ``default``) as a finite float ≥ 0."""
    return _float_param(params, name, default, strict=False)


def _float_param(params: Mapping[str, Any], name: str, default: float, *, strict: bool) -> float:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PrivacyParameterError(f"{name} must be a number")
    value = float(value)
    if not math.isfinite(value) or value < 0.0 or (strict and value == 0.0):
        bound = "> 0" if strict else "≥ 0"
        raise PrivacyParameterError(f"{name} must be a finite number {bound}, got {value!r}")
    return value
