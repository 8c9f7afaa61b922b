"""A tuned fit's request: the candidate λs and (DP-SGD) step sizes, read from the request's
``{"candidates": [...]}`` objects, and the checks of those lists that come before anything is
spent (1 to :data:`MAX_CANDIDATES` distinct valid values each, η candidates only for the
mechanisms that take one, a private mechanism with an ε, a known selection)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from service.db.models import Dataset
from service.domain.errors import InvalidInputError
from service.domain.fits.submit import FitRequest, for_task
from service.domain.ranges import MAX_REGULARIZATION, MIN_REGULARIZATION
from service.dp import MECHANISMS, NON_PRIVATE_MECHANISMS
from service.dp.analysis.selection import MAX_CANDIDATES, Setting, grid
from service.dp.analysis.selection_choice import SELECTIONS

__all__ = [
    "MAX_CANDIDATES",
    "STEP_SIZE_OPTION",
    "TunedFitRequest",
    "for_dataset",
    "step_size_candidates",
    "step_size_mechanisms",
]


#: The option a step-size candidate list sets; the mechanisms that take one are the registry's
#: with it in ``capabilities.tunable_options``.
STEP_SIZE_OPTION = "eta"


def step_size_mechanisms() -> tuple[str, ...]:
    """The mechanisms whose step size ``params.eta`` may be tuned (from the registry)."""
    return tuple(
        sorted(
            name
            for name, mech in MECHANISMS.items()
            if STEP_SIZE_OPTION in mech.capabilities.tunable_options
        )
    )


_LAMBDA_LOC = ["body", "regularization", "candidates"]
_ETA_LOC = ["body", "params", "eta", "candidates"]


def _invalid(msg: str, loc: Sequence[str] = tuple(_LAMBDA_LOC)) -> InvalidInputError:
    return InvalidInputError(msg, errors=[{"loc": list(loc), "msg": msg}])


def step_size_candidates(params: Mapping[str, Any]) -> tuple[float, ...] | None:
    """The η candidates of ``params.eta = {"candidates": [...]}``, or None when ``eta`` is a
    single value or absent. A malformed object is a 422 (the values are checked in
    :func:`_check`)."""
    raw = params.get("eta")
    if not isinstance(raw, dict):
        return None
    values = raw.get("candidates")
    if set(raw) != {"candidates"} or not isinstance(values, list):
        raise _invalid('give the step sizes as {"candidates": [η, ...]}', _ETA_LOC[:-1])
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise _invalid("each step-size candidate must be a number", _ETA_LOC)
    try:
        return tuple(float(v) for v in values)
    except OverflowError as exc:  # an integer past the largest double
        raise _invalid("each candidate must be a finite number > 0", _ETA_LOC) from exc


@dataclass(frozen=True, slots=True)
class TunedFitRequest:
    """A fit with candidate regularisations and/or (DP-SGD) step sizes. ``candidates`` are the
    λs (None: ``base.regularization`` alone), ``step_sizes`` the ηs (None: ``base.params``'s
    own ``eta``); at least one of them is given."""

    base: FitRequest
    candidates: tuple[float, ...] | None
    step_sizes: tuple[float, ...] | None = None
    #: ``auto``, ``cms``, ``papernot_steinke`` or ``liu_talwar``
    selection: str = "auto"

    def to_params(self) -> dict[str, Any]:
        params = self.base.to_params()
        params["selection"] = self.selection
        if self.candidates is not None:
            params["regularization"] = {"candidates": [float(c) for c in self.candidates]}
        if self.step_sizes is not None:
            params["params"]["eta"] = {"candidates": [float(e) for e in self.step_sizes]}
        return params

    @property
    def regularizations(self) -> tuple[float, ...]:
        if self.candidates:
            return self.candidates
        if self.base.regularization is None:
            raise ValueError("a tuned fit has λ or λ candidates")
        return (float(self.base.regularization),)

    def settings(self) -> list[Setting]:
        """The grid Λ × H (422 past :data:`MAX_CANDIDATES` points)."""
        try:
            return grid(self.regularizations, self.step_sizes)
        except ValueError as exc:
            raise _invalid(f"{exc} (λ candidates × step-size candidates)", ["body"]) from exc

    def setting_params(self, setting: Setting) -> dict[str, Any]:
        """The mechanism's options for one grid point: the request's, with η set."""
        params = dict(self.base.params)
        if setting.eta is not None:
            params["eta"] = setting.eta
        return params


def _check_values(
    values: Sequence[float], loc: Sequence[str], valid: Callable[[float], bool], rule: str
) -> None:
    if not 1 <= len(values) <= MAX_CANDIDATES:
        raise _invalid(f"give between 1 and {MAX_CANDIDATES} candidates", loc)
    if len(set(values)) != len(values):
        raise _invalid("candidates must be distinct", loc)
    if not all(math.isfinite(value) and valid(value) for value in values):
        raise _invalid(f"each candidate must be {rule}", loc)


def for_dataset(request: TunedFitRequest, dataset: Dataset) -> TunedFitRequest:
    """``request`` with the dataset task's default loss when it named none
    (:func:`service.domain.fits.submit.for_task`)."""
    return replace(request, base=for_task(request.base, dataset))


def _check_candidates(request: TunedFitRequest) -> None:
    if request.candidates is not None:
        _check_values(
            request.candidates,
            _LAMBDA_LOC,
            lambda lam: MIN_REGULARIZATION <= lam <= MAX_REGULARIZATION,
            f"between {MIN_REGULARIZATION:g} and {MAX_REGULARIZATION:g}",
        )
    if request.step_sizes is not None:
        if request.base.mechanism not in step_size_mechanisms():
            raise _invalid(
                f"step-size candidates are for {', '.join(step_size_mechanisms())} only",
                _ETA_LOC[:-1],
            )
        _check_values(request.step_sizes, _ETA_LOC, lambda eta: eta > 0, "a finite number > 0")
    if request.candidates is None and request.step_sizes is None:
        raise _invalid("give regularization or step-size candidates", ["body"])
    if request.base.mechanism in NON_PRIVATE_MECHANISMS or request.base.epsilon is None:
        raise InvalidInputError(
            "private tuning needs a private mechanism and an epsilon",
            errors=[{"loc": ["body", "mechanism"], "msg": "not a private mechanism"}],
        )
    if request.selection not in SELECTIONS:
        raise _invalid(f"selection must be one of {', '.join(SELECTIONS)}", ["body", "selection"])
