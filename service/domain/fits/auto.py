"""``"mechanism": "auto"`` and the expected-accuracy band of a fit (issue 28 items 3–5).

Use-case glue around :mod:`service.dp.analysis.auto` and its predictor
:mod:`service.dp.analysis.auto_simulation` (the numerics and their argument):

* **Public reference.** A site's *public* reference data is used by default: a live dataset
  of the same site uploaded with ``allow_non_private`` (its rows are not protected, so reading
  them releases nothing) whose encoded features and preprocessing equal the fitted dataset's.
  The newest such dataset is simulated on instead of the synthetic reference, and its label
  frequency is the public majority-class baseline. Without one, the synthetic reference is
  used, at the spec's declared public prior ``positive_fraction`` when there is one (the
  baseline is then max(p, 1 − p), ``baseline_source: "spec_prior"``); otherwise the
  reference is balanced and, for a plain fit, the baseline unknown (``baseline_source:
  "unknown"``): no warning can be given, and the quote says so.
* **Private baseline** (auto without a public baseline). Mechanism ``auto`` then estimates
  the baseline from a noisy count of the positive labels
  (:mod:`service.dp.analysis.baseline`): the public slice ρ·ε of the request goes to the count
  and ε − ρε to the fit (auto chooses, and the job calibrates, at ε − ρε). The job is charged
  the fit's calibration plus ρε, in one charge (at most the request). The quote's and the job's
  ``expected_accuracy`` say ``baseline_source: "private_count"`` with the slice
  (``private_baseline``); the worker releases the count, re-simulates the band at the noisy
  baseline and puts the count, the band and any warning in the model's record
  (:func:`run_private_baseline`), since the count exists only once the data are read.
* **Auto.** The request's mechanism ``auto`` is replaced at submission by the chooser's
  candidate (mechanism, λ); the job's params keep ``requested_mechanism: "auto"`` and the
  choice with every candidate's predicted figures (``auto``), which the model's record repeats.
  A deterministic function of public inputs: nothing is charged for it.
* **Transfer.** With public reference rows, auto may choose hypothesis transfer towards their
  own exact model (``mechanism: "transfer"``, the source stored in the job's params and its
  origin in ``auto.source``); a request cannot name transfer itself.
* **Warning.** Every private fit (auto or not) carries ``expected_accuracy`` (mean and p10–p90
  of the simulation, next to the baseline); when the mean is below a known baseline it carries
  ``warnings: [{"code": "below_majority_baseline", ...}]`` in the dry run, the job (response)
  and the model's record.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from service.db.models import Dataset
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.datasets.catalog import dataset_task, read_design
from service.domain.errors import InvalidInputError
from service.domain.ranges import check_calibration
from service.dp import NON_PRIVATE_MECHANISMS
from service.dp.analysis import auto as chooser
from service.dp.analysis import auto_simulation as simulation
from service.dp.analysis import baseline as private_baseline
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "AUTO",
    "AUTO_OPTIONS",
    "BELOW_BASELINE",
    "Assessment",
    "PublicReference",
    "admissible",
    "assess",
    "check_auto_request",
    "find_public_reference",
    "public_baseline",
    "run_private_baseline",
]

logger = logging.getLogger(__name__)

AUTO: Final[str] = chooser.AUTO
TRANSFER: Final[str] = simulation.TRANSFER
#: The only ``params`` auto accepts: options of the loss that every mechanism shares.
AUTO_OPTIONS: Final[frozenset[str]] = frozenset({"h"})
#: The warning code of a fit expected to do worse than always answering the majority class.
BELOW_BASELINE: Final[str] = "below_majority_baseline"
#: Public reference rows read at most (newest dataset's first rows).
MAX_REFERENCE_ROWS: Final[int] = simulation.TEST_ROWS + 2 * simulation.SIMULATED_ROWS
#: Datasets of the site looked through for a public reference.
_SCAN: Final[int] = 200


@dataclass(frozen=True, slots=True)
class PublicReference:
    """A site's public rows with the fitted dataset's spec."""

    dataset_id: str
    X: NDArray[np.float64]
    y: NDArray[np.float64]

    @property
    def majority(self) -> float:
        return simulation.majority_fraction(self.y)


@dataclass(frozen=True, slots=True)
class Assessment:
    """What a fit request becomes and what it is expected to give."""

    mechanism: str
    regularization: float
    params: dict[str, Any]
    auto: dict[str, Any] | None
    expected_accuracy: dict[str, Any] | None
    warnings: list[dict[str, Any]]
    #: The fit's ε (the request's, less a private baseline's slice).
    epsilon: float | None = None
    #: The private baseline's plan (its ε and slice), None with a public baseline.
    private_baseline: dict[str, Any] | None = None

    @property
    def baseline_epsilon(self) -> float:
        """ε of the private count (0 without one): charged with the fit."""
        return 0.0 if self.private_baseline is None else float(self.private_baseline["epsilon"])

    def job_extras(self) -> dict[str, Any]:
        """What the job's params add to the fit's own (recorded with the model)."""
        out: dict[str, Any] = {}
        if self.private_baseline is not None:
            out["private_baseline"] = self.private_baseline
        if self.auto is not None:
            out["requested_mechanism"] = AUTO
            out["auto"] = self.auto
        if self.expected_accuracy is not None:
            out["expected_accuracy"] = self.expected_accuracy
        out["warnings"] = self.warnings
        return out


def _invalid(msg: str, loc: list[str | int]) -> InvalidInputError:
    return InvalidInputError(msg, errors=[{"loc": loc, "msg": msg}])


def check_auto_request(*, epsilon: float | None, params: Mapping[str, Any]) -> None:
    """Refuse (422) what contradicts auto: options of one mechanism, no ε."""
    extra = sorted(set(params) - AUTO_OPTIONS)
    if extra:
        raise _invalid(
            "auto chooses the mechanism and its settings; it takes no mechanism options "
            f"(only {', '.join(sorted(AUTO_OPTIONS))}); got {', '.join(extra)}",
            ["body", "params"],
        )
    if epsilon is None:
        raise _invalid("epsilon is required for auto", ["body", "epsilon"])


def find_public_reference(
    uow: UnitOfWork, uow_factory: UnitOfWorkFactory | None, dataset: Dataset
) -> PublicReference | None:
    """The site's newest live public dataset with ``dataset``'s encoding and label (the same
    task and classes or bounds; module docstring),
    read in a transaction of its own; None without one. Call inside an open ``with uow:``."""
    if uow_factory is None or dataset.allow_non_private:
        return None
    rows = uow.datasets.list_page(
        owner_site_id=dataset.owner_site_id, include_deleted=False, limit=_SCAN, offset=0
    )
    for row in rows:
        if (
            row.id != dataset.id
            and dataset_task(row) == dataset_task(dataset)
            and row.allow_non_private
            and row.deleted_at is None
            and list(row.feature_names) == list(dataset.feature_names)
            and dict(row.preprocessing) == dict(dataset.preprocessing)
        ):
            design = read_design(uow_factory, row)
            X = np.asarray(design.X[:MAX_REFERENCE_ROWS], dtype=np.float64)
            y = np.asarray(design.y[:MAX_REFERENCE_ROWS], dtype=np.float64)
            values = np.sign(y) if dataset_task(dataset).task == "binary" else y
            if X.shape[0] < 8 or len(set(values.tolist())) < 2:
                continue
            return PublicReference(row.id, X, y)
    return None


def public_baseline(
    dataset: Dataset, reference: PublicReference | None
) -> tuple[float | None, str]:
    """The majority-class baseline from public knowledge only, and where it comes from: the
    site's public reference rows, else the spec's declared prior ``positive_fraction``
    (max(p, 1 − p)), else unknown (None)."""
    if reference is not None:
        return reference.majority, "public_reference_dataset"
    prior = (dataset.spec or {}).get("positive_fraction")
    if isinstance(prior, float | int) and 0.0 < float(prior) < 1.0:
        return max(float(prior), 1.0 - float(prior)), "spec_prior"
    return None, "unknown"


def admissible(_mechanism: str, calibration: Any) -> None:
    """The fit's admission of a candidate's calibration (the planner applies the same)."""
    try:
        check_calibration(
            epsilon=calibration.epsilon,
            delta=calibration.delta,
            details=calibration.details,
            noise_norm=calibration.expected_noise_norm,
        )
    except InvalidInputError as exc:
        raise ValueError(str(exc)) from exc


def assess(
    dataset: Dataset,
    *,
    mechanism: str,
    epsilon: float | None,
    delta: float,
    loss: str,
    regularization: float | None,
    params: Mapping[str, Any],
    reference: PublicReference | None,
) -> Assessment:
    """Resolve auto (422 when no candidate fits the public inputs) and predict the band."""
    n, d = int(dataset.n_rows), int(dataset.n_features)
    majority, source = public_baseline(dataset, reference)
    public = None if reference is None else (reference.X, reference.y)
    public_key = "" if reference is None else reference.dataset_id
    auto_record: dict[str, Any] | None = None
    own = dict(params)
    baseline_plan: dict[str, Any] | None = None
    if mechanism == AUTO:
        check_auto_request(epsilon=epsilon, params=own)
        assert epsilon is not None
        if majority is None:
            baseline_plan = _private_baseline_plan(n, epsilon)
            source = "private_count"
            epsilon = float(baseline_plan["fit_epsilon"])
        try:
            choice = chooser.choose(
                n=n,
                d=d,
                epsilon=epsilon,
                delta=delta,
                loss=loss,
                regularization=regularization,
                params=own,
                majority=majority,
                public=public,
                public_key=public_key,
                admissible=admissible,
            )
        except ValueError as exc:
            raise _invalid(f"auto: {exc}", ["body", "mechanism"]) from exc
        auto_record = choice.to_dict()
        if reference is not None:
            auto_record["reference_dataset_id"] = reference.dataset_id
        mechanism = choice.chosen.mechanism
        regularization = choice.chosen.regularization
        own = choice.chosen.params
        if mechanism == simulation.TRANSFER:
            assert reference is not None
            # the source: the public rows' own exact model (public: no budget)
            w0 = simulation.public_source(reference.X, reference.y, loss)
            own = {**own, "source": [float(v) for v in w0]}
            auto_record["source"] = {
                "reference_dataset_id": reference.dataset_id,
                "regularization": simulation.SOURCE_LAMBDA,
                "fit": "non_private on the public reference rows",
            }
    if regularization is None:
        raise _invalid(
            "regularization is required (or use mechanism auto)", ["body", "regularization"]
        )
    expected: dict[str, Any] | None = None
    warnings: list[dict[str, Any]] = []
    # The band is simulated only where it can be set against a baseline (a public reference
    # or a declared prior), or where auto has already simulated the candidates (cached): on
    # the synthetic task alone it is not on the dataset's scale and no warning can follow, so
    # a plain fit's submission does not pay for it.
    wanted = majority is not None or auto_record is not None
    if wanted and mechanism not in NON_PRIVATE_MECHANISMS and epsilon is not None:
        try:
            band = chooser.expected_accuracy(
                simulation.Candidate.of(
                    mechanism, regularization, {k: v for k, v in own.items() if k != "source"}
                ),
                n=n,
                d=d,
                epsilon=epsilon,
                delta=delta,
                loss=loss,
                majority=majority,
                baseline_source=source,
                public=public,
                public_key=public_key,
            )
        except (ValueError, ConvergenceError):  # advice: a fit it cannot simulate still runs
            logger.info("no expected-accuracy band for %s", mechanism, exc_info=True)
            band = None
        if band is not None:
            expected = band.to_dict()
            if reference is not None:
                expected["reference_dataset_id"] = reference.dataset_id
            if baseline_plan is not None:
                expected["private_baseline"] = baseline_plan
            if band.below_baseline:
                warnings.append(below_baseline_warning(band))
    return Assessment(
        mechanism=mechanism,
        regularization=float(regularization),
        params=own,
        auto=auto_record,
        expected_accuracy=expected,
        warnings=warnings,
        epsilon=epsilon,
        private_baseline=baseline_plan,
    )


def _private_baseline_plan(n: int, epsilon: float) -> dict[str, Any]:
    """The public split of ε between the fit and the private count (module docstring)."""
    try:
        fit_epsilon, count_epsilon = private_baseline.split_budget(n, float(epsilon))
    except ValueError as exc:
        raise _invalid(f"auto: {exc}", ["body", "epsilon"]) from exc
    return {
        "mechanism": private_baseline.MECHANISM,
        "epsilon": count_epsilon,
        "share": private_baseline.baseline_share(n, float(epsilon)),
        "requested_epsilon": float(epsilon),
        "fit_epsilon": fit_epsilon,
        "expected_sd": private_baseline.count_noise_sd(n, count_epsilon),
        "rule": "share = clamp(√2/(n·ε·τ), 1 %, 5 %), τ = "
        f"{private_baseline.TARGET_SD:g}; service/dp/analysis/baseline.py",
    }


def below_baseline_warning(band: chooser.Expectation) -> dict[str, Any]:
    """The ``below_majority_baseline`` warning of a band under its baseline's threshold."""
    assert band.baseline is not None
    assert band.threshold is not None
    noisy = band.baseline_sd > 0.0
    return {
        "code": BELOW_BASELINE,
        "message": (
            f"the expected accuracy ({band.mean:.3f}, p10–p90 "
            f"{band.p10:.3f}–{band.p90:.3f}) is below the majority-class "
            f"baseline ({band.baseline:.3f}"
            + (
                f", estimated privately: sd {band.baseline_sd:.3f}, threshold {band.threshold:.3f}"
                if noisy
                else ""
            )
            + "): always answering the majority class is expected to do better; "
            "consider a larger ε or mechanism auto"
        ),
        "expected_accuracy": band.mean,
        "majority_baseline": band.baseline,
    }


def run_private_baseline(
    plan: Mapping[str, Any],
    y: NDArray[np.float64],
    *,
    rng: np.random.Generator | None,
    mechanism: str,
    regularization: float,
    params: Mapping[str, Any],
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]:
    """The worker's half of a private baseline: release the noisy count at ``plan['epsilon']``
    (the only data-dependent value), then, as post-processing, the band of the fitted candidate
    at the noisy baseline and its warning. Returns (the count's record, the band or None when
    it cannot be simulated, the warnings)."""
    count = private_baseline.private_majority(y, float(plan["epsilon"]), rng)
    try:
        band = chooser.expected_accuracy(
            simulation.Candidate.of(
                mechanism, regularization, {k: v for k, v in params.items() if k != "source"}
            ),
            n=n,
            d=d,
            epsilon=epsilon,
            delta=delta,
            loss=loss,
            majority=private_baseline.reference_majority(count.majority),
            baseline_source="private_count",
            baseline_sd=count.sd,
        )
    except (ValueError, ConvergenceError):  # advice only: the fit is released regardless
        logger.info("no expected-accuracy band for %s", mechanism, exc_info=True)
        return count.record(), None, []
    expected = band.to_dict()
    expected["private_baseline"] = dict(plan)
    return count.record(), expected, [below_baseline_warning(band)] if band.below_baseline else []


def with_assessment(request: Any, assessment: Assessment) -> Any:
    """The concrete request (dataclass with mechanism, regularization, params)."""
    return replace(
        request,
        mechanism=assessment.mechanism,
        regularization=assessment.regularization,
        params=assessment.params,
        epsilon=request.epsilon if assessment.epsilon is None else assessment.epsilon,
    )
