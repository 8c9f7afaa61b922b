"""The privacy–utility planner (issue 16 item 3): ``POST /v1/datasets/{id}/plans``.

Spends nothing and reads no private data: the target dataset contributes only its public n,
d and spec. When the request names a reference dataset, that dataset must be one the caller
owns, uploaded with ``allow_non_private`` (its rows are not protected, so reading them is not
a release) and encoded like the target (same features and preprocessing); anything else is a
422. The numerics are in :mod:`service.dp.analysis.planning`.

A plan of ``mechanism: auto`` agrees with the dry run of the same fit (docs/design.md §3,
"auto and the majority-class baseline" and "the planner" on multi-class and numeric labels).
Without a public baseline (no public reference, and on a binary label no declared prior) the
fit spends a public slice ρ·ε on a private trivial-model baseline and chooses and fits at
ε − ρε; each point then shows the choice, λ, noise and band at ε − ρε, the slice
(``private_baseline``, the quote's plan) and the quote's band (``expected_accuracy``), with
``spent_epsilon`` the whole ε. Both are functions of public n, d, ε, δ and whether a reference
exists: a plan releases nothing and charges nothing. For binary labels the point reuses the
fit's own :func:`service.domain.fits.auto.assess` and admission rule, so the two cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from service.db.models import Dataset
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.datasets.catalog import dataset_task, get_owned_dataset, read_design
from service.domain.datasets.labels import LabelTask
from service.domain.errors import InvalidInputError, NotFoundError
from service.domain.fits import auto as fit_auto
from service.domain.fits.plans_tasks import (
    check_plan_target,
    plan_regularization,
    task_auto_plan,
    task_auto_slices,
    task_majority,
    with_simulation,
)
from service.domain.fits.submit import projected_rule
from service.domain.ranges import MAX_REGULARIZATION, MIN_REGULARIZATION
from service.dp import MECHANISMS, NON_PRIVATE_MECHANISMS
from service.dp.analysis import auto as auto_numerics
from service.dp.analysis.planning import (
    MAX_SIMULATED_FITS,
    GridPoint,
    plan_point,
    simulate_accuracy,
    smallest_epsilon,
)
from service.dp.analysis.regularization import auto_regularization
from service.dp.core.tasks import TASK_LOSSES
from service.dp.mechanisms.objective_perturbation import rule_dimension

__all__ = ["MAX_GRID", "Plan", "PlanRequest", "make_plan"]

#: At most this many (ε, λ) points per plan.
MAX_GRID = 40


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """A plan: the mechanism, the grid, an optional public reference and target.
    ``regularizations`` may hold ``"auto"``: at each ε, the λ of the public rule
    (:mod:`service.dp.analysis.regularization`), recorded on the point."""

    mechanism: str
    epsilons: Sequence[float]
    regularizations: Sequence[float | str]
    delta: float = 0.0
    loss: str = "logistic"
    params: Mapping[str, Any] = field(default_factory=dict)
    reference_dataset_id: str | None = None
    repeats: int = 10
    target_accuracy: float | None = None
    target_probability: float = 0.9
    seed: int | None = None
    #: False: the request named no loss, and the dataset's task chooses it.
    loss_given: bool = True


@dataclass(frozen=True, slots=True)
class Plan:
    """The planner's answer."""

    dataset_id: str
    mechanism: str
    n: int
    d: int
    points: list[GridPoint]
    reference_dataset_id: str | None
    target: dict[str, Any] | None
    notes: list[str]
    #: The public reference's majority-class frequency (None without a reference).
    majority_baseline: float | None = None
    #: Per point (same order), what it adds: an auto point's ``private_baseline`` slice and
    #: the fit's ``expected_accuracy`` when the fit would spend one (module docstring).
    extras: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        points = []
        for i, p in enumerate(self.points):
            point = p.to_dict()
            if i < len(self.extras):
                point |= self.extras[i]
            simulated = point.get("simulated_accuracy")
            if simulated is not None and self.majority_baseline is not None:
                point["below_majority_baseline"] = simulated["mean"] < self.majority_baseline
            points.append(point)
        return {
            "dataset_id": self.dataset_id,
            "mechanism": self.mechanism,
            "n": self.n,
            "d": self.d,
            "reference_dataset_id": self.reference_dataset_id,
            "points": points,
            "target": self.target,
            "notes": self.notes,
            "majority_baseline": self.majority_baseline,
            "spent": {"epsilon": 0.0, "delta": 0.0},
        }


def _invalid(msg: str, loc: list[str | int]) -> InvalidInputError:
    return InvalidInputError(msg, errors=[{"loc": loc, "msg": msg}])


def _grid(request: PlanRequest, n: int, d: int, task: LabelTask) -> list[GridPoint]:
    if request.mechanism not in MECHANISMS or request.mechanism in NON_PRIVATE_MECHANISMS:
        raise _invalid(
            f"unknown or non-private mechanism {request.mechanism!r}", ["body", "mechanism"]
        )
    if len(request.epsilons) * len(request.regularizations) > MAX_GRID:
        raise _invalid(f"at most {MAX_GRID} (ε, λ) points per plan", ["body", "epsilons"])
    points = []
    auto = "auto" in request.regularizations
    numeric = sorted({float(v) for v in request.regularizations if v != "auto"})
    for eps in sorted(set(request.epsilons)):
        lambdas: list[tuple[float, Mapping[str, Any] | None]] = [(lam, None) for lam in numeric]
        if auto and task.task != "binary":  # the multi-class and regression rules
            lambdas.append(plan_regularization(request, n=n, d=d, epsilon=eps, task=task))
        elif auto:
            try:
                dim = rule_dimension(request.mechanism, d, request.params)  # k if projected
                choice = auto_regularization(
                    request.mechanism,
                    n=n,
                    d=dim,
                    epsilon=eps,
                    delta=request.delta,
                    loss=request.loss,
                    params=request.params,
                    bounds=(MIN_REGULARIZATION, MAX_REGULARIZATION),
                )
            except ValueError as exc:
                raise _invalid(
                    f"regularization 'auto': {exc}", ["body", "regularizations"]
                ) from exc
            lambdas.append((choice.regularization, projected_rule(choice.record(), d, dim)))
        for lam, rule in lambdas:
            try:
                point = plan_point(
                    request.mechanism,
                    n=n,
                    d=d,
                    epsilon=eps,
                    delta=request.delta,
                    loss=request.loss,
                    regularization=lam,
                    params=request.params,
                    **task.dp_kwargs,
                )
            except (ValueError, TypeError, ArithmeticError) as exc:
                raise _invalid(f"invalid plan parameters: {exc}", ["body"]) from exc
            points.append(point if rule is None else replace(point, regularization_rule=rule))
    return points


#: At most this many ε per ``auto`` plan (each runs the chooser: every candidate simulated).
MAX_AUTO_EPSILONS = 8


def _auto_plan(
    uow: UnitOfWork,
    uow_factory: UnitOfWorkFactory,
    *,
    dataset_id: str,
    target: Dataset,
    request: PlanRequest,
    reference: Dataset | None,
) -> Plan:
    """``mechanism: auto``: per ε, auto's choice (docs/design.md §3) and its simulated band,
    on the named public reference or, by default, on the site's own public reference rows
    (:func:`service.domain.fits.auto.find_public_reference`), else the synthetic one."""
    epsilons = sorted(set(request.epsilons))
    if len(epsilons) > MAX_AUTO_EPSILONS:
        raise _invalid(f"at most {MAX_AUTO_EPSILONS} ε values with auto", ["body", "epsilons"])
    if request.target_accuracy is not None:
        raise _invalid(
            "auto plans answer no target accuracy; name a mechanism", ["body", "target_accuracy"]
        )
    fit_auto.check_auto_request(epsilon=epsilons[0], params=request.params)
    public = None
    with uow:
        if reference is not None:
            design = read_design(uow_factory, reference)
            public = fit_auto.PublicReference(
                reference.id,
                np.asarray(design.X)[: fit_auto.MAX_REFERENCE_ROWS],
                np.asarray(design.y)[: fit_auto.MAX_REFERENCE_ROWS],
            )
        else:
            public = fit_auto.find_public_reference(uow, uow_factory, target)
    majority, source = fit_auto.public_baseline(target, public)
    n, d = int(target.n_rows), int(target.n_features)
    points: list[GridPoint] = []
    notes = [
        "auto: per ε, the first candidate in the order of preference unless a later one is "
        "clearly better on the reference (each mechanism at its automatic λ; "
        "`regularizations` are not used)",
        f"majority baseline from: {source}",
    ]
    if majority is None:
        notes.append(
            "no public baseline: an auto fit spends a slice of each ε on a private count of "
            "the positive labels (the majority baseline) and chooses and fits at the rest; "
            "each point shows that choice at the rest, the slice (private_baseline) and the "
            "fit's band (expected_accuracy), and spent_epsilon is the whole ε"
        )
    extras: list[dict[str, Any]] = []
    for eps in epsilons:
        extra: dict[str, Any] = {}
        eps_fit = eps
        if majority is None:
            # the fit's own assessment: the slice, the choice at ε less it and the band
            fit = fit_auto.assess(
                target,
                mechanism=fit_auto.AUTO,
                epsilon=eps,
                delta=request.delta,
                loss=request.loss,
                regularization=None,
                params=request.params,
                reference=None,
            )
            assert fit.epsilon is not None
            assert fit.private_baseline is not None
            eps_fit = fit.epsilon
            extra["private_baseline"] = dict(fit.private_baseline)
            if fit.expected_accuracy is not None:
                extra["expected_accuracy"] = dict(fit.expected_accuracy)
        try:
            choice = auto_numerics.choose(
                n=n,
                d=d,
                epsilon=eps_fit,
                delta=request.delta,
                loss=request.loss,
                regularization=None,
                params=request.params,
                majority=majority,
                public=None if public is None else (public.X, public.y),
                public_key="" if public is None else public.dataset_id,
                admissible=fit_auto.admissible,  # the fit's own admission
            )
        except ValueError as exc:
            raise _invalid(f"auto: {exc}", ["body", "mechanism"]) from exc
        chosen = choice.chosen
        best = next(f for f in choice.figures if f.candidate == chosen)
        own = dict(chosen.params)
        mechanism, lam = chosen.mechanism, chosen.regularization
        if mechanism == fit_auto.TRANSFER:
            # objective perturbation at strong convexity λ + η (transfer_fit's calibration)
            mechanism, lam = "objective_perturbation", lam + float(own.pop("transfer_strength"))
        point = plan_point(
            mechanism,
            n=n,
            d=d,
            epsilon=eps_fit,
            delta=request.delta,
            loss=request.loss,
            regularization=lam,
            params=own,
        )
        point = replace(point, regularization=chosen.regularization, epsilon=eps)
        if eps_fit != eps:  # the fit's ε and the slice's make up the whole ε
            point = replace(point, spent_epsilon=eps)
        points.append(
            replace(
                point,
                accuracies=best.accuracies,
                mechanism=chosen.mechanism,
                projection_rule=choice.projection,
            )
        )
        extras.append(extra)
    return Plan(
        dataset_id=dataset_id,
        mechanism=fit_auto.AUTO,
        n=n,
        d=d,
        points=points,
        reference_dataset_id=None if public is None else public.dataset_id,
        target=None,
        notes=notes,
        majority_baseline=majority,
        extras=extras,
    )


def make_plan(
    uow: UnitOfWork,
    uow_factory: UnitOfWorkFactory,
    *,
    dataset_id: str,
    request: PlanRequest,
    actor: Principal,
) -> Plan:
    """The plan of ``request`` for a dataset of the caller (module docstring)."""
    actor.site_or_not_found("dataset")
    with uow:
        target = get_owned_dataset(uow, dataset_id=dataset_id, actor=actor)
        task = dataset_task(target)
        if not request.loss_given:
            request = replace(request, loss=TASK_LOSSES[task.task][0])
        reference = None
        if request.reference_dataset_id is not None:
            try:
                reference = get_owned_dataset(
                    uow, dataset_id=request.reference_dataset_id, actor=actor
                )
            except NotFoundError:
                reference = None
            if reference is None or reference.deleted_at is not None:
                raise _invalid(
                    "reference_dataset_id names no live dataset of yours",
                    ["body", "reference_dataset_id"],
                )
    if request.mechanism == fit_auto.AUTO and (
        reference is not None
        and (
            not reference.allow_non_private
            or dict(reference.preprocessing) != dict(target.preprocessing)
            or list(reference.feature_names) != list(target.feature_names)
        )
    ):
        raise _invalid(
            "the reference dataset must be public (allow_non_private) with the dataset's spec",
            ["body", "reference_dataset_id"],
        )
    if request.mechanism == fit_auto.AUTO and task.task != "binary":
        slices: dict[float, dict[str, Any]] = {}
        if reference is None:  # the fit's slice at each ε, unless the site has a reference
            with uow:
                slices = task_auto_slices(
                    uow, uow_factory, target, sorted({float(e) for e in request.epsilons})
                )
        auto_points, auto_notes, auto_extras = task_auto_plan(target, request, task, slices)
        return Plan(
            dataset_id=dataset_id,
            mechanism=fit_auto.AUTO,
            n=int(target.n_rows),
            d=int(target.n_features),
            points=auto_points,
            reference_dataset_id=None,
            target=None,
            notes=auto_notes,
            extras=auto_extras,
        )
    if request.mechanism == fit_auto.AUTO:
        return _auto_plan(
            uow,
            uow_factory,
            dataset_id=dataset_id,
            target=target,
            request=request,
            reference=reference,
        )
    n, d = int(target.n_rows), int(target.n_features)
    points = _grid(request, n, d, task)
    check_plan_target(request, task)
    notes: list[str] = []
    majority_baseline: float | None = None
    if reference is not None:
        if not reference.allow_non_private:
            raise _invalid(
                "the reference dataset is private (uploaded without allow_non_private); the "
                "planner only simulates on public data",
                ["body", "reference_dataset_id"],
            )
        if dict(reference.preprocessing) != dict(target.preprocessing) or list(
            reference.feature_names
        ) != list(target.feature_names):
            raise _invalid(
                "the reference dataset's spec differs from the dataset's",
                ["body", "reference_dataset_id"],
            )
        if len(points) * request.repeats > MAX_SIMULATED_FITS:
            raise _invalid(
                f"grid points × repeats must be at most {MAX_SIMULATED_FITS}",
                ["body", "repeats"],
            )
        design = read_design(uow_factory, reference)
        # the public reference's own label frequency: the accuracy of always answering its
        # majority class, which every simulated band is shown against (issue 28 item 4)
        majority_baseline = task_majority(np.asarray(design.y), task)
        rng = np.random.default_rng(request.seed)
        if n > 50_000:
            notes.append("simulated fits use 50,000 rows (the dataset has more)")
        simulated = []
        for point in points:
            try:
                accuracies = simulate_accuracy(
                    design.X,
                    design.y,
                    n=n,
                    mechanism=request.mechanism,
                    epsilon=point.epsilon,
                    delta=request.delta,
                    loss=request.loss,
                    regularization=point.regularization,
                    params=request.params,
                    repeats=request.repeats,
                    rng=rng,
                    **task.dp_kwargs,
                )
            except ValueError as exc:
                raise _invalid(f"cannot simulate: {exc}", ["body", "reference_dataset_id"]) from exc
            simulated.append(with_simulation(point, accuracies, task))
        points = simulated
    target_answer = None
    if request.target_accuracy is not None:
        if reference is None:
            raise _invalid(
                "a target accuracy needs a public reference_dataset_id to simulate on",
                ["body", "target_accuracy"],
            )
        found = smallest_epsilon(
            points, accuracy=request.target_accuracy, probability=request.target_probability
        )
        target_answer = {
            "accuracy": request.target_accuracy,
            "probability": request.target_probability,
            "smallest_epsilon": None if found is None else found.epsilon,
            "regularization": None if found is None else found.regularization,
        }
    return Plan(
        dataset_id=dataset_id,
        mechanism=request.mechanism,
        n=n,
        d=d,
        points=points,
        reference_dataset_id=request.reference_dataset_id,
        target=target_answer,
        notes=notes,
        majority_baseline=majority_baseline,
    )
