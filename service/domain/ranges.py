"""The documented valid range of every privacy and regularisation parameter a request carries.

Checked before anything is charged: by the request schemas (so the ranges appear in the OpenAPI
document and a violation is a 422 naming the field) and, for what only a calibration reveals, by
:func:`check_calibration` (a noise scale that is not a positive finite number is a 422 too).

Why these bounds: ε below 1e-6 or λ below 1e-10 make every mechanism's noise scale underflow
or overflow IEEE doubles (ε = 5e-324 divides by zero) without any statistical use; ε above 1000
is no privacy at all and would overflow the ledger's integer units; λ above 1e6 drives every
weight to zero. δ must stay below 1 (δ = 1 permits anything); the dataset's cap bounds it further.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from service.domain.errors import InvalidInputError

T = TypeVar("T")

__all__ = [
    "MAX_EPSILON",
    "MAX_REGULARIZATION",
    "MIN_EPSILON",
    "MIN_REGULARIZATION",
    "calibrated",
    "check_calibration",
]

MIN_EPSILON = 1e-6
MAX_EPSILON = 1000.0
MIN_REGULARIZATION = 1e-10
MAX_REGULARIZATION = 1e6


def calibrated(what: str, calibrate: Callable[[], T]) -> T:
    """``calibrate()``, with a parameter the calibration refuses (``ValueError``,
    ``TypeError``, an overflow or a huge allocation) turned into a 422 naming ``what``."""
    try:
        return calibrate()
    except (ValueError, TypeError, ArithmeticError, MemoryError) as exc:
        raise InvalidInputError(
            f"invalid {what} parameters: {exc}", errors=[{"loc": ["body"], "msg": str(exc)}]
        ) from exc


def check_calibration(
    *, epsilon: float, delta: float, details: Mapping[str, Any], noise_norm: float | None
) -> None:
    """Refuse (422) a calibration whose spend or noise parameters are not finite numbers, or
    whose spend is negative: the request's parameters are outside what the mechanism can use."""
    bad = [
        name
        for name, value in details.items()
        if isinstance(value, float) and not math.isfinite(value)
    ]
    if not (math.isfinite(epsilon) and epsilon >= 0 and math.isfinite(delta) and 0 <= delta < 1):
        bad.append("epsilon/delta")
    if noise_norm is not None and not math.isfinite(noise_norm):
        bad.append("expected_noise_norm")
    if bad:
        raise InvalidInputError(
            "these parameters make the mechanism's calibration overflow or underflow "
            f"({', '.join(sorted(bad))} not finite): use a larger ε or λ, or smaller options",
            errors=[{"loc": ["body"], "msg": f"calibration not finite: {', '.join(sorted(bad))}"}],
        )
