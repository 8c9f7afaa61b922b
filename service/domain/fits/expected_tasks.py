"""The expected band and the trivial-model warning of a multi-class or regression fit
(issue 29: "never worse than the trivial model without a warning, as for binary fits").

Use-case glue around :mod:`service.dp.analysis.expected_tasks`. The public reference is the
binary fits' (:func:`service.domain.fits.auto.find_public_reference`): the site's newest live
dataset uploaded with ``allow_non_private`` with the same features, preprocessing and label
(classes in the same order, or the same bounds). With one, a private fit's quote, job and
model record carry ``expected_accuracy`` (for a numeric label ``metric: "rmse"``, in the
label's units) and, when the band's mean is worse than the trivial model's,

* multiclass: the binary code ``below_majority_baseline`` (accuracy below always answering
  the reference's majority class);
* regression: ``worse_than_mean_baseline`` (RMSE above always predicting the reference's
  mean label).

Without a public reference there is no band and no warning can be given (as for a binary fit
without a public baseline): ``expected_accuracy`` is absent. A fit the simulation cannot run
still runs (advice only).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Final

from service.db.models import Dataset
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.datasets.catalog import dataset_task
from service.domain.fits import auto as fit_auto
from service.dp import NON_PRIVATE_MECHANISMS
from service.dp.analysis.expected_tasks import TaskExpectation, expected_task_band
from service.dp.optimize.solvers import ConvergenceError

__all__ = ["WORSE_THAN_MEAN", "with_task_band"]

logger = logging.getLogger(__name__)

#: The warning code of a regression fit expected to do worse than predicting the mean.
WORSE_THAN_MEAN: Final[str] = "worse_than_mean_baseline"


def _warning(band: TaskExpectation) -> dict[str, Any]:
    if band.metric == "rmse":
        return {
            "code": WORSE_THAN_MEAN,
            "message": (
                f"the expected RMSE ({band.mean:.4g}, p10–p90 {band.p10:.4g}–{band.p90:.4g}) "
                f"is above the RMSE of always predicting the public reference's mean label "
                f"({band.baseline:.4g}): the mean is expected to do better; consider a larger "
                "ε or mechanism auto"
            ),
            "expected_rmse": band.mean,
            "mean_baseline_rmse": band.baseline,
        }
    return {
        "code": fit_auto.BELOW_BASELINE,
        "message": (
            f"the expected accuracy ({band.mean:.3f}, p10–p90 {band.p10:.3f}–{band.p90:.3f}) "
            f"is below the majority-class baseline ({band.baseline:.3f}): always answering "
            "the majority class is expected to do better; consider a larger ε or mechanism auto"
        ),
        "expected_accuracy": band.mean,
        "majority_baseline": band.baseline,
    }


def with_task_band(
    uow: UnitOfWork,
    uow_factory: UnitOfWorkFactory | None,
    dataset: Dataset,
    request: Any,
    assessment: fit_auto.Assessment | None,
) -> fit_auto.Assessment | None:
    """``assessment`` (or a new one for a named mechanism) with the band and warning of the
    concrete ``request`` (a resolved ``FitRequest``) on the site's public reference; unchanged
    for the non-private baseline or without a reference. Call inside an open ``with uow:``."""
    if request.mechanism in NON_PRIVATE_MECHANISMS or request.epsilon is None:
        return assessment
    reference = fit_auto.find_public_reference(uow, uow_factory, dataset)
    if reference is None:
        return assessment
    task = dataset_task(dataset)
    half_range = 1.0
    if task.task == "regression":
        assert task.lower is not None
        assert task.upper is not None
        half_range = (task.upper - task.lower) / 2.0
    try:
        band = expected_task_band(
            request.mechanism,
            regularization=request.lam,
            params=request.params,
            X=reference.X,
            y=reference.y,
            task=task.task,
            n_classes=task.n_classes,
            n=int(dataset.n_rows),
            epsilon=float(request.epsilon),
            delta=float(request.delta),
            loss=request.loss,
            half_range=half_range,
        )
    except (ValueError, ConvergenceError):  # advice: the fit still runs
        logger.info("no expected band for %s", request.mechanism, exc_info=True)
        return assessment
    expected = band.to_dict() | {"reference_dataset_id": reference.dataset_id}
    warnings = [_warning(band)] if band.worse_than_baseline else []
    if assessment is None:
        return fit_auto.Assessment(
            mechanism=request.mechanism,
            regularization=request.lam,
            params=dict(request.params),
            auto=None,
            expected_accuracy=expected,
            warnings=warnings,
        )
    return replace(assessment, expected_accuracy=expected, warnings=warnings)
