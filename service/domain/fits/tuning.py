"""Privately tuned fits (issue 16 item 2, issue 28 item 2): a fit whose ``regularization`` is a
list of candidates, ``{"candidates": [λ₁, …, λ_k]}``, and/or, for ``dp_sgd``, whose step size
``params.eta`` is one, ``{"candidates": [η₁, …, η_l]}``. The candidates are the grid Λ × H
(:func:`service.dp.analysis.selection.grid`; a single λ or η is an axis of one value).

``selection`` (``auto`` by default) chooses how, by
:func:`service.dp.analysis.selection_choice.choose_selection` from public quantities (k, n, d,
ε, δ, the smallest λ, whether the mechanism runs at δ = 0); the quote and the record show the
method and the reason.

With ``auto`` and a mechanism of :data:`RULE_MECHANISMS` (objective-type, pure runs), the
mechanism's automatic λ — the λ a fit with ``regularization: "auto"`` gets for the request's
mechanism, n, d, ε, δ, loss and task (:func:`service.domain.fits.submit.resolve_regularization`)
— is weighed against tuning (docs/design.md §3, "Tuning that declines"): when random
repetition's runs would cost the excess-risk bound a factor κ > :data:`MAX_COST_FACTOR`
(:func:`service.dp.analysis.selection_choice.rule_cost_factor`, public quantities only) no
selection runs and the automatic λ is fitted once on all rows at the request's (ε, δ)
(:class:`~service.dp.analysis.selection.RuleOnlyResult`); otherwise the automatic λ joins the
candidates (when absent and there is room) and the method is chosen for the longer list. The
decision is fixed at submission (the job's ``params.tuning_decision``, also the quote's
``calibration.tuning``) and the worker runs exactly it (a re-derivation that differs fails the
job, nothing released).

* ``cms`` — :func:`service.dp.analysis.selection.tune`: grid point i is fitted on the i-th of
  k + 1 disjoint parts at the request's full (ε, δ), the held-out part's error counts choose one
  with the exponential mechanism at ε. The total is the request's (ε, δ) by parallel
  composition (derivation in :mod:`service.dp.analysis.selection`).
* ``papernot_steinke`` / ``liu_talwar`` — random repetition
  (:mod:`service.dp.analysis.repetition`): a random number K of runs, each fitting a uniformly
  drawn grid point on **all** rows at (ε_t, 0) and scoring it by a noisy training error count at
  ε_s; the best run is released. ε₀ = ε_t + ε_s is solved so that the accounted total is ≤ the
  request's (ε, δ). K is not released (nor shown as progress).

In both cases only the chosen model is released and the request's (ε, δ) is charged with the
job, like a fit.

Validation before anything is spent: each list has 1 to :data:`MAX_CANDIDATES` distinct valid
values, the grid has at most :data:`MAX_CANDIDATES` points, η candidates only for ``dp_sgd``,
and the mechanism calibrated for *every* grid point at the part size ⌊n/(k+1)⌋ (so a candidate
the mechanism cannot run at that size is a 422, not a failed job).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.db.models import Dataset, Model, new_id
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import (
    dataset_task,
    get_owned_dataset,
    read_design,
    require_live,
)
from service.domain.errors import InvalidInputError
from service.domain.fits.run import DatasetFacts, dataset_facts
from service.domain.fits.submit import (
    AUTO,
    FitQuote,
    FitRequest,
    for_task,
    resolve_regularization,
)
from service.domain.fits.submit import _calibrate as calibrate_fit
from service.domain.jobs.charged import (
    DatasetCharge,
    JobDraft,
    Pricing,
    SubmittedJob,
    submit_charged_job,
)
from service.domain.jobs.lifecycle import (
    ClaimedJob,
    JobContext,
    JobScheduler,
    Release,
    charged_amounts,
)
from service.domain.ledger import budgets
from service.domain.ranges import MAX_REGULARIZATION, MIN_REGULARIZATION
from service.domain.records.base import fit_privacy_record, json_safe, software_version
from service.dp import MECHANISMS, NON_PRIVATE_MECHANISMS, Calibration, FitResult
from service.dp.analysis.repetition import RepetitionPlan, repeat_and_select
from service.dp.analysis.selection import MAX_CANDIDATES, RuleOnlyResult, Setting, grid, tune
from service.dp.analysis.selection_choice import (
    AUTOMATIC_LAMBDA,
    GAUSSIAN_RUN_MECHANISMS,
    MAX_COST_FACTOR,
    REPETITION_SELECTIONS,
    RULE_ONLY_MECHANISMS,
    SELECTIONS,
    SelectionChoice,
    choose_selection,
    part_size,
    repetition_plan,
    rule_cost_factor,
)
from service.dp.analysis.work import evaluation_work, fit_work
from service.dp.core.plan import PlanMismatchError
from service.dp.data.prepared import PreparedDesign

__all__ = [
    "MAX_CANDIDATES",
    "RULE_MECHANISMS",
    "TUNED_FIT_KIND",
    "TunedFitRequest",
    "quote_tuned_fit",
    "run_tuned_fit_job",
    "step_size_candidates",
    "submit_tuned_fit",
]

TUNED_FIT_KIND = "tuned_fit"
#: The option a step-size candidate list sets; the mechanisms that take one are the registry's
#: with it in ``capabilities.tunable_options``.
STEP_SIZE_OPTION = "eta"
#: The mechanisms whose automatic λ ``selection: "auto"`` weighs against tuning: those of
#: :data:`~service.dp.analysis.selection_choice.RULE_ONLY_MECHANISMS` whose runs are pure (as
#: :func:`~service.dp.analysis.selection.tune` with ``rule_candidate``); ``noisy_gd``'s
#: Gaussian runs keep the choice between CMS and random repetition.
RULE_MECHANISMS: frozenset[str] = RULE_ONLY_MECHANISMS - GAUSSIAN_RUN_MECHANISMS


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


@dataclass(frozen=True, slots=True)
class _Rule:
    """The automatic λ that ``auto`` weighed against tuning: the value, the rule's record (as a
    fit with ``regularization: "auto"`` shows it), κ for the requested candidates, and the
    candidates as requested."""

    regularization: float
    record: Mapping[str, Any]
    cost_factor: float
    requested: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class _Checked:
    """What validation found: the cost, the first grid point's calibration (the automatic λ's
    when ``auto`` declined to tune), the estimated work, the method chosen, for random
    repetition its plan, the request as it runs (with the automatic λ among its candidates
    when it joined them) and the automatic λ when ``auto`` weighed it."""

    epsilon: float
    delta: float
    calibration: Calibration
    work: float
    choice: SelectionChoice
    plan: RepetitionPlan | None
    request: TunedFitRequest
    rule: _Rule | None = None

    @property
    def declined(self) -> bool:
        """``auto`` declined to tune: one fit of the automatic λ at the whole budget."""
        return self.choice.method == AUTOMATIC_LAMBDA

    def decision(self) -> dict[str, Any]:
        """The decision fixed at submission (public): the job's ``params.tuning_decision``,
        shown in the quote's and the record's ``tuning``."""
        out: dict[str, Any] = _choice_record(self.choice) | {
            "candidates": list(self.request.regularizations)
        }
        if self.rule is not None:
            rule = self.rule
            out |= {
                "tuned": not self.declined,
                "requested_candidates": list(rule.requested),
                "automatic_regularization": rule.regularization,
                "automatic_regularization_is_candidate": (
                    not self.declined and rule.regularization in self.request.regularizations
                ),
                "cost_factor": rule.cost_factor,
                "cost_factor_threshold": MAX_COST_FACTOR,
                "regularization_rule": dict(rule.record),
            }
        return dict(json_safe(out))


def for_dataset(request: TunedFitRequest, dataset: Dataset) -> TunedFitRequest:
    """``request`` with the dataset task's default loss when it named none
    (:func:`service.domain.fits.submit.for_task`)."""
    return replace(request, base=for_task(request.base, dataset))


def _check(dataset: Dataset, request: TunedFitRequest, *, weigh_rule: bool = True) -> _Checked:
    """422 for a bad candidate list, grid or selection; else what :class:`_Checked` holds.
    Every task is tuned: the score is the task's (:mod:`service.dp.analysis.task_scores`).

    With ``auto`` (and ``weigh_rule``: jobs stored before the decision was fixed at submission
    ran without it) the automatic λ is weighed first (module docstring): declined, or the
    automatic λ joins the candidates and the method is chosen again for the longer list (as
    :func:`service.dp.analysis.selection.tune` does)."""
    request = for_dataset(request, dataset)
    _check_candidates(request)
    rule = _automatic_rule(dataset, request) if weigh_rule else None
    checked = _check_grid(dataset, request, rule)
    if checked.rule is None or checked.declined:
        return checked
    lambdas = request.regularizations
    if checked.rule.regularization in lambdas or len(request.settings()) >= MAX_CANDIDATES:
        return checked
    extended = replace(request, candidates=(*lambdas, checked.rule.regularization))
    return replace(_check_grid(dataset, extended, None), rule=checked.rule)


def _automatic_rule(dataset: Dataset, request: TunedFitRequest) -> _Rule | None:
    """The automatic λ ``auto`` weighs for this request (the λ of
    :func:`~service.domain.fits.submit.resolve_regularization`, task-aware) and κ for the
    requested candidates; None for another selection or mechanism, step-size candidates, or
    a request the rule or the plan refuses (then tuning runs as without it)."""
    base = request.base
    if (
        request.selection != "auto"
        or base.mechanism not in RULE_MECHANISMS
        or request.candidates is None
        or request.step_sizes is not None
        or base.epsilon is None
    ):
        return None
    n, d = int(dataset.n_rows), int(dataset.n_features)
    task = dataset_task(dataset)
    try:
        resolved = resolve_regularization(
            replace(base, regularization=AUTO, regularization_rule=None),
            n=n,
            d=d,
            task=task.task,
            n_classes=task.n_classes,
        )
        kappa = rule_cost_factor(
            base.mechanism,
            k=len(request.settings()),
            n=n,
            d=_noise_dimension(dataset),
            epsilon=float(base.epsilon),
            delta=float(base.delta),
            iterations=_requested_iterations(request),
        )
    except (InvalidInputError, ValueError):
        return None
    return _Rule(
        regularization=resolved.lam,
        record=json_safe(dict(resolved.regularization_rule or {})),
        cost_factor=kappa,
        requested=request.regularizations,
    )


def _noise_dimension(dataset: Dataset) -> int:
    """d, or dK for a multi-class model (the noise proxy's and κ's dimension)."""
    task = dataset_task(dataset)
    d = int(dataset.n_features)
    return d * task.n_classes if task.task == "multiclass" else d


def _check_grid(dataset: Dataset, request: TunedFitRequest, rule: _Rule | None) -> _Checked:
    """:func:`_check` for one candidate list, the automatic λ weighed when ``rule`` is given
    and random repetition can run (``rule`` is kept in the result only then)."""
    settings = request.settings()
    n, d = int(dataset.n_rows), int(dataset.n_features)
    epsilon = float(request.base.epsilon or 0.0)
    delta = float(request.base.delta)
    plan: RepetitionPlan | None = None
    repetition: tuple[float, float, Calibration, float] | None = None
    if request.selection != "cms":
        try:
            plan = _repetition_plan(
                "liu_talwar" if request.selection == "liu_talwar" else "papernot_steinke",
                request,
                k=len(settings),
                n=n,
                d=d,
            )
            repetition = _check_repetition(dataset, request, settings, plan)
        except InvalidInputError:
            if request.selection in REPETITION_SELECTIONS:
                raise
            plan, repetition = None, None
    weighed = rule if repetition is not None else None
    choice = choose_selection(
        request.selection,
        k=len(settings),
        n=n,
        # the noise dimension (dK for a multi-class model) in the noise proxy
        d=_noise_dimension(dataset),
        epsilon=epsilon,
        delta=delta,
        min_regularization=min(s.regularization for s in settings),
        repetition_possible=repetition is not None,
        mechanism=request.base.mechanism,
        iterations=_requested_iterations(request),
        rule_regularization=None if weighed is None else weighed.regularization,
    )
    if choice.method == AUTOMATIC_LAMBDA:
        assert weighed is not None
        return _check_rule_only(dataset, request, choice, weighed)
    if choice.method in REPETITION_SELECTIONS:
        assert repetition is not None
        assert plan is not None
        if plan.method != choice.method:  # auto chose the other law: its own ε_t
            plan = _repetition_plan(choice.method, request, k=len(settings), n=n, d=d)
            repetition = _check_repetition(dataset, request, settings, plan)
        return _Checked(*repetition, choice=choice, plan=plan, request=request, rule=weighed)
    cost_epsilon, cost_delta, first, work = _check_cms(dataset, request)
    return _Checked(
        cost_epsilon,
        cost_delta,
        first,
        work,
        choice=choice,
        plan=None,
        request=request,
        rule=weighed,
    )


def _rule_fit(request: TunedFitRequest, rule: _Rule) -> FitRequest:
    """The one fit of a declined tuning: the automatic λ at the request's (ε, δ), all rows."""
    return replace(
        request.base, regularization=rule.regularization, regularization_rule=rule.record
    )


def _check_rule_only(
    dataset: Dataset, request: TunedFitRequest, choice: SelectionChoice, rule: _Rule
) -> _Checked:
    """``auto`` declined to tune: the automatic λ's calibration on all n rows at the request's
    (ε, δ), which is the whole cost (one fit, no selection); the work is that fit's."""
    calibration = calibrate_fit(dataset, _rule_fit(request, rule))
    work = fit_work(
        request.base.mechanism, int(dataset.n_rows), int(dataset.n_features), calibration.details
    )
    return _Checked(
        float(calibration.epsilon),
        float(calibration.delta),
        calibration,
        work,
        choice=choice,
        plan=None,
        request=request,
        rule=rule,
    )


def _requested_iterations(request: TunedFitRequest) -> int | None:
    """noisy_gd's requested ``iterations`` (a bad value is the calibration's 422 later)."""
    value = request.base.params.get("iterations")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None


def _repetition_plan(
    method: str, request: TunedFitRequest, *, k: int, n: int, d: int
) -> RepetitionPlan:
    """:func:`service.dp.analysis.selection_choice.repetition_plan` for the request; a request it
    cannot plan (Gaussian runs at δ = 0, a score share past ε) is a 422."""
    try:
        return repetition_plan(
            method,
            k=k,
            n=n,
            epsilon=float(request.base.epsilon or 0.0),
            delta=float(request.base.delta),
            mechanism=request.base.mechanism,
            d=d,
            iterations=_requested_iterations(request),
        )
    except ValueError as exc:  # PrivacyParameterError included
        raise InvalidInputError(
            f"{method} selection is not possible for this request: {exc}",
            errors=[{"loc": ["body", "selection"], "msg": "not possible for this request"}],
        ) from exc


def _run_params(request: TunedFitRequest, setting: Setting, plan: RepetitionPlan) -> dict[str, Any]:
    """The options of one run: the grid point's, with Gaussian runs' T fixed by the plan."""
    params = request.setting_params(setting)
    if plan.base == "gaussian":
        params["iterations"] = plan.fit_iterations
    return params


def _check_repetition(
    dataset: Dataset, request: TunedFitRequest, settings: Sequence[Setting], plan: RepetitionPlan
) -> tuple[float, float, Calibration, float]:
    """Random repetition: every grid point calibrated on all n rows at (ε_t, 0) (a mechanism
    that needs δ > 0 is a 422 here); the charge is the request's (ε, δ); the work is the
    expected number of runs μ times a fit and a scoring pass on n rows (an expectation: K is
    random and not released)."""
    n, d = int(dataset.n_rows), int(dataset.n_features)
    first: Calibration | None = None
    fit_works = []
    for setting in settings:
        try:
            calibration = calibrate_fit(
                dataset,
                FitRequest(
                    mechanism=request.base.mechanism,
                    epsilon=plan.train_epsilon,
                    delta=plan.fit_delta,
                    loss=request.base.loss,
                    regularization=setting.regularization,
                    params=_run_params(request, setting, plan),
                ),
            )
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"{plan.method} selection fits each candidate at δ = {plan.fit_delta:g} with "
                f"ε_t = {plan.train_epsilon:.6g}: {exc}",
                errors=[{"loc": ["body", "selection"], "msg": "not possible for this request"}],
            ) from exc
        if calibration.delta != plan.fit_delta:
            raise _invalid(
                f"{plan.method} selection needs a mechanism that runs at δ = 0 or one with a "
                "Rényi curve (noisy_gd)",
                ["body", "selection"],
            )
        _check_run_noise(calibration, plan)
        first = first or calibration
        fit_works.append(fit_work(request.base.mechanism, n, d, calibration.details))
    assert first is not None
    work = plan.law.mean * (max(fit_works) + evaluation_work(n, d))
    return float(request.base.epsilon or 0.0), float(request.base.delta), first, work


def _check_run_noise(calibration: Calibration, plan: RepetitionPlan) -> None:
    """Gaussian runs: the run's calibrated T and multiplier are the plan's (the accounting
    used them); anything else is a programming error, never a release."""
    if plan.base != "gaussian":
        return
    details = calibration.details
    if int(details["iterations"]) != plan.fit_iterations or not (
        float(details["noise_multiplier"]) >= plan.fit_multiplier
    ):
        raise RuntimeError("a Gaussian run is noisier-accounted than calibrated")


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


def _check_cms(
    dataset: Dataset, request: TunedFitRequest
) -> tuple[float, float, Calibration, float]:
    """CMS: the cost (max over the grid, parallel composition), the first grid point's
    calibration at the part size and the estimated work (:mod:`service.dp.analysis.work`: every
    grid point's fit on its part, and scoring the held-out part once per candidate)."""
    settings = request.settings()
    m = part_size(int(dataset.n_rows), len(settings))
    if m < 2:
        raise _invalid("too few rows for this many candidates (each part needs ≥ 2 rows)", ["body"])
    # calibrate every grid point on a stand-in with the part's public size
    part = _PartFacts(dataset, m)
    costs = []
    first: Calibration | None = None
    d = int(dataset.n_features)
    work = len(settings) * evaluation_work(m, d)
    for setting in settings:
        calibration = calibrate_fit(
            part.as_dataset(),
            FitRequest(
                mechanism=request.base.mechanism,
                epsilon=request.base.epsilon,
                delta=request.base.delta,
                loss=request.base.loss,
                regularization=setting.regularization,
                params=request.setting_params(setting),
            ),
        )
        first = first or calibration
        costs.append((float(calibration.epsilon), float(calibration.delta)))
        work += fit_work(request.base.mechanism, m, d, calibration.details)
    assert first is not None
    selection_epsilon = float(request.base.epsilon or 0.0)
    epsilon = max(max(c[0] for c in costs), selection_epsilon)
    delta = max(c[1] for c in costs)
    return epsilon, delta, first, work


def _choice_record(choice: SelectionChoice) -> dict[str, str]:
    return {
        "selection": choice.method,
        "requested_selection": choice.requested,
        "selection_reason": choice.reason,
    }


@dataclass(frozen=True, slots=True)
class _PartFacts:
    """The public facts of a part of ``dataset`` with ``n`` rows, for calibration."""

    dataset: Dataset
    n: int

    def as_dataset(self) -> Dataset:
        return Dataset(
            id=self.dataset.id,
            n_rows=self.n,
            n_features=self.dataset.n_features,
            allow_non_private=self.dataset.allow_non_private,
            spec=self.dataset.spec,  # the label: the task and K of every calibration
        )


def quote_tuned_fit(
    uow: UnitOfWork, *, dataset_id: str, request: TunedFitRequest, actor: Principal
) -> FitQuote:
    """The dry run of a tuned fit: its total cost; spends nothing."""
    with uow:
        dataset = require_live(get_owned_dataset(uow, dataset_id=dataset_id, actor=actor))
        remaining_epsilon, remaining_delta = budgets.remaining(dataset)
    checked = _check(dataset, for_dataset(request, dataset))
    calibration = checked.calibration
    details = json_safe(dict(calibration.details))
    if checked.declined:
        return _quote_rule_only(checked, details, remaining_epsilon, remaining_delta)
    request = checked.request
    settings = request.settings()
    common: dict[str, Any] = {
        "candidates": list(request.regularizations),
        **(
            {} if request.step_sizes is None else {"step_size_candidates": list(request.step_sizes)}
        ),
        "grid": [s.to_dict() for s in settings],
    }
    if checked.plan is None:
        details["tuning"] = common | {
            "part_size": part_size(int(dataset.n_rows), len(settings)),
            "parts": len(settings) + 1,
        }
        composition = (
            "parallel over k + 1 disjoint parts: each grid point's fit at (ε, δ) on "
            "its part, the exponential-mechanism choice at ε on the held-out part"
        )
    else:
        details["tuning"] = common | json_safe(checked.plan.record())
        composition = (
            "random repetition: a random number of runs (mean "
            f"{checked.plan.law.mean:.4g}, not released), each a uniformly drawn grid point "
            + (
                "fitted on all rows at (ε_t, 0)"
                if checked.plan.base == "pure"
                else "fitted on all rows with Gaussian noise (T releases at multiplier "
                f"{checked.plan.fit_multiplier:.6g}, accounted by their Rényi curve)"
            )
            + " and scored at ε_s; the best run is released (Papernot and Steinke 2022 Thm 2)"
        )
    details["tuning"] |= checked.decision()
    return FitQuote(
        mechanism=request.base.mechanism,
        epsilon=checked.epsilon,
        delta=checked.delta,
        private=True,
        expected_noise_norm=calibration.expected_noise_norm,
        composition=composition,
        calibration=details,
        remaining_epsilon=remaining_epsilon,
        remaining_delta=remaining_delta,
    )


def _quote_rule_only(
    checked: _Checked,
    details: dict[str, Any],
    remaining_epsilon: float,
    remaining_delta: float,
) -> FitQuote:
    """The quote of a tuning ``auto`` declines: the automatic λ's one fit at (ε, δ)."""
    rule = checked.rule
    assert rule is not None
    details["tuning"] = checked.decision() | {"chosen_regularization": rule.regularization}
    return FitQuote(
        mechanism=checked.request.base.mechanism,
        epsilon=checked.epsilon,
        delta=checked.delta,
        private=True,
        expected_noise_norm=checked.calibration.expected_noise_norm,
        composition="no selection (auto declined to tune, κ = "
        f"{rule.cost_factor:.3g} > {MAX_COST_FACTOR:g}): one fit of the automatic λ = "
        f"{rule.regularization:.4g} on all rows at (ε, δ); {checked.calibration.composition}",
        calibration=details,
        remaining_epsilon=remaining_epsilon,
        remaining_delta=remaining_delta,
        regularization=rule.regularization,
        regularization_rule=rule.record,
    )


def submit_tuned_fit(
    uow: UnitOfWork,
    *,
    dataset_id: str,
    request: TunedFitRequest,
    actor: Principal,
    runner: JobScheduler,
    idempotency_key: str | None = None,
    context: AuditContext | None = None,
) -> SubmittedJob:
    """Validate, charge the total (ε, δ) and enqueue a tuned fit, through the one charged-job
    contract (:func:`service.domain.jobs.charged.submit_charged_job`). The selection decision
    (public) is fixed here and stored in the job's ``params.tuning_decision``; the worker runs
    exactly it."""

    def draft(u: UnitOfWork) -> JobDraft:
        dataset = get_owned_dataset(u, dataset_id=dataset_id, actor=actor)
        concrete = for_dataset(request, dataset)
        params = concrete.to_params()
        checked: _Checked | None = None
        try:
            checked = _check(dataset, concrete)
        except InvalidInputError:
            if dataset.deleted_at is None:
                raise
            # deleted: ``price`` answers first, as for any fit of a deleted dataset
        if checked is not None:
            # a deterministic function of public inputs: a retry repeats it
            params["tuning_decision"] = checked.decision()

        def price() -> Pricing:
            require_live(dataset)
            assert checked is not None
            epsilon, delta, work = checked.epsilon, checked.delta, checked.work
            return Pricing(
                mechanism=request.base.mechanism,
                charges=[DatasetCharge(dataset.id, dataset.owner_site_id, epsilon, delta)],
                audit_action="fit.submitted",
                audit_details={
                    "dataset_id": dataset_id,
                    "mechanism": request.base.mechanism,
                    "epsilon": epsilon,
                    "delta": delta,
                    "candidates": list(checked.request.regularizations),
                    "selection": checked.choice.method,
                    **(
                        {}
                        if request.step_sizes is None
                        else {"step_size_candidates": list(request.step_sizes)}
                    ),
                },
                work=work,
            )

        return JobDraft(kind=TUNED_FIT_KIND, dataset_id=dataset.id, params=params, price=price)

    return submit_charged_job(
        uow,
        actor=actor,
        draft=draft,
        runner=runner,
        idempotency_key=idempotency_key,
        context=context,
    )


def _stored_request(params: Mapping[str, Any]) -> TunedFitRequest:
    """The request back from a job's stored ``params`` (:meth:`TunedFitRequest.to_params`)."""
    regularization = params["regularization"]
    lambdas = (
        tuple(float(c) for c in regularization["candidates"])
        if isinstance(regularization, dict)
        else None
    )
    options = dict(params.get("params") or {})
    step_sizes = step_size_candidates(options)
    if step_sizes is not None:
        del options["eta"]
    base = FitRequest(
        mechanism=str(params["mechanism"]),
        epsilon=float(params["epsilon"]),
        delta=float(params["delta"]),
        loss=str(params["loss"]),
        regularization=lambdas[0] if lambdas else float(regularization),
        params=options,
    )
    # jobs stored before issue 28 have no "selection": they were CMS
    selection = str(params.get("selection", "cms"))
    return TunedFitRequest(
        base=base, candidates=lambdas, step_sizes=step_sizes, selection=selection
    )


def run_tuned_fit_job(
    uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext
) -> Release:
    """The worker: :func:`service.dp.analysis.selection.tune`, then the chosen model and its
    record."""
    params = job.params
    row = job.live_dataset()
    facts = dataset_facts(row)
    stored = params.get("tuning_decision")
    # jobs stored before the decision was fixed at submission tuned without the automatic λ
    checked = _check(row, _stored_request(params), weigh_rule=stored is not None)
    if stored is not None and checked.decision() != stored:  # checked before any row is read
        raise PlanMismatchError("the tuning decision differs from the one fixed at submission")
    design = read_design(uow_factory, row)
    request = checked.request
    settings = request.settings()
    epsilon = float(params["epsilon"])
    delta = float(params["delta"])
    rng = context.randomness.generator(job.id)
    task_kwargs = dataset_task(row).dp_kwargs
    done = [0]

    def fit_one(part: PreparedDesign, setting: Setting) -> FitResult:
        result = context.fit(
            part,
            None,
            str(params["mechanism"]),
            rng=rng,
            epsilon=epsilon,
            delta=delta,
            loss=str(params["loss"]),
            regularization=setting.regularization,
            **request.setting_params(setting),
            **task_kwargs,
        )
        done[0] += 1
        context.progress(done[0] / (len(settings) + 1))
        return result

    if checked.declined:
        return _run_rule_only(job, context, design, checked, facts, rng, task_kwargs)
    if checked.plan is not None:
        return _run_repetition(job, context, design, request, checked, facts, rng)
    tuned = tune(design, settings, epsilon=epsilon, fit_one=fit_one, rng=rng)
    record = fit_privacy_record(
        tuned.result,
        datasets=[facts.ref],
        randomness=context.randomness,
        job_id=job.id,
        charged=charged_amounts(job),
        version=software_version(),
    )
    record["tuning"] = tuned.record(epsilon, delta) | checked.decision()
    model = _model(job, tuned.result, record, facts, str(params["loss"]))
    # Parallel composition: every candidate and the selection read disjoint parts at (ε, δ).
    return Release(
        model=model, spent={str(job.dataset_id): (tuned.result.epsilon, tuned.result.delta)}
    )


def _model(
    job: ClaimedJob, result: FitResult, record: dict[str, Any], facts: DatasetFacts, loss: str
) -> Model:
    return Model(
        id=new_id(),
        owner_site_id=job.owner_site_id,
        source="fit",
        mechanism=result.mechanism,
        loss=loss,
        feature_names=facts.feature_names,
        preprocessing=facts.preprocessing,
        body=json_safe(result.model.to_dict()),
        label=facts.label,
        privacy=record,
        dataset_id=job.dataset_id,
        job_id=job.id,
    )


def _run_repetition(
    job: ClaimedJob,
    context: JobContext,
    design: PreparedDesign,
    request: TunedFitRequest,
    checked: _Checked,
    facts: DatasetFacts,
    rng: np.random.Generator | None,
) -> Release:
    """Random repetition (:func:`service.dp.analysis.repetition.repeat_and_select`). Progress
    stays 0 until the job ends (a fraction of runs done would reveal the number of runs K, which
    is not released); a cancel is still checked before each run."""
    plan = checked.plan
    assert plan is not None
    settings = request.settings()
    base = request.base
    design_task = {"task": design.task, "n_classes": design.n_classes}

    def fit_one(full: PreparedDesign, setting: Setting) -> FitResult:
        # a constant 0: checks for a cancel (throttled by time) without showing the run count
        context.progress(0.0)
        return context.fit(
            full,
            None,
            base.mechanism,
            rng=rng,
            epsilon=plan.train_epsilon,
            delta=plan.fit_delta,
            loss=base.loss,
            regularization=setting.regularization,
            **_run_params(request, setting, plan),
            **design_task,
        )

    chosen = repeat_and_select(design, settings, plan=plan, fit_one=fit_one, rng=rng)
    if chosen.result.delta != plan.fit_delta or chosen.result.epsilon > plan.train_epsilon:
        raise RuntimeError("a run spent more than its (ε_t, δ_t)")
    if plan.base == "gaussian" and not (
        float(chosen.result.details["noise_multiplier"]) >= plan.fit_multiplier
    ):
        raise RuntimeError("a Gaussian run was less noisy than its plan")
    spent_delta = plan.delta if plan.accounting == "rdp" else 0.0
    total = replace(chosen.result, epsilon=plan.epsilon, delta=plan.delta)
    record = fit_privacy_record(
        total,
        datasets=[facts.ref],
        randomness=context.randomness,
        job_id=job.id,
        charged=charged_amounts(job),
        version=software_version(),
    )
    setting = settings[chosen.chosen]
    record["tuning"] = (
        {
            "candidates": list(request.regularizations),
            **(
                {}
                if request.step_sizes is None
                else {"step_size_candidates": list(request.step_sizes)}
            ),
            "grid": [s.to_dict() for s in settings],
            "chosen_index": chosen.chosen,
            "chosen_regularization": setting.regularization,
            **({} if setting.eta is None else {"chosen_eta": setting.eta}),
        }
        | json_safe(plan.record())
        | checked.decision()
    )
    record["tuning"]["fit_details"] = json_safe(dict(chosen.result.details))
    model = _model(job, chosen.result, record, facts, base.loss)
    return Release(model=model, spent={str(job.dataset_id): (plan.accounted_epsilon, spent_delta)})


def _run_rule_only(
    job: ClaimedJob,
    context: JobContext,
    design: PreparedDesign,
    checked: _Checked,
    facts: DatasetFacts,
    rng: np.random.Generator | None,
    task_kwargs: Mapping[str, Any],
) -> Release:
    """``auto`` declined to tune: the automatic λ fitted once on all rows at the request's
    (ε, δ), which is what was charged (no selection runs, nothing else is released)."""
    rule = checked.rule
    assert rule is not None
    base = checked.request.base
    context.progress(0.0)
    result = context.fit(
        design,
        None,
        base.mechanism,
        rng=rng,
        epsilon=float(base.epsilon or 0.0),
        delta=float(base.delta),
        loss=base.loss,
        regularization=rule.regularization,
        **base.params,
        **task_kwargs,
    )
    if result.epsilon > checked.epsilon or result.delta > checked.delta:
        raise RuntimeError("the automatic λ's fit spent more than its charge")
    outcome = RuleOnlyResult(
        candidate=rule.regularization,
        result=result,
        reason=checked.choice.reason,
        candidates=rule.requested,
    )
    record = fit_privacy_record(
        result,
        datasets=[facts.ref],
        randomness=context.randomness,
        job_id=job.id,
        charged=charged_amounts(job),
        version=software_version(),
    )
    record["tuning"] = outcome.record(result.epsilon, result.delta) | checked.decision()
    model = _model(job, result, record, facts, base.loss)
    return Release(model=model, spent={str(job.dataset_id): (result.epsilon, result.delta)})
