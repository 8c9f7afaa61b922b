"""Exact ledger units for ε and δ (docs/design.md §2 "Ledger semantics", STYLE §4.6).

The budget ledger never adds floats: every ε is stored as an integer number of
:data:`EPSILON_UNIT` (1e-9) and every δ as an integer number of :data:`DELTA_UNIT` (1e-15).
Conversion goes through the float's shortest decimal representation (``repr``), so 0.1 is
exactly 100 000 000 ε-units and ten charges of 0.1 add up to exactly 1.0.

Guarantees:

* ``to_units(x, unit, rounding="up")`` is the smallest integer k with k·unit ≥ x (in exact
  decimal arithmetic on ``repr(x)``): charges are never under-counted.
* ``to_units(x, unit, rounding="down")`` is the largest integer k with k·unit ≤ x: caps are
  never over-granted.
* Round trips are conservative: ``from_units(to_units(x, u, "up"), u) >= x`` and
  ``from_units(to_units(x, u, "down"), u) <= x`` for every finite x ≥ 0.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Final, Literal

__all__ = [
    "DELTA_UNIT",
    "EPSILON_UNIT",
    "MAX_UNITS",
    "Rounding",
    "from_units",
    "to_units",
]

#: One ledger unit of ε.
EPSILON_UNIT: Final[float] = 1e-9
#: One ledger unit of δ.
DELTA_UNIT: Final[float] = 1e-15
#: Largest amount a ledger column (SQL BIGINT, signed 64 bit) can hold.
MAX_UNITS: Final[int] = 2**63 - 1

Rounding = Literal["up", "down"]

_MODES: Final[dict[str, str]] = {"up": ROUND_CEILING, "down": ROUND_FLOOR}


def _unit_decimal(unit: float) -> Decimal:
    if not math.isfinite(unit) or unit <= 0.0:
        raise ValueError(f"unit must be a finite number > 0, got {unit!r}")
    return Decimal(repr(float(unit)))


def to_units(x: float, unit: float, rounding: Rounding = "up") -> int:
    """``x`` as a whole number of ``unit``s, rounded ``"up"`` (charges) or ``"down"`` (caps).

    Raises ``ValueError`` when ``x`` is not a finite number ≥ 0, when ``rounding`` is not
    ``"up"``/``"down"``, or when the result does not fit a signed 64-bit ledger column.
    """
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ValueError(f"amount must be a number, got {type(x).__name__}")
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"amount must be a finite number >= 0, got {x!r}")
    if rounding not in _MODES:
        raise ValueError(f"rounding must be 'up' or 'down', got {rounding!r}")
    # Exact decimal arithmetic: 17 significant digits of repr(x) plus the unit's exponent
    # never need more than this precision, so the quotient below is exact before rounding.
    with localcontext() as ctx:
        ctx.prec = 80
        quotient = Decimal(repr(float(x))) / _unit_decimal(unit)
        units = int(quotient.to_integral_value(rounding=_MODES[rounding]))
    if units > MAX_UNITS:
        raise ValueError(f"amount {x!r} exceeds the ledger's range")
    return units


def from_units(units: int, unit: float) -> float:
    """The float nearest to ``units``·``unit`` (exact decimal product, rounded once)."""
    if isinstance(units, bool) or not isinstance(units, int):
        raise ValueError(f"units must be an int, got {type(units).__name__}")
    if units < 0:
        raise ValueError(f"units must be >= 0, got {units}")
    with localcontext() as ctx:
        ctx.prec = 80
        return float(Decimal(units) * _unit_decimal(unit))
