"""Privacy records of federated fits: what every member may read of a federated job's
calibration (only numbers that reveal no dataset's row count), the per-dataset charges, and
the protocol's guarantee (docs/design.md §2, §3; docs/privacy.md for what remains observable)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from service.domain.randomness import Randomness
from service.domain.records.base import (
    NEIGHBOURING,
    RECORD_VERSION,
    charged_line,
    json_safe,
    software_version,
)
from service.dp.federated import (
    FederatedCalibration,
)
from service.dp.federated.gaussian_rounds import PUBLIC_DETAILS as GAUSSIAN_ROUNDS_PUBLIC

#: Calibration numbers that depend on no site's size, per protocol: only these are shown to
#: the coordinator and stored in the record every member reads. β of the noisy average
#: (∝ min nᵢ), ADMM's per-site κ, ᾱ, Φ, ζ (of each
#: Bₚ) and every per-site entry would reveal row counts of other sites' datasets.
_PUBLIC_CALIBRATION: Final[Mapping[str, frozenset[str]]] = {
    "noisy_average": frozenset(
        {
            "protocol",
            "K",
            "d",
            "epsilon",
            "delta",
            "loss",
            "lipschitz",
            "regularization",
            "noise",
            "certificate_tolerance",
            "distance_to_exact_minimiser_bound",
            "mean_rounding_bound",
            "noise_dimension",
        }
    ),
    "psgd": GAUSSIAN_ROUNDS_PUBLIC
    | {
        "protocol",
        "K",
        "d",
        "epsilon",
        "delta",
        "loss",
        "c",
        "lipschitz",
        "regularization",
        "iterations",
        "step_size",
        "smoothness_bound",
        "momentum",
        "averaging_from",
    },
    "admm": frozenset(
        {
            "protocol",
            "perturbation",
            "K",
            "d",
            "loss",
            "c",
            "lipschitz",
            "regularization",
            "penalty",
            "penalty_default",
            "iterations",
            "neighbours",
            "epsilon",
            "delta",
            "alpha",
            "composition_method",
            "basic_total",
            "advanced_total",
            "delta_prime",
            # Gaussian primal perturbation: functions of ε, δ and T only
            "noise",
            "iterations_default",
            "zcdp_conversion",
            "rho_total",
            "rho_per_round",
            "epsilon_spent",
            "epsilon_bun_steinke",
            "solver_slack",
        }
    ),
    "distributed_lasso": GAUSSIAN_ROUNDS_PUBLIC
    | {
        "protocol",
        "K",
        "d",
        "loss",
        "l1",
        "iterations",
        "step_size",
        "accelerated",
        "noise",
        "epsilon",
        "delta",
        "clip_applied",
    },
}


_HIDDEN_NOTE: Final[str] = (
    "numbers that depend on the sites' row counts are not shown (docs/design.md §2: no row "
    "counts of another site's dataset)"
)


def public_calibration(calibration: FederatedCalibration) -> dict[str, Any]:
    """The calibration as the coordinator and the members may see it."""
    # the label's task (named only when not binary) is public: the study's spec declares it
    allowed = _PUBLIC_CALIBRATION.get(calibration.protocol, frozenset()) | {"task", "n_classes"}
    shown = {k: v for k, v in calibration.details.items() if k in allowed}
    return json_safe({**shown, "note": _HIDDEN_NOTE})  # type: ignore[no-any-return]


def public_composition(calibration: FederatedCalibration) -> str:
    """How each dataset's cost arises, in words that reveal no site's size."""
    if not calibration.private:
        return (
            f"{calibration.protocol} with these parameters adds no calibrated noise: no "
            "differential privacy, nothing charged"
        )
    if calibration.protocol == "noisy_average":
        lipschitz = float(calibration.details.get("lipschitz", 1.0))
        two_l = "2" if lipschitz == 1.0 else f"2L (L = {lipschitz:.6g}, the loss's gradient bound)"
        return (
            "one release: the computed average of the K local minimisers plus noise "
            "∝ exp(−β‖b‖) with β = ε/S; each local minimiser is certified (its gradient proved "
            "≤ τ, so within τ/λ of the exact one), and the average moves by at most "
            f"S_i = ({two_l}/(nᵢ λ) + 2τ/λ)/K + 2ρ (ρ the rounding of the mean) when one record of "
            "site i changes, so every dataset is protected at ε or better (the smallest at "
            "exactly ε), and every dataset is charged ε; a site whose certificate is not met "
            "fails the job with nothing released"
        )
    # PSGD's, ADMM's and the Lasso's statements name only public numbers (α, T, σ, ρ).
    return calibration.composition


def federated_privacy_record(
    calibration: FederatedCalibration,
    *,
    datasets: Sequence[Mapping[str, Any]],
    randomness: Randomness,
    job_id: str,
    study_id: str,
    charged: Mapping[str, tuple[float, float]],
    version: str | None = None,
) -> dict[str, Any]:
    """The record of a federated model: each dataset's own (ε, δ) (parallel across datasets),
    the protocol's calibration and assumptions, and a plain "no DP" for non-private runs.

    ``datasets``: ``{"id", "site_id"}`` per participating dataset, in the protocol's site
    order (the order of ``calibration.site_costs``). ``charged``: the ledger's charge for the
    job per dataset, stated as ``charged_by_this_job`` and in the "charged" line.
    """
    private = calibration.private
    seeded = "" if randomness.seed is None else " (test seed: not private in practice)"
    entries: list[dict[str, Any]] = []
    charged_epsilon = max(float(c.epsilon) for c in calibration.site_costs)
    charged_delta = max(float(c.delta) for c in calibration.site_costs)
    for d in datasets:
        eps = charged_epsilon if private else None
        dlt = charged_delta if private else 0.0
        entries.append(
            {
                "id": d["id"],
                "site_id": d["site_id"],
                "epsilon": eps,
                "delta": dlt,
                "charged_by_this_job": {
                    "epsilon": charged.get(d["id"], (0.0, 0.0))[0],
                    "delta": charged.get(d["id"], (0.0, 0.0))[1],
                },
                "guarantee": "differential_privacy" if private else "none",
                "verified": True,
            }
        )
    if private:
        statement = (
            "; ".join(
                f"({e['epsilon']:g}, {e['delta']:g})-differential privacy for one row of "
                f"dataset {e['id']}"
                for e in entries
            )
            + seeded
        )
        epsilon: float | None = max(float(e["epsilon"]) for e in entries)
        delta = max(float(e["delta"]) for e in entries)
    else:
        statement = (
            f"no differential privacy: {calibration.protocol} with these parameters shares "
            "exact statistics of the sites' data between its rounds and releases its result "
            "without calibrated noise"
        )
        epsilon, delta = None, 0.0
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "kind": "federated",
        "protocol": calibration.protocol,
        "verified": True,
        "guarantee": "differential_privacy" if private else "none",
        "statement": statement,
        "mechanism": calibration.protocol,
        "epsilon": epsilon,
        "delta": delta,
        "unit": {
            "record": "row",
            "neighbouring": NEIGHBOURING,
            "description": "one row of each participating dataset",
        },
        "datasets": entries,
        "calibration": public_calibration(calibration),
        "rounds": int(calibration.rounds),
        "assumptions": list(calibration.notes),
        "charged": charged_line(charged),
        "released": "only this final model: no site's local model, shared statistic or "
        "intermediate iterate leaves PrivFit",
        "composition": {
            "within_job": public_composition(calibration),
            "across_datasets": "parallel: the datasets hold different people, so each is "
            "charged its own cost (the figures above), not their sum",
            "across_jobs": (
                "basic sequential composition on each dataset's budget ledger and on the "
                "study's grant: this job's costs were charged and committed before any noise "
                "was drawn"
                if private
                else "not applicable: no privacy was claimed"
            ),
        },
        "randomness": randomness.describe(job_id),
        "study_id": study_id,
        "software": {"name": "privfit", "version": version or software_version()},
        "job_id": job_id,
    }
    return json_safe(record)  # type: ignore[no-any-return]
