"""Typed, frozen plans: what ``calibrate`` decided, carried unchanged to ``run`` and the record.

A plan is a frozen dataclass that holds every number a mechanism or protocol needs to draw its
noise and release (the noise law and its parameters, the ridge actually solved, the release
plan, the ε split). ``calibrate`` builds it from public quantities only; the job layer stores
its JSON form on the job at submission (:func:`plan_to_json`), and the worker rebuilds the very
same object (:func:`plan_from_json`) and runs it. Re-deriving the plan in the worker is only a
check that must agree (:func:`require_same_plan`): a plan that changed between the quote and the
run is a defect, never a silent re-calibration.

Serialisation is exact: floats are written with Python's shortest round-trip repr (JSON numbers;
±∞ and NaN as the strings ``"inf"``, ``"-inf"``, ``"nan"``), tuples as lists, nested plans as
objects with their own ``kind``. ``plan_from_json(plan_to_json(p)) == p`` for every registered
plan (tests/unit/dp/test_plan.py).

A new plan kind is a frozen dataclass subclassing :class:`Plan` and decorated with
:func:`plan_kind`; its fields may be ``bool``, ``int``, ``float``, ``str``, ``None``, tuples of
those, nested plans, tuples of nested plans, or a union of these whose members the JSON type
tells apart (an int or a float, a string or a float, a nested plan or a tuple).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

__all__ = [
    "PLAN_KINDS",
    "Plan",
    "PlanMismatchError",
    "plan_from_json",
    "plan_kind",
    "plan_to_json",
    "require_same_plan",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """Base of every typed plan; ``kind`` names the class in its JSON form."""

    kind: ClassVar[str] = "plan"


#: Every registered plan class, by its ``kind``.
PLAN_KINDS: dict[str, type[Plan]] = {}

P = TypeVar("P", bound=type[Plan])


def plan_kind(kind: str) -> Callable[[P], P]:
    """Register a frozen plan dataclass under ``kind`` (unique)."""

    def register(cls: P) -> P:
        if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            raise TypeError(f"{cls.__name__} must be a frozen dataclass")
        if kind in PLAN_KINDS and PLAN_KINDS[kind] is not cls:
            raise ValueError(f"plan kind {kind!r} is registered twice")
        cls.kind = kind
        PLAN_KINDS[kind] = cls
        return cls

    return register


class PlanMismatchError(RuntimeError):
    """The plan re-derived in the worker differs from the plan stored at submission."""


def _encode(value: Any) -> Any:
    if isinstance(value, Plan):
        return plan_to_json(value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    raise TypeError(f"a plan field cannot hold {type(value).__name__}")


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The plan as a JSON-ready dict ``{"kind": ..., field: value, ...}`` (exact floats)."""
    out: dict[str, Any] = {"kind": type(plan).kind}
    for field in dataclasses.fields(plan):
        out[field.name] = _encode(getattr(plan, field.name))
    return out


def _decode(value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        if value is None:
            return None
        non_none = [a for a in args if a is not type(None)]
        return _decode(value, non_none[0] if len(non_none) == 1 else _member(value, non_none))
    if hint is float:
        return float(value)  # also "inf", "-inf", "nan"
    if hint is int:
        return int(value)
    if isinstance(hint, type) and issubclass(hint, Plan):
        return plan_from_json(value)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(v, args[0]) for v in value)
        return tuple(_decode(v, a) for v, a in zip(value, args, strict=True))
    return value


def _member(value: Any, members: list[Any]) -> Any:
    """The member of a multi-type union that the JSON ``value`` was written from (the JSON
    types of :func:`_encode` tell them apart; an int written for an ``int | float`` field is
    read as an int, a float or ``"inf"`` as a float)."""

    def first(test: Callable[[Any], bool]) -> Any:
        return next((m for m in members if test(m)), None)

    if isinstance(value, Mapping):
        found = first(lambda m: isinstance(m, type) and issubclass(m, Plan))
    elif isinstance(value, list):
        found = first(lambda m: typing.get_origin(m) is tuple)
    elif isinstance(value, bool):
        found = first(lambda m: m is bool)
    elif isinstance(value, str):
        special = value in ("inf", "-inf", "nan") and float in members
        found = float if special else first(lambda m: m is str)
    elif isinstance(value, int):
        found = first(lambda m: m is int) or first(lambda m: m is float)
    elif isinstance(value, float):
        found = first(lambda m: m is float)
    else:
        found = None
    if found is None:
        raise TypeError(
            f"a plan value of JSON type {type(value).__name__} fits no member of {members}"
        )
    return found


def plan_from_json(data: Mapping[str, Any]) -> Plan:
    """The plan that :func:`plan_to_json` wrote (KeyError for an unknown kind)."""
    cls = PLAN_KINDS[str(data["kind"])]
    hints = typing.get_type_hints(cls)
    kwargs = {
        field.name: _decode(data[field.name], hints[field.name])
        for field in dataclasses.fields(cls)
        if field.name in data
    }
    return cls(**kwargs)


def require_same_plan(stored: Plan, derived: Plan) -> Plan:
    """``stored`` when the worker's re-derivation agrees with it exactly; otherwise
    :class:`PlanMismatchError` naming the fields that differ (public numbers only)."""
    if stored == derived:
        return stored
    differ = [
        field.name
        for field in dataclasses.fields(stored)
        if type(stored) is type(derived)
        and getattr(stored, field.name) != getattr(derived, field.name)
    ]
    raise PlanMismatchError(
        f"the plan stored at submission ({type(stored).kind}) differs from the one re-derived "
        f"at run time ({type(derived).kind}) in: {', '.join(differ) or 'its kind'}"
    )
