"""The registry of charged multi-site methods: a fit on one dataset over a study's source models.

Each method is built from a job's stored parameters (so a worker needs nothing else) and
gives its calibration from public quantities — (n, d, number of source models) → the
:class:`~service.dp.core.base.Calibration` — and its fit — (X, y, source coefficient vectors,
rng) → the :class:`~service.dp.core.base.FitResult`. The source models are released models, so
using them is post-processing; the cost is the mechanism's on the fitted dataset alone.

* ``transfer`` — hypothesis transfer (seed 003, PST-F): objective perturbation with the
  regulariser (η/2)‖w − w₀‖² centred on the sources' average (:mod:`service.dp.multisite.transfer`);
  with feature groups, PST-H (:data:`PST_H_WITHIN_JOB`).
* ``feature`` — the feature method (seed 000, Alg. 5): a DP meta-level fit on the site models'
  outputs (:func:`service.dp.multisite.aggregation.feature_fit`).

A new method is one entry in :data:`CHARGED_AGGREGATIONS` (params → :class:`ChargedAggregation`)
plus its request schema.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from service.dp import calibrate as dp_calibrate
from service.dp.core.base import Calibration, FitResult
from service.dp.mechanisms.objective_perturbation import MECHANISM as OBJECTIVE_PERTURBATION
from service.dp.multisite.aggregation import (
    average_coefficients,
    feature_fit,
)
from service.dp.multisite.stacked_transfer import (
    stacked_transfer_calibration,
    stacked_transfer_fit,
)
from service.dp.multisite.transfer import transfer_calibration, transfer_fit

FitCompute = Callable[[Any, Any, list[Any], np.random.Generator | None], FitResult]


@dataclass(frozen=True, slots=True)
class ChargedAggregation:
    """A DP fit on one of the coordinator's datasets over the study's source models, rebuilt
    from the job's stored parameters (so the worker that runs it needs nothing else)."""

    method: str
    role: str
    field: str
    base_mechanism: str
    within_job: str
    #: (n, d, number of sources) → the calibration; ValueError for bad parameters.
    calibrate: Callable[[int, int, int], Calibration]
    #: (X, y, source coefficient vectors, rng) → the fit.
    compute: FitCompute


#: What the record says a PST-H job does and costs (docs/design.md §3;
# service.dp.multisite.stacked_transfer).
PST_H_WITHIN_JOB = (
    "PST-H (seed 003 Alg. 4, target side): the target's rows are split at random, "
    "independently of the data, into a low-level and a high-level part; low-level model k is "
    "objective perturbation on feature group k's columns with ε_k = q_k·ε (calibration."
    "low_level_epsilon) and the regulariser (η/2)‖w − u_k‖² centred on the average of the "
    "source models restricted to group k (public, post-processed; calibrated with λ only, "
    "which is conservative); the K low-level models read the same rows, so their costs add "
    "(Σ_k ε_k = ε); the high level is objective perturbation with ε on the meta-features of "
    "the other rows (disjoint: parallel). The true cost of everything fitted on the target "
    "rows is therefore ε, and that is what the target dataset was charged. Nothing is fitted "
    "on the source data: each source dataset keeps the cost its models were charged (added "
    "up when several source models come from one dataset), not seed 003's per-group ε_src "
    "(its K source models on the same rows cost K·ε_src)"
)


def _labels(p: Mapping[str, Any]) -> tuple[str, int, dict[str, Any]]:
    """(task, K, the keyword arguments naming them): no keywords for a binary study, whose
    job parameters do not name the task."""
    task = str(p.get("task", "binary"))
    n_classes = int(p.get("n_classes", 2))
    labels: dict[str, Any] = {} if task == "binary" else {"task": task, "n_classes": n_classes}
    return task, n_classes, labels


def transfer_method(p: Mapping[str, Any]) -> ChargedAggregation:
    """``transfer``; ``p`` names ``task`` and ``n_classes`` only for a study of multi-class or
    numeric labels (then the centred multinomial or Huber-residual objective perturbation of
    :func:`~service.dp.multisite.transfer.transfer_fit`, calibrated at λ + η)."""
    if p.get("feature_groups"):
        return pst_h_method(p)
    task, _, labels = _labels(p)

    def calibrate(n: int, d: int, _k: int) -> Calibration:
        # the fit's own calibration (at λ + η) before its centre is known: the quote shows
        # the numbers the run uses
        return transfer_calibration(
            n,
            d,
            epsilon=float(p["epsilon"]),
            transfer_strength=float(p["transfer_strength"]),
            regularization=float(p["regularization"]),
            loss=str(p["loss"]),
            **labels,
        )

    def compute(X: Any, y: Any, sources: list[Any], rng: np.random.Generator | None) -> FitResult:
        return transfer_fit(
            X,
            y,
            average_coefficients(sources),  # w₀: the equal-weight average of the sources
            epsilon=float(p["epsilon"]),
            transfer_strength=float(p["transfer_strength"]),
            regularization=float(p["regularization"]),
            loss=str(p["loss"]),
            rng=rng,
            **labels,
        )

    within_job = {
        "multiclass": "objective perturbation on the target dataset of the multinomial model "
        "C (K × d) with the regulariser (η/2)‖C − C₀‖²_F centred on the entry-by-entry average "
        "C₀ of the source models (public, post-processed), calibrated at λ + η: ε′ with "
        "gradient sensitivity 2√2 plus (K − 1)·ln(1 + 1/(Kn(λ + η + Δ))) (see "
        "service.dp.multisite.transfer)",
        "regression": "objective perturbation on the target dataset of the Huber-residual "
        "model w (labels in the study's bounds mapped onto [−1, 1], as the sources' "
        "coefficients) with the regulariser (η/2)‖w − u‖² centred on the average u of the "
        "source models (public, post-processed), calibrated at λ + η: ε′ with gradient "
        "sensitivity 2h plus ln(1 + 1/(n(λ + η + Δ))) (see service.dp.multisite.transfer)",
    }.get(
        task,
        "objective perturbation on the target dataset with the regulariser "
        "(η/2)‖w − w₀‖² centred on the average w₀ of the source models (public, "
        "post-processed); the same ε bound holds (see service.dp.multisite.transfer)",
    )
    return ChargedAggregation(
        method="transfer",
        role="target",
        field="target_dataset_id",
        base_mechanism=OBJECTIVE_PERTURBATION.name,
        within_job=within_job,
        calibrate=calibrate,
        compute=compute,
    )


def pst_h_method(p: Mapping[str, Any]) -> ChargedAggregation:
    """``transfer`` with feature groups: PST-H on the target
    (service.dp.multisite.stacked_transfer)."""
    groups = [[int(j) for j in g] for g in p["feature_groups"]]
    importance = None if p.get("importance") is None else [float(v) for v in p["importance"]]
    meta = str(p.get("meta_features") or "sigmoid")
    public = {
        "feature_group_names": [list(g) for g in p.get("feature_group_names") or []],
        "unused_features": list(p.get("unused_features") or []),
    }

    def calibrate(n: int, d: int, _k: int) -> Calibration:
        return stacked_transfer_calibration(
            n,
            d,
            feature_groups=groups,
            importance=importance,
            epsilon=float(p["epsilon"]),
            transfer_strength=float(p["transfer_strength"]),
            regularization=float(p["regularization"]),
            loss=str(p["loss"]),
            meta_features=meta,
        )

    def compute(X: Any, y: Any, sources: list[Any], rng: np.random.Generator | None) -> FitResult:
        result = stacked_transfer_fit(
            X,
            y,
            average_coefficients(sources),  # w₀: the equal-weight average of the sources
            feature_groups=groups,
            importance=importance,
            epsilon=float(p["epsilon"]),
            transfer_strength=float(p["transfer_strength"]),
            regularization=float(p["regularization"]),
            loss=str(p["loss"]),
            meta_features=meta,
            rng=rng,
        )
        return replace(result, details={**result.details, **public})

    return ChargedAggregation(
        method="transfer",
        role="target",
        field="target_dataset_id",
        base_mechanism="stacking_features",
        within_job=PST_H_WITHIN_JOB,
        calibrate=calibrate,
        compute=compute,
    )


def feature_method(p: Mapping[str, Any]) -> ChargedAggregation:
    """The feature method; ``p`` names ``task`` and ``n_classes`` only for a study of
    multi-class or numeric labels (the meta level then has N·K, or N, linear meta-features:
    :func:`~service.dp.multisite.aggregation.feature_fit`)."""
    mechanism, meta = str(p["mechanism"]), str(p["meta_features"])
    task, n_classes, labels = _labels(p)

    def calibrate(n: int, _d: int, k: int) -> Calibration:
        width = k * n_classes if task == "multiclass" else k
        return dp_calibrate(
            mechanism,
            n=n,
            d=width if meta == "linear" else k + 1,
            epsilon=float(p["epsilon"]),
            delta=float(p["delta"]),
            loss=str(p["loss"]),
            regularization=float(p["regularization"]),
            **labels,
        )

    def compute(X: Any, y: Any, sources: list[Any], rng: np.random.Generator | None) -> FitResult:
        return feature_fit(
            X,
            y,
            sources,
            meta=meta,
            mechanism=mechanism,
            epsilon=float(p["epsilon"]),
            delta=float(p["delta"]),
            loss=str(p["loss"]),
            regularization=float(p["regularization"]),
            rng=rng,
            **labels,
        )

    return ChargedAggregation(
        method="feature",
        role="holdout",
        field="holdout_dataset_id",
        base_mechanism=mechanism,
        within_job=f"{mechanism} on the holdout rows mapped through the site models "
        f"({meta} meta-features, scaled into the unit ball by a factor from the public site "
        "models only); the site models are post-processed (see service.dp.multisite.aggregation)",
        calibrate=calibrate,
        compute=compute,
    )


CHARGED_AGGREGATIONS: Mapping[str, Callable[[Mapping[str, Any]], ChargedAggregation]] = {
    "transfer": transfer_method,
    "feature": feature_method,
}
