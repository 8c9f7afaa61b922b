"""What a tuned fit will do, decided at submission from public quantities alone (the package
docstring): the grid checked, every grid point calibrated at the size it runs on, the method
chosen (CMS, random repetition, or the automatic λ alone when ``auto`` declines to tune), the
(ε, δ) charged and the work estimated. The quote, the submission and the worker all decide
through :func:`_check`; the worker requires its decision to equal the one stored with the job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from service.db.models import Dataset
from service.domain.datasets.catalog import dataset_task
from service.domain.errors import InvalidInputError
from service.domain.fits.submit import AUTO, FitRequest, resolve_regularization
from service.domain.fits.submit import _calibrate as calibrate_fit
from service.domain.fits.tuning.request import (
    TunedFitRequest,
    _check_candidates,
    _invalid,
    for_dataset,
)
from service.domain.records.base import json_safe
from service.dp import Calibration
from service.dp.analysis.projection_rule import auto_projection
from service.dp.analysis.repetition import RepetitionPlan
from service.dp.analysis.selection import MAX_CANDIDATES, Setting
from service.dp.analysis.selection_choice import (
    AUTOMATIC_LAMBDA,
    GAUSSIAN_RUN_MECHANISMS,
    MAX_COST_FACTOR,
    REPETITION_SELECTIONS,
    RULE_ONLY_MECHANISMS,
    SelectionChoice,
    choose_selection,
    part_size,
    repetition_plan,
    rule_cost_factor,
)
from service.dp.analysis.work import evaluation_work, fit_work
from service.dp.mechanisms.objective_perturbation import rule_dimension

__all__ = ["RULE_MECHANISMS"]


#: The mechanisms whose automatic λ ``selection: "auto"`` weighs against tuning: those of
#: :data:`~service.dp.analysis.selection_choice.RULE_ONLY_MECHANISMS` whose runs are pure (as
#: :func:`~service.dp.analysis.selection.tune` with ``rule_candidate``); ``noisy_gd``'s
#: Gaussian runs keep the choice between CMS and random repetition.
RULE_MECHANISMS: frozenset[str] = RULE_ONLY_MECHANISMS - GAUSSIAN_RUN_MECHANISMS


@dataclass(frozen=True, slots=True)
class _Rule:
    """The automatic λ that ``auto`` weighed against tuning: the value, the rule's record (as a
    fit with ``regularization: "auto"`` shows it), κ for the requested candidates, and the
    candidates as requested."""

    regularization: float
    record: Mapping[str, Any]
    cost_factor: float
    requested: tuple[float, ...]
    #: When the one fit of a declined tuning is projected by auto's public rule
    #: (:mod:`service.dp.analysis.projection_rule`): the rule's record, and the automatic λ at
    #: d = k with its record. The candidates, κ and the decision keep the unprojected λ.
    projection: Mapping[str, Any] | None = None
    projected_regularization: float | None = None
    projected_record: Mapping[str, Any] | None = None

    @property
    def fitted_regularization(self) -> float:
        """The λ the declined tuning's one fit runs at."""
        if self.projected_regularization is not None:
            return self.projected_regularization
        return self.regularization


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
            if self.declined and rule.projection is not None:
                out |= {
                    "projection_rule": dict(rule.projection),
                    "fitted_regularization": rule.fitted_regularization,
                }
        return dict(json_safe(out))


def _check(dataset: Dataset, request: TunedFitRequest, *, weigh_rule: bool = True) -> _Checked:
    """422 for a bad candidate list, grid or selection; else what :class:`_Checked` holds.
    Every task is tuned: the score is the task's (:mod:`service.dp.analysis.task_scores`).

    With ``auto`` (and ``weigh_rule``: jobs stored before the decision was fixed at submission
    ran without it) the automatic λ is weighed first (package docstring): declined, or the
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
            d=_noise_dimension(dataset, base),
            epsilon=float(base.epsilon),
            delta=float(base.delta),
            iterations=_requested_iterations(request),
        )
    except (InvalidInputError, ValueError):
        return None
    rule = _Rule(
        regularization=resolved.lam,
        record=json_safe(dict(resolved.regularization_rule or {})),
        cost_factor=kappa,
        requested=request.regularizations,
    )
    return _with_projection(rule, base, n=n, d=d, task=task.task)


def _with_projection(rule: _Rule, base: FitRequest, *, n: int, d: int, task: str) -> _Rule:
    """``rule`` with the projection auto's public rule gives the declined tuning's one fit
    (:mod:`service.dp.analysis.projection_rule`: binary objective perturbation, no projection
    requested, 3k < d) and the automatic λ at d = k; unchanged otherwise. Public inputs only."""
    if "projection_dim" in base.params or base.epsilon is None:
        return rule
    try:
        choice = auto_projection(base.mechanism, n=n, d=d, epsilon=float(base.epsilon), task=task)
        if choice is None:
            return rule
        projected = resolve_regularization(
            replace(
                base,
                regularization=AUTO,
                regularization_rule=None,
                params={**base.params, "projection_dim": choice.dimension},
            ),
            n=n,
            d=d,
            task=task,
        )
    except (InvalidInputError, ValueError):
        return rule
    return replace(
        rule,
        projection=json_safe(choice.record()),
        projected_regularization=projected.lam,
        projected_record=json_safe(dict(projected.regularization_rule or {})),
    )


def _noise_dimension(dataset: Dataset, base: FitRequest) -> int:
    """d, dK for a multi-class model, or a projected fit's k (the noise proxy's and κ's
    dimension)."""
    task = dataset_task(dataset)
    d = int(dataset.n_features)
    if task.task == "multiclass":
        return d * task.n_classes
    return rule_dimension(base.mechanism, d, base.params)


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
        d=_noise_dimension(dataset, request.base),
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
    """The one fit of a declined tuning: the automatic λ at the request's (ε, δ), all rows
    (projected to k dimensions at the automatic λ for d = k when auto's rule says so)."""
    if rule.projection is not None:
        assert rule.projected_record is not None
        return replace(
            request.base,
            regularization=rule.fitted_regularization,
            regularization_rule=rule.projected_record,
            params={**request.base.params, "projection_dim": rule.projection["projection_dim"]},
        )
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
