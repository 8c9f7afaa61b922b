"""``"mechanism": "auto"`` on a multi-class or regression dataset (issue 29): use-case glue
around :mod:`service.dp.analysis.auto_tasks` (the rule and its argument).

Auto is replaced at submission by the first ranked candidate whose calibration the service
admits (the others' refusals are kept in the record), with its loss and its automatic λ (or
the request's own λ when one is given). The job's params keep ``requested_mechanism: "auto"``
and the ``auto`` record (task, rule, reason, chosen mechanism, loss and λ, and every
candidate with its λ and bound or why it was excluded), which the model's record repeats. A
deterministic function of public inputs: nothing is charged for it. The expected band
against the trivial model and its warning are added by :mod:`.expected_tasks`: on the site's
public reference, or, without one, against a private baseline for which
:func:`.expected_tasks.task_baseline_slice` has already taken a public slice of ε (auto then
chooses at the request's ε less that slice).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from service.db.models import Dataset
from service.domain.datasets.catalog import dataset_task
from service.domain.errors import InvalidInputError
from service.domain.fits import auto as fit_auto
from service.domain.ranges import MAX_REGULARIZATION, MIN_REGULARIZATION
from service.dp import Calibration
from service.dp.analysis.auto_tasks import rank_for_task

__all__ = ["resolve_task_auto"]


def _invalid(msg: str) -> InvalidInputError:
    return InvalidInputError(f"auto: {msg}", errors=[{"loc": ["body", "mechanism"], "msg": msg}])


def resolve_task_auto(
    dataset: Dataset,
    request: Any,
    *,
    loss_requested: str | None,
    calibrate: Callable[[Any], Calibration],
) -> tuple[Any, Calibration, fit_auto.Assessment]:
    """The concrete request (a ``FitRequest``), its calibration and the assessment carrying
    the ``auto`` record, for a dataset whose task is not binary. 422 (nothing charged) when
    the request contradicts auto or no candidate can be calibrated."""
    fit_auto.check_auto_request(epsilon=request.epsilon, params=request.params)
    task = dataset_task(dataset)
    try:
        choice = rank_for_task(
            task.task,
            n_classes=task.n_classes,
            n=int(dataset.n_rows),
            d=int(dataset.n_features),
            epsilon=float(request.epsilon),
            delta=float(request.delta),
            loss=loss_requested,
            params=request.params,
            bounds=(MIN_REGULARIZATION, MAX_REGULARIZATION),
        )
    except ValueError as exc:
        raise _invalid(str(exc)) from exc
    given = request.regularization
    numeric = given is not None and not isinstance(given, str)
    refused: list[str] = []
    for candidate in choice.ranked:
        params = {k: v for k, v in request.params.items() if candidate.loss == "huber"}
        concrete = replace(
            request,
            mechanism=candidate.mechanism,
            loss=candidate.loss,
            loss_given=True,
            params=params,
            regularization=float(given) if numeric else candidate.regularization,
            regularization_rule=None if numeric else candidate.regularization_rule,
        )
        try:
            calibration = calibrate(concrete)
        except InvalidInputError as exc:
            refused.append(f"{candidate.mechanism}: {exc}")
            continue
        why = choice.reason
        if refused:
            why += "; not admissible here: " + "; ".join(refused)
        record = choice.record(candidate, why)
        record["chosen"]["regularization"] = concrete.lam
        if numeric:
            record["regularization_source"] = "request"
        assessment = fit_auto.Assessment(
            mechanism=concrete.mechanism,
            regularization=concrete.lam,
            params=params,
            auto=record,
            expected_accuracy=None,
            warnings=[],
        )
        return concrete, calibration, assessment
    raise _invalid("no candidate fits these inputs: " + "; ".join(refused))
