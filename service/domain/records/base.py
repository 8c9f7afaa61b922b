"""The privacy record stored with every model (docs/design.md §2, issue 4 item 4). Pure functions.

A record states what was protected and how: the mechanism, the (ε, δ) spent, the dataset(s)
and the unit protected (one row, replace-one neighbours), the calibration used, how the total
was composed, where the noise came from, and which software produced it. A model a site
uploads carries the site's *declared* claim instead, labelled as unverified.

Records are plain JSON-safe dicts (they are stored in a JSON column and returned as they are).
Non-finite floats, which JSON cannot carry, are written as the strings ``"inf"``, ``"-inf"``
and ``"nan"``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import metadata
from typing import Any

import numpy as np

from service.domain.randomness import Randomness
from service.dp import NON_PRIVATE_MECHANISMS, FitResult

__all__ = [
    "RECORD_VERSION",
    "DatasetRef",
    "PrivacyClaim",
    "charged_line",
    "fit_privacy_record",
    "json_safe",
    "software_version",
    "upload_privacy_record",
]

RECORD_VERSION = 1
NEIGHBOURING = "replace-one"
UNVERIFIED_NOTE = "declared by the uploader, not verified by PrivFit"


@dataclass(frozen=True, slots=True)
class DatasetRef:
    """The dataset a fit protected, as named in its record."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class PrivacyClaim:
    """A privacy guarantee an uploader declares for a model PrivFit did not fit."""

    epsilon: float | None = None
    delta: float | None = None
    mechanism: str | None = None
    description: str | None = None


@functools.cache
def software_version() -> str:
    """The installed PrivFit version (``"unknown"`` when run from an uninstalled tree); read
    from the package metadata once per process (a lookup costs milliseconds per job)."""
    try:
        return metadata.version("privfit")
    except metadata.PackageNotFoundError:  # pragma: no cover - the package is installed
        return "unknown"


def json_safe(value: Any) -> Any:
    """``value`` with numpy scalars/arrays turned into Python ones and non-finite floats into
    strings, so that it survives JSON (and PostgreSQL's json type) unchanged."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and np.isfinite(value).all():
            return value.tolist()  # finite floats (coefficients): Python floats as they are
        return json_safe(value.tolist())
    if isinstance(value, list | tuple):
        if value and all(type(v) is float and v - v == 0.0 for v in value):
            return list(value)  # finite Python floats (v − v is NaN for NaN and ±inf)
        return [json_safe(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        f = float(value)
        if math.isfinite(f):
            return f
        return "nan" if math.isnan(f) else ("inf" if f > 0 else "-inf")
    if value is None or isinstance(value, str):
        return value
    return str(value)


def charged_line(charged: Mapping[str, tuple[float, float]], *, role: str = "") -> str:
    """The record's "charged" line: what the ledger charged this job on each dataset, e.g.
    ``"ε = 0.5, δ = 0 to dataset <id>"``. ``charged`` must be the ledger's charges (never
    figures recomputed from the job's params), ``{dataset_id: (ε, δ)}``."""
    if not charged:
        return "nothing"
    target = f"the {role} dataset" if role else "dataset"
    return "; ".join(
        f"ε = {epsilon:g}, δ = {delta:g} to {target} {dataset_id}"
        for dataset_id, (epsilon, delta) in charged.items()
    )


def _unit(dataset: DatasetRef) -> str:
    return f"one row of dataset {dataset.name!r} ({dataset.id}), {NEIGHBOURING}"


def fit_privacy_record(
    result: FitResult,
    *,
    datasets: Sequence[DatasetRef],
    randomness: Randomness,
    job_id: str,
    charged: Mapping[str, tuple[float, float]],
    version: str | None = None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """The record of a model PrivFit fitted itself (``result`` from ``service.dp.fit``);
    ``charged`` is the ledger's charge for the job per dataset (see :func:`charged_line`).

    Raises ``ValueError`` when ``result.seeded`` disagrees with ``randomness`` (the record
    must never claim the CSPRNG for seeded noise, or the reverse).
    """
    if not datasets:
        raise ValueError("a fit protects at least one dataset")
    if result.seeded != (randomness.seed is not None):
        raise ValueError("the fit's randomness does not match the configured source")
    private = result.mechanism not in NON_PRIVATE_MECHANISMS and math.isfinite(result.epsilon)
    epsilon: float | None = float(result.epsilon) if private else None
    delta = float(result.delta)
    units = [_unit(d) for d in datasets]
    if private:
        statement = (
            f"({result.epsilon:g}, {delta:g})-differential privacy for {'; '.join(units)}"
            + ("" if randomness.seed is None else " (test seed: not private in practice)")
        )
    else:
        statement = (
            "no differential privacy: the non-private baseline releases the exact minimiser "
            "without noise"
        )
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "kind": "fit",
        "verified": True,
        "guarantee": "differential_privacy" if private else "none",
        "statement": statement,
        "mechanism": result.mechanism,
        "epsilon": epsilon,
        "delta": delta,
        "unit": {
            "record": "row",
            "neighbouring": NEIGHBOURING,
            "description": "; ".join(units),
        },
        "datasets": [
            {"id": d.id, "name": d.name, "epsilon": epsilon, "delta": delta} for d in datasets
        ],
        "calibration": json_safe(dict(result.details)),
        "expected_noise_norm": json_safe(result.expected_noise_norm),
        "charged": charged_line(charged),
        "composition": {
            "within_job": result.composition,
            "across_jobs": (
                "basic sequential composition on each dataset's budget ledger: this job's "
                "(ε, δ) was charged and committed before any noise was drawn"
                if private
                else "not applicable: no privacy was claimed"
            ),
        },
        "randomness": randomness.describe(job_id),
        "software": {"name": "privfit", "version": version or software_version()},
        "job_id": job_id,
    }
    if created_at is not None:
        record["created_at"] = created_at.isoformat()
    return record


def upload_privacy_record(
    claim: PrivacyClaim | None,
    *,
    version: str | None = None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """The record of an uploaded model: the uploader's claim, shown as a claim."""
    if claim is None:
        statement = "no privacy claim was declared by the uploader"
        declared: dict[str, Any] | None = None
    else:
        declared = json_safe(
            {
                "epsilon": claim.epsilon,
                "delta": claim.delta,
                "mechanism": claim.mechanism,
                "description": claim.description,
            }
        )
        eps = "unstated ε" if claim.epsilon is None else f"ε = {claim.epsilon:g}"
        dlt = "" if claim.delta is None else f", δ = {claim.delta:g}"
        statement = f"claimed {eps}{dlt} ({UNVERIFIED_NOTE})"
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "kind": "declared_claim",
        "verified": False,
        "guarantee": "declared" if claim is not None else "none",
        "statement": statement,
        "note": UNVERIFIED_NOTE,
        "mechanism": claim.mechanism if claim is not None else None,
        "epsilon": None,
        "delta": None,
        "claim": declared,
        "software": {"name": "privfit", "version": version or software_version()},
    }
    if created_at is not None:
        record["created_at"] = created_at.isoformat()
    return record
