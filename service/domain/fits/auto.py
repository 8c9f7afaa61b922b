"""``"mechanism": "auto"`` and the expected-accuracy band of a fit (issue 28 items 3–5).

Use-case glue around :mod:`service.dp.analysis.auto` (the numerics and their argument):

* **Public reference.** A site's *public* reference data is used by default: a live dataset
  of the same site uploaded with ``allow_non_private`` (its rows are not protected, so reading
  them releases nothing) whose encoded features and preprocessing equal the fitted dataset's.
  The newest such dataset is simulated on instead of the synthetic reference, and its label
  frequency is the public majority-class baseline. Without one, the synthetic reference is
  used, at the spec's declared public prior ``positive_fraction`` when there is one (the
  baseline is then max(p, 1 − p), ``baseline_source: "spec_prior"``); otherwise the
  reference is balanced and the baseline unknown (``baseline_source: "unknown"``): no
  warning can be given, and the quote says so.
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
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "AUTO",
    "AUTO_OPTIONS",
    "BELOW_BASELINE",
    "Assessment",
    "PublicReference",
    "assess",
    "check_auto_request",
    "find_public_reference",
    "public_baseline",
]

logger = logging.getLogger(__name__)

AUTO: Final[str] = chooser.AUTO
TRANSFER: Final[str] = chooser.TRANSFER
#: The only ``params`` auto accepts: options of the loss that every mechanism shares.
AUTO_OPTIONS: Final[frozenset[str]] = frozenset({"h"})
#: The warning code of a fit expected to do worse than always answering the majority class.
BELOW_BASELINE: Final[str] = "below_majority_baseline"
#: Public reference rows read at most (newest dataset's first rows).
MAX_REFERENCE_ROWS: Final[int] = chooser.TEST_ROWS + 2 * chooser.SIMULATED_ROWS
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
        return chooser.majority_fraction(self.y)


@dataclass(frozen=True, slots=True)
class Assessment:
    """What a fit request becomes and what it is expected to give."""

    mechanism: str
    regularization: float
    params: dict[str, Any]
    auto: dict[str, Any] | None
    expected_accuracy: dict[str, Any] | None
    warnings: list[dict[str, Any]]

    def job_extras(self) -> dict[str, Any]:
        """What the job's params add to the fit's own (recorded with the model)."""
        out: dict[str, Any] = {}
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
    """The site's newest live public dataset with ``dataset``'s encoding (module docstring),
    read in a transaction of its own; None without one. Call inside an open ``with uow:``."""
    if uow_factory is None or dataset.allow_non_private:
        return None
    rows = uow.datasets.list_page(
        owner_site_id=dataset.owner_site_id, include_deleted=False, limit=_SCAN, offset=0
    )
    for row in rows:
        if (
            row.id != dataset.id
            and dataset_task(row).task == "binary"
            and row.allow_non_private
            and row.deleted_at is None
            and list(row.feature_names) == list(dataset.feature_names)
            and dict(row.preprocessing) == dict(dataset.preprocessing)
        ):
            design = read_design(uow_factory, row)
            X = np.asarray(design.X[:MAX_REFERENCE_ROWS], dtype=np.float64)
            y = np.asarray(design.y[:MAX_REFERENCE_ROWS], dtype=np.float64)
            if X.shape[0] < 8 or len(set(np.sign(y).tolist())) < 2:
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


def _admissible(_mechanism: str, calibration: Any) -> None:
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
    if mechanism == AUTO:
        check_auto_request(epsilon=epsilon, params=own)
        assert epsilon is not None
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
                admissible=_admissible,
            )
        except ValueError as exc:
            raise _invalid(f"auto: {exc}", ["body", "mechanism"]) from exc
        auto_record = choice.to_dict()
        if reference is not None:
            auto_record["reference_dataset_id"] = reference.dataset_id
        mechanism = choice.chosen.mechanism
        regularization = choice.chosen.regularization
        own = choice.chosen.params
        if mechanism == chooser.TRANSFER:
            assert reference is not None
            # the source: the public rows' own exact model (public: no budget)
            w0 = chooser.public_source(reference.X, reference.y, loss)
            own = {**own, "source": [float(v) for v in w0]}
            auto_record["source"] = {
                "reference_dataset_id": reference.dataset_id,
                "regularization": chooser.SOURCE_LAMBDA,
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
                chooser.Candidate.of(
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
            if band.below_baseline:
                warnings.append(
                    {
                        "code": BELOW_BASELINE,
                        "message": (
                            f"the expected accuracy ({band.mean:.3f}, p10–p90 "
                            f"{band.p10:.3f}–{band.p90:.3f}) is below the majority-class "
                            f"baseline ({band.baseline:.3f}): always answering the majority "
                            "class is expected to do better; consider a larger ε or "
                            "mechanism auto"
                        ),
                        "expected_accuracy": band.mean,
                        "majority_baseline": band.baseline,
                    }
                )
    return Assessment(
        mechanism=mechanism,
        regularization=float(regularization),
        params=own,
        auto=auto_record,
        expected_accuracy=expected,
        warnings=warnings,
    )


def with_assessment(request: Any, assessment: Assessment) -> Any:
    """The concrete request (dataclass with mechanism, regularization, params)."""
    return replace(
        request,
        mechanism=assessment.mechanism,
        regularization=assessment.regularization,
        params=assessment.params,
    )
