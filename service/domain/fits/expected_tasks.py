"""The expected band and the trivial-model warning of a multi-class or regression fit
(issue 29: "never worse than the trivial model without a warning, as for binary fits").

Use-case glue around :mod:`service.dp.analysis.expected_tasks` (the simulation) and
:mod:`service.dp.analysis.baseline_tasks` (the private baselines).

* **Public reference.** The binary fits' (:func:`service.domain.fits.auto.find_public_reference`):
  the site's newest live dataset uploaded with ``allow_non_private`` with the same features,
  preprocessing and label (classes in the same order, or the same bounds). With one, every
  private fit's quote, job and model record carry ``expected_accuracy`` simulated on its rows
  (for a numeric label ``metric: "rmse"``, in the label's units) and, when the band's mean is
  worse than the reference's trivial model, ``below_majority_baseline`` (multiclass: accuracy
  below always answering the majority class) or ``worse_than_mean_baseline`` (regression: RMSE
  above always predicting the mean label). Nothing is spent for it.
* **Private baseline** (no public reference, and the fit is ``auto``: mechanism ``auto`` or
  λ ``"auto"``/omitted). The public slice ρ·ε of the request (:func:`~service.dp.analysis.
  baseline_tasks.split_budget`) goes to a noisy class histogram (multiclass) or noisy Σy, Σy²
  (regression), the rest to the fit, which is chosen and calibrated at ε − ρε
  (:func:`task_baseline_slice`); the job is charged both, in one charge (the request's ε).
  The quote and the job show ``expected_accuracy`` simulated on the synthetic reference at
  neutral proportions or spread with ``baseline_source`` ``private_count`` / ``private_sums``
  and the slice (``private_baseline``), and no warning yet: the release exists only once the
  data are read. The worker releases it after the fit (:func:`run_task_private_baseline`),
  re-simulates the band on the synthetic reference matched to the noisy proportions or
  spread (post-processing) and writes the release, the band and any warning (against the
  baseline's one-sided bound) into the model's record.
* A named mechanism with a numeric λ and no public reference gets no band and no warning (its
  baseline is unknown and nothing is spent to learn it). A fit the simulation cannot run
  still runs (advice only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.db.models import Dataset
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.datasets.catalog import dataset_task
from service.domain.datasets.labels import LabelTask
from service.domain.errors import InvalidInputError
from service.domain.fits import auto as fit_auto
from service.dp import NON_PRIVATE_MECHANISMS
from service.dp.analysis import baseline_tasks
from service.dp.analysis.baseline import TARGET_SD
from service.dp.analysis.expected_tasks import (
    TaskExpectation,
    expected_task_band,
    expected_task_band_synthetic,
)
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "PRIVATE_SOURCES",
    "WORSE_THAN_MEAN",
    "run_task_private_baseline",
    "task_baseline_slice",
    "with_task_band",
]

logger = logging.getLogger(__name__)

#: The warning code of a regression fit expected to do worse than predicting the mean.
WORSE_THAN_MEAN: Final[str] = "worse_than_mean_baseline"
#: ``baseline_source`` of a privately released baseline, per task.
PRIVATE_SOURCES: Final[dict[str, str]] = {
    "multiclass": "private_count",
    "regression": "private_sums",
}
_MECHANISMS: Final[dict[str, str]] = {
    "multiclass": baseline_tasks.HISTOGRAM_MECHANISM,
    "regression": baseline_tasks.SPREAD_MECHANISM,
}


def _half_range(task: LabelTask) -> float:
    if task.task != "regression":
        return 1.0
    assert task.lower is not None
    assert task.upper is not None
    return (task.upper - task.lower) / 2.0


def _warning(band: TaskExpectation) -> dict[str, Any]:
    assert band.baseline is not None
    private = band.baseline_source in PRIVATE_SOURCES.values()
    noisy = (
        f", estimated privately: sd {band.baseline_sd:.3g}, threshold {band.threshold:.4g}"
        if private
        else ""
    )
    if band.metric == "rmse":
        whose = "the data's" if private else "the public reference's"
        return {
            "code": WORSE_THAN_MEAN,
            "message": (
                f"the expected RMSE ({band.mean:.4g}, p10–p90 {band.p10:.4g}–{band.p90:.4g}) "
                f"is above the RMSE of always predicting {whose} mean label "
                f"({band.baseline:.4g}{noisy}): the mean is expected to do better; consider "
                "a larger ε or mechanism auto"
            ),
            "expected_rmse": band.mean,
            "mean_baseline_rmse": band.baseline,
        }
    return {
        "code": fit_auto.BELOW_BASELINE,
        "message": (
            f"the expected accuracy ({band.mean:.3f}, p10–p90 {band.p10:.3f}–{band.p90:.3f}) "
            f"is below the majority-class baseline ({band.baseline:.3f}{noisy}): always "
            "answering the majority class is expected to do better; consider a larger ε or "
            "mechanism auto"
        ),
        "expected_accuracy": band.mean,
        "majority_baseline": band.baseline,
    }


def _is_auto(request: Any) -> bool:
    """Mechanism ``auto`` (as for binary fits: a named mechanism, λ given or automatic, spends
    nothing on a baseline it did not ask for)."""
    return bool(request.mechanism == fit_auto.AUTO)


def task_baseline_slice(
    uow: UnitOfWork, uow_factory: UnitOfWorkFactory | None, dataset: Dataset, request: Any
) -> tuple[Any, dict[str, Any] | None]:
    """For a multi-class or regression ``"mechanism": "auto"`` request with an ε and no
    public reference: the request at the fit's ε − ρε and the slice's plan; else the request
    unchanged and None. Public inputs only (n, ε, whether a reference exists). Call inside
    an open ``with uow:``."""
    task = dataset_task(dataset)
    if (
        task.task not in PRIVATE_SOURCES
        or request.mechanism in NON_PRIVATE_MECHANISMS
        or request.mechanism == fit_auto.TRANSFER
        or request.epsilon is None
        or not _is_auto(request)
        or fit_auto.find_public_reference(uow, uow_factory, dataset) is not None
    ):
        return request, None
    n, epsilon = int(dataset.n_rows), float(request.epsilon)
    try:
        fit_epsilon, count_epsilon = baseline_tasks.split_budget(task.task, n, epsilon)
        share = baseline_tasks.baseline_share(task.task, n, epsilon)
    except ValueError as exc:
        msg = f"the private baseline: {exc}"
        raise InvalidInputError(msg, errors=[{"loc": ["body", "epsilon"], "msg": msg}]) from exc
    constant = baseline_tasks.SHARE_CONSTANTS[task.task]
    plan = {
        "mechanism": _MECHANISMS[task.task],
        "epsilon": count_epsilon,
        "share": share,
        "requested_epsilon": epsilon,
        "fit_epsilon": fit_epsilon,
        "rule": f"share = clamp({constant:.4g}/(n·ε·τ), 1 %, 5 %), τ = "
        f"{TARGET_SD:g}; service/dp/analysis/baseline_tasks.py",
    }
    return replace(request, epsilon=fit_epsilon), plan


def with_task_band(
    uow: UnitOfWork,
    uow_factory: UnitOfWorkFactory | None,
    dataset: Dataset,
    request: Any,
    assessment: fit_auto.Assessment | None,
    *,
    private_baseline: Mapping[str, Any] | None = None,
) -> fit_auto.Assessment | None:
    """``assessment`` (or a new one for a named mechanism) with the band and warning of the
    concrete ``request`` (a resolved ``FitRequest``): on the site's public reference, or, with
    a ``private_baseline`` plan (:func:`task_baseline_slice`), on the synthetic reference
    before the release (no warning yet); unchanged for the non-private baseline or without
    either. Call inside an open ``with uow:``."""
    if request.mechanism in NON_PRIVATE_MECHANISMS or request.epsilon is None:
        return assessment
    task = dataset_task(dataset)
    warnings: list[dict[str, Any]] = []
    try:
        if private_baseline is not None:
            band = expected_task_band_synthetic(
                request.mechanism,
                regularization=request.lam,
                params=request.params,
                task=task.task,
                n_classes=task.n_classes,
                n=int(dataset.n_rows),
                d=int(dataset.n_features),
                epsilon=float(request.epsilon),
                delta=float(request.delta),
                loss=request.loss,
                half_range=_half_range(task),
                baseline_source=PRIVATE_SOURCES[task.task],
            )
            expected = band.to_dict() | {"private_baseline": dict(private_baseline)}
        else:
            reference = fit_auto.find_public_reference(uow, uow_factory, dataset)
            if reference is None:
                return assessment
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
                half_range=_half_range(task),
            )
            expected = band.to_dict() | {"reference_dataset_id": reference.dataset_id}
            warnings = [_warning(band)] if band.worse_than_baseline else []
    except (ValueError, ConvergenceError):  # advice: the fit still runs
        logger.info("no expected band for %s", request.mechanism, exc_info=True)
        expected = None
    plan = None if private_baseline is None else dict(private_baseline)
    if expected is None and plan is None:
        return assessment
    if assessment is None:
        return fit_auto.Assessment(
            mechanism=request.mechanism,
            regularization=request.lam,
            params=dict(request.params),
            auto=None,
            expected_accuracy=expected,
            warnings=warnings,
            epsilon=float(request.epsilon),
            private_baseline=plan,
        )
    return replace(
        assessment,
        expected_accuracy=expected,
        warnings=warnings,
        epsilon=float(request.epsilon),
        private_baseline=plan,
    )


def run_task_private_baseline(
    plan: Mapping[str, Any],
    y: NDArray[np.float64],
    *,
    rng: np.random.Generator | None,
    task: LabelTask,
    mechanism: str,
    regularization: float,
    params: Mapping[str, Any],
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    """The worker's half: release the histogram or the sums at ``plan['epsilon']`` (the only
    data-dependent values), then, as post-processing, the band of the fitted request on the
    synthetic reference matched to them and its warning. Returns (the release's record, the
    band or None when it cannot be simulated, the warnings)."""
    release_epsilon = float(plan["epsilon"])
    half_range = _half_range(task)
    proportions: tuple[float, ...] | None = None
    spread: tuple[float, float] | None = None
    release: baseline_tasks.PrivateHistogram | baseline_tasks.PrivateSpread
    if task.task == "multiclass":
        histogram = baseline_tasks.private_histogram(y, task.n_classes, release_epsilon, rng)
        proportions = baseline_tasks.reference_proportions(histogram.proportions)
        baseline = histogram.majority
        release = histogram
    else:
        sums = baseline_tasks.private_spread(y, release_epsilon, rng, half_range=half_range)
        spread = baseline_tasks.reference_spread(sums.mean, sums.variance)
        baseline = sums.rmse
        release = sums
    try:
        band = expected_task_band_synthetic(
            mechanism,
            regularization=regularization,
            params={k: v for k, v in params.items() if k != "source"},
            task=task.task,
            n_classes=task.n_classes,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=delta,
            loss=loss,
            half_range=half_range,
            proportions=proportions,
            spread=spread,
            baseline=baseline,
            baseline_sd=release.sd,
            baseline_source=PRIVATE_SOURCES[task.task],
        )
    except (ValueError, ConvergenceError):  # advice only: the fit is released regardless
        logger.info("no expected band for %s", mechanism, exc_info=True)
        return release.record(), None, []
    expected = band.to_dict() | {"private_baseline": dict(plan)}
    return release.record(), expected, [_warning(band)] if band.worse_than_baseline else []
