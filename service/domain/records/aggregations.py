"""Privacy records of aggregations: each input model with the guarantee it carried, composed per
dataset (parallel across datasets, sequential within one), uploaded classifiers' guarantees
labelled as declared claims, and a plain statement when an input has no DP guarantee."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from service.db.models import Model
from service.domain.randomness import Randomness
from service.domain.records.base import (
    NEIGHBOURING,
    RECORD_VERSION,
    UNVERIFIED_NOTE,
    charged_line,
    json_safe,
    software_version,
)


def input_entry(model: Model, site_id: str, weight: float) -> dict[str, Any]:
    """One input model as the aggregated record lists it (no calibration, no row counts)."""
    record = dict(model.privacy or {})
    entry: dict[str, Any] = {
        "model_id": model.id,
        "site_id": site_id,
        "source": model.source,
        "weight": weight,
        "guarantee": record.get("guarantee", "none"),
        "verified": bool(record.get("verified")),
        "mechanism": record.get("mechanism"),
        "epsilon": record.get("epsilon"),
        "delta": record.get("delta"),
    }
    if model.source == "upload":
        entry["claim"] = record.get("claim")
        entry["note"] = UNVERIFIED_NOTE
    datasets = [
        {"id": d.get("id"), "epsilon": d.get("epsilon"), "delta": d.get("delta")}
        for d in record.get("datasets") or []
        if isinstance(d, Mapping)
    ]
    entry["datasets"] = datasets
    # The input's own statement names its dataset; other members see ids only.
    if model.source == "upload":
        entry["statement"] = record.get("statement")
    elif entry["guarantee"] == "differential_privacy":
        entry["statement"] = "; ".join(
            f"({d['epsilon']:g}, {d['delta']:g})-differential privacy for one row of dataset "
            f"{d['id']}"
            for d in datasets
        )
    else:
        entry["statement"] = "no differential privacy"
    randomness = record.get("randomness")
    if isinstance(randomness, Mapping) and randomness.get("source") == "test_seed":
        entry["randomness"] = dict(randomness)
    return entry


def average_privacy_record(
    inputs: Sequence[Mapping[str, Any]],
    *,
    job_id: str,
    study_id: str,
    version: str | None = None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """The record of an averaged model from its input entries (see the module doc)."""
    no_dp = [e for e in inputs if e["guarantee"] not in ("differential_privacy", "declared")]
    declared = [e for e in inputs if e["guarantee"] == "declared" or not e["verified"]]
    declared = [e for e in declared if e not in no_dp]
    per_dataset = compose_sources(inputs)
    datasets: list[dict[str, Any]] = list(per_dataset.values())
    datasets.extend(unmetered_entries(inputs, no_dp))
    if no_dp:
        guarantee = "none"
        verified = False
        epsilon = delta = None
        statement = (
            "no differential privacy: input model(s) "
            + ", ".join(e["model_id"] for e in no_dp)
            + " carry no DP guarantee, so the average protects nothing for the data they "
            "were trained on (averaging adds no noise)"
        )
    elif declared:
        guarantee = "declared"
        verified = False
        epsilon = delta = None
        statement = (
            "not verified: input model(s) "
            + ", ".join(e["model_id"] for e in declared)
            + f" carry only a guarantee {UNVERIFIED_NOTE}; the average inherits each input's "
            "guarantee for its own data by post-processing, and no more"
        )
    else:
        guarantee = "differential_privacy"
        verified = True
        epsilon = max(d["epsilon"] for d in per_dataset.values())
        delta = max(d["delta"] for d in per_dataset.values())
        statement = (
            "per dataset, the guarantee its model(s) carried (post-processing): "
            + "; ".join(
                f"({d['epsilon']:g}, {d['delta']:g})-differential privacy for one row of "
                f"dataset {d['id']}"
                for d in per_dataset.values()
            )
        )
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "kind": "aggregate",
        "method": "average",
        "verified": verified,
        "guarantee": guarantee,
        "statement": statement,
        "mechanism": "average",
        "epsilon": epsilon,
        "delta": delta,
        "unit": {
            "record": "row",
            "neighbouring": NEIGHBOURING,
            "description": "one row of each contributing dataset",
        },
        "datasets": datasets,
        "inputs": list(inputs),
        "charged": "nothing: averaging released models is post-processing and reads no data",
        "composition": {
            "within_job": "post-processing of the input models (seed 000, Alg. 4); no noise",
            "across_datasets": "parallel: each dataset keeps the guarantee of the model(s) "
            "fitted on it; ε and δ add over models fitted on the same dataset",
            "across_jobs": "the inputs' charges stay on their datasets' ledgers",
        },
        "study_id": study_id,
        "software": {"name": "privfit", "version": version or software_version()},
        "job_id": job_id,
    }
    if created_at is not None:
        record["created_at"] = created_at.isoformat()
    return json_safe(record)  # type: ignore[no-any-return]


#: Calibration numbers safe to show every member: none of them reveals the target's row count.
PUBLIC_CALIBRATION_KEYS = (
    "loss",
    # the label task the fit ran for (multi-class: K; public, the study's label form)
    "task",
    "n_classes",
    "regularization",
    "transfer_strength",
    "c",
    "branch",
    "meta_features",
    "meta_mechanism",
    "meta_scale",
    "n_site_models",
    # PST-H: public choices of the caller and numbers from ε, q_k and the source models only
    "variant",
    "feature_groups",
    "feature_group_names",
    "unused_features",
    "importance",
    "n_models",
    "low_level_epsilon",
    "high_level_epsilon",
    "high_level_fraction",
    "high_level_intercept",
    "high_level_regularization",
    "calibration_strong_convexity",
    "centre_norms",
)


def compose_sources(
    entries: Sequence[Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Per dataset, the verified DP cost of the entries' models: sequential composition
    within a dataset (ε and δ add), one slot per dataset (parallel across datasets)."""
    per_dataset: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if entry["guarantee"] != "differential_privacy" or not entry["verified"]:
            continue
        for d in entry["datasets"]:
            slot = per_dataset.setdefault(
                str(d["id"]),
                {
                    "id": d["id"],
                    "site_id": entry["site_id"],
                    "epsilon": 0.0,
                    "delta": 0.0,
                    "models": [],
                    "guarantee": "differential_privacy",
                    "verified": True,
                },
            )
            slot["epsilon"] += float(d["epsilon"])
            slot["delta"] += float(d["delta"])
            slot["models"].append(entry["model_id"])
    return per_dataset


def transfer_privacy_record(
    sources: Sequence[Mapping[str, Any]],
    *,
    target_id: str,
    target_site_id: str,
    epsilon: float,
    delta: float,
    calibration: Mapping[str, Any],
    randomness: Randomness,
    job_id: str,
    study_id: str,
    charged: Mapping[str, tuple[float, float]],
    method: str = "transfer",
    role: str = "target",
    base_mechanism: str = "objective_perturbation",
    within_job: str | None = None,
    version: str | None = None,
) -> dict[str, Any]:
    """The record of a transfer (or feature) fit: DP for the target (or holdout) dataset by
    this job, composed
    sequentially with any source model fitted on the same dataset; the sources' own
    guarantees for their datasets; a plain "no DP" when a source has none. ``epsilon`` and
    ``delta`` are what the run spent on the target; ``charged`` is the ledger's charge for the
    job (its "charged" figures come from there, never from the job's params)."""
    charged_epsilon, charged_delta = charged.get(target_id, (0.0, 0.0))
    per_dataset = compose_sources(sources)
    target = per_dataset.pop(target_id, None)
    target_slot: dict[str, Any] = {
        "id": target_id,
        "site_id": target_site_id,
        "epsilon": epsilon + (target["epsilon"] if target else 0.0),
        "delta": delta + (target["delta"] if target else 0.0),
        "charged_by_this_job": {"epsilon": charged_epsilon, "delta": charged_delta},
        "models": list(target["models"]) if target else [],
        "guarantee": "differential_privacy",
        "verified": True,
        "role": role,
    }
    datasets: list[dict[str, Any]] = [target_slot, *per_dataset.values()]
    no_dp = [e for e in sources if e["guarantee"] not in ("differential_privacy", "declared")]
    declared = [e for e in sources if e not in no_dp and not e["verified"]]
    datasets.extend(unmetered_entries(sources, no_dp))
    target_text = (
        f"({target_slot['epsilon']:g}, {target_slot['delta']:g})-differential privacy for one "
        f"row of the {role} dataset {target_id}"
        + ("" if randomness.seed is None else " (test seed: not private in practice)")
    )
    if no_dp:
        guarantee, verified, eps, dlt = "none", False, None, None
        statement = (
            f"{target_text}; but source model(s) "
            + ", ".join(e["model_id"] for e in no_dp)
            + " carry no DP guarantee, so the result protects nothing for the data they were "
            "trained on"
        )
    elif declared:
        guarantee, verified, eps, dlt = "declared", False, None, None
        statement = (
            f"{target_text}; source model(s) "
            + ", ".join(e["model_id"] for e in declared)
            + f" carry only a guarantee {UNVERIFIED_NOTE}, inherited by post-processing"
        )
    else:
        guarantee, verified = "differential_privacy", True
        eps = max(float(d["epsilon"]) for d in datasets)
        dlt = max(float(d["delta"]) for d in datasets)
        statement = target_text + "".join(
            f"; ({d['epsilon']:g}, {d['delta']:g})-differential privacy for one row of "
            f"source dataset {d['id']} (post-processing of its model)"
            for d in per_dataset.values()
        )
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "kind": "aggregate",
        "method": method,
        "verified": verified,
        "guarantee": guarantee,
        "statement": statement,
        "mechanism": method,
        "epsilon": eps,
        "delta": dlt,
        "unit": {
            "record": "row",
            "neighbouring": NEIGHBOURING,
            "description": f"one row of the {role} dataset, and of each source model's dataset",
        },
        "datasets": datasets,
        "inputs": list(sources),
        "calibration": {
            **{k: calibration[k] for k in PUBLIC_CALIBRATION_KEYS if k in calibration},
            "base_mechanism": base_mechanism,
            "note": f"numbers that depend on the {role} dataset's size are not shown to the "
            "study's other members",
        },
        "charged": charged_line(charged, role=role),
        "composition": {
            "within_job": within_job
            or "objective perturbation on the target dataset with the regulariser "
            "(η/2)‖w − w₀‖² centred on the average w₀ of the source models (public, "
            "post-processed); the same ε bound holds (see service.dp.multisite.transfer)",
            "across_datasets": "parallel across datasets; sequential (ε and δ add) on the "
            f"{role} dataset when a source model was fitted on it",
            "across_jobs": f"this job's (ε, δ) was charged to the {role} dataset's ledger and "
            "committed before any noise was drawn",
        },
        "randomness": randomness.describe(job_id),
        "study_id": study_id,
        "software": {"name": "privfit", "version": version or software_version()},
        "job_id": job_id,
    }
    return json_safe(record)  # type: ignore[no-any-return]


def unmetered_entries(
    inputs: Sequence[Mapping[str, Any]], no_dp: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Record entries for inputs whose data PrivFit did not meter: uploaded classifiers (a
    declared claim at most) and fitted models with no DP guarantee."""
    entries: list[dict[str, Any]] = [
        {
            "id": None,
            "site_id": e["site_id"],
            "models": [e["model_id"]],
            "guarantee": e["guarantee"],
            "verified": False,
            "epsilon": None,
            "delta": None,
            "description": "the data the uploader trained on (not known to PrivFit)",
            "claim": e.get("claim"),
        }
        for e in inputs
        if e["source"] == "upload"
    ]
    entries.extend(
        {
            "id": d.get("id"),
            "site_id": e["site_id"],
            "models": [e["model_id"]],
            "guarantee": "none",
            "verified": True,
            "epsilon": None,
            "delta": None,
        }
        for e in no_dp
        if e["source"] != "upload"
        for d in e["datasets"]
    )
    return entries
