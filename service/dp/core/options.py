"""Typed mechanism options and capabilities (issue 27 item 1), in plain Python.

Every fit mechanism declares, near the top of its module:

* ``Options``: a frozen dataclass subclassing :class:`MechanismOptions`, one field per option
  the mechanism accepts in ``params``, each made with :func:`option` (its default, its bounds
  and a sentence saying what it does). The HTTP layer builds the request schema of each
  mechanism from this class alone (``service.api.schemas.options``), so a new mechanism gets
  its typed, documented options in the OpenAPI document without touching any other module.
  The mechanism's ``validate_params`` stays the authority: the schema refuses early what is
  plainly wrong (an unknown option, a wrong type, a value out of its fixed bounds); rules
  that depend on the problem (``batch_size ≤ n``) or on other options are checked there.
* ``CAPABILITIES``: a :class:`Capabilities`, what the rest of the service asks about the
  mechanism instead of keeping lists of names: whether it is private, which options can be
  tuned privately, whether the planner has an excess-risk bound for it, how much work a fit
  is, whether the multi-site feature method may use it at the meta level.

Both are public facts about the mechanism, never about data.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "DEFAULT_HUBER_H",
    "Capabilities",
    "ExcessRiskTerms",
    "MechanismOptions",
    "OptionSpec",
    "WorkEstimate",
    "option",
    "option_names",
    "option_specs",
]

#: Default width ``h`` of the ``huber`` loss (hinge or regression) when ``h`` is not given.
DEFAULT_HUBER_H: Final[float] = 0.5


@dataclass(frozen=True, slots=True)
class OptionSpec:
    """What the schema says about one option: its sentence, fixed bounds, and, for an option
    whose default depends on the problem or on other options, that default in words (then
    the option has no fixed default: leaving it out is not the same as any one value)."""

    doc: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    computed_default: str | None = None

    def bounds(self) -> dict[str, float]:
        """The bounds that are set, by their name (``ge``, ``gt``, ``le``, ``lt``)."""
        pairs = (("ge", self.ge), ("gt", self.gt), ("le", self.le), ("lt", self.lt))
        return {name: value for name, value in pairs if value is not None}


_SPEC_KEY: Final[str] = "privfit_option"


def option(
    default: Any,
    doc: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    computed_default: str | None = None,
) -> Any:
    """A field of an ``Options`` dataclass: ``default``, one sentence ``doc`` and fixed bounds.

    ``computed_default`` describes a default that depends on the problem or on other options
    (e.g. ``"min(50, n)"``); the field's ``default`` is then None, meaning "not given"."""
    if computed_default is not None and default is not None:
        raise ValueError("an option with a computed default has default None")
    for bound in (ge, gt, le, lt):
        if bound is not None and not math.isfinite(bound):
            raise ValueError("option bounds must be finite")
    spec = OptionSpec(doc=doc, ge=ge, gt=gt, le=le, lt=lt, computed_default=computed_default)
    return dataclasses.field(default=default, metadata={_SPEC_KEY: spec})


@dataclass(frozen=True, slots=True)
class MechanismOptions:
    """Options every single-dataset mechanism takes (the loss's own)."""

    h: float = option(
        DEFAULT_HUBER_H,
        "Width h of the `huber` loss (used only when `loss` is `huber`): binary, the "
        "Huber-smoothed hinge of width h (l″ ≤ 1/(2h)); regression, the Huber loss of the "
        "residual, quadratic for |r| ≤ h and linear beyond (ℓ′ bounded by h).",
        gt=0.0,
    )


def option_specs(options: type[MechanismOptions]) -> dict[str, OptionSpec]:
    """Each option of ``options`` (an ``Options`` dataclass) with its :class:`OptionSpec`;
    TypeError for a field made without :func:`option` (every option is documented)."""
    specs: dict[str, OptionSpec] = {}
    for f in dataclasses.fields(options):
        spec = f.metadata.get(_SPEC_KEY)
        if not isinstance(spec, OptionSpec):
            raise TypeError(f"{options.__qualname__}.{f.name} is not declared with option()")
        specs[f.name] = spec
    return specs


def option_names(options: type[MechanismOptions], *, own: bool = False) -> tuple[str, ...]:
    """The option names of ``options``, in declaration order; ``own=True`` leaves out the ones
    every mechanism takes (:class:`MechanismOptions`: ``h``, taken out before a mechanism
    sees its params)."""
    common = {f.name for f in dataclasses.fields(MechanismOptions)} if own else set()
    return tuple(f.name for f in dataclasses.fields(options) if f.name not in common)


#: ``(n, d, details) -> work`` in row-feature passes (:mod:`service.dp.analysis.work`).
WorkEstimate = Callable[[int, int, Mapping[str, Any]], float]
#: ``(details, expected_noise_norm) -> (shift, smoothness)`` or None: the expected distance
#: between the released weights and the minimiser they perturb, and the smoothness constant of
#: the objective around it (:func:`service.dp.analysis.planning.excess_risk_bound`).
ExcessRiskTerms = Callable[[Mapping[str, Any], float | None], tuple[float, float] | None]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What the service may ask of a mechanism without knowing its name.

    ``private``: False for a mechanism that promises no privacy (it takes no (ε, δ), its
    records say "no DP"). ``tunable_options``: options that may be given as
    ``{"candidates": [...]}`` for private tuning (numbers > 0). ``excess_risk``: the terms of
    the planner's excess-risk bound, None when the planner has none. ``work``: the job's work
    estimate, None for one certified convex solve. ``meta_level``: usable by the multi-site
    feature method at the meta level (one release of a linear model, (ε, δ) from its own
    calibration). ``tasks``: what it fits (:mod:`service.dp.core.tasks`)."""

    private: bool = True
    tunable_options: tuple[str, ...] = ()
    excess_risk: ExcessRiskTerms | None = None
    work: WorkEstimate | None = None
    meta_level: bool = False
    tasks: frozenset[str] = frozenset({"binary"})

    @property
    def has_excess_risk_bound(self) -> bool:
        return self.excess_risk is not None
