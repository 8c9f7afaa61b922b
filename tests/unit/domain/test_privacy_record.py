"""Privacy records: what was protected, how, with which randomness; claims stay claims."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import numpy as np
import pytest

from service.domain.randomness import Randomness
from service.domain.records.base import (
    UNVERIFIED_NOTE,
    DatasetRef,
    PrivacyClaim,
    fit_privacy_record,
    json_safe,
    software_version,
    upload_privacy_record,
)
from service.dp import FitResult, fit
from tests.unit.domain import _data

DATASET = DatasetRef(id="d" * 32, name="clinic")
#: The ledger's charge for the job, as the worker passes it.
CHARGED = {DATASET.id: (0.5, 0.0)}


def fitted(mechanism: str = "objective_perturbation", *, seed: int | None = 3) -> FitResult:
    data, y = _data.rows(200)
    X = _data.spec().transform(_data.columns(data))
    rng = None if seed is None else np.random.default_rng(seed)
    return fit(X, y, mechanism, epsilon=0.5, regularization=0.01, rng=rng)


def test_fit_record_states_mechanism_budget_unit_calibration_and_source() -> None:
    result = fitted(seed=None)
    when = datetime(2026, 1, 2, tzinfo=UTC)
    record = fit_privacy_record(
        result,
        datasets=[DATASET],
        randomness=Randomness(),
        job_id="j1",
        charged=CHARGED,
        created_at=when,
    )
    assert record["verified"] is True
    assert record["guarantee"] == "differential_privacy"
    assert record["mechanism"] == "objective_perturbation"
    assert (record["epsilon"], record["delta"]) == (0.5, 0.0)
    assert record["unit"]["neighbouring"] == "replace-one"
    assert f"one row of dataset 'clinic' ({DATASET.id}), replace-one" in record["statement"]
    assert record["datasets"] == [
        {"id": DATASET.id, "name": "clinic", "epsilon": 0.5, "delta": 0.0}
    ]
    assert record["calibration"]["epsilon_prime"] == result.details["epsilon_prime"]
    assert record["expected_noise_norm"] == pytest.approx(result.expected_noise_norm)
    assert record["composition"]["within_job"] == result.composition
    assert "charged and committed before any noise" in record["composition"]["across_jobs"]
    assert record["charged"] == f"ε = 0.5, δ = 0 to dataset {DATASET.id}"
    assert record["randomness"]["source"] == "csprng"
    assert record["software"] == {"name": "privfit", "version": software_version()}
    assert record["job_id"] == "j1"
    assert record["created_at"] == when.isoformat()
    json.dumps(record, allow_nan=False)


def test_a_test_seed_is_recorded_as_such() -> None:
    record = fit_privacy_record(
        fitted(seed=3),
        datasets=[DATASET],
        randomness=Randomness(seed=3),
        job_id="j",
        charged=CHARGED,
    )
    assert record["randomness"]["source"] == "test_seed"
    assert record["randomness"]["seed"] == 3
    assert "not private in practice" in record["statement"]


@pytest.mark.parametrize(("result_seed", "configured"), [(3, None), (None, 3)])
def test_a_mismatched_randomness_source_is_refused(
    result_seed: int | None, configured: int | None
) -> None:
    with pytest.raises(ValueError, match="randomness"):
        fit_privacy_record(
            fitted(seed=result_seed),
            datasets=[DATASET],
            randomness=Randomness(seed=configured),
            job_id="j",
            charged=CHARGED,
        )


def test_non_private_fits_say_no_dp_and_stay_valid_json() -> None:
    result = fitted("non_private", seed=None)
    assert math.isinf(result.epsilon)
    record = fit_privacy_record(
        result,
        datasets=[DATASET],
        randomness=Randomness(),
        job_id="j",
        charged={DATASET.id: (0.0, 0.0)},
    )
    assert record["guarantee"] == "none"
    assert record["epsilon"] is None
    assert "no differential privacy" in record["statement"]
    assert record["calibration"]["epsilon"] == "inf"
    assert record["charged"] == f"ε = 0, δ = 0 to dataset {DATASET.id}"
    json.dumps(record, allow_nan=False)


def test_upload_records_are_claims_never_verified() -> None:
    claim = PrivacyClaim(epsilon=1.0, delta=1e-6, mechanism="dp_sgd", description="our own")
    record = upload_privacy_record(claim)
    assert record["verified"] is False
    assert record["kind"] == "declared_claim"
    assert record["note"] == UNVERIFIED_NOTE
    assert record["epsilon"] is None  # a claim is never shown as a verified ε
    assert record["claim"] == {
        "epsilon": 1.0,
        "delta": 1e-6,
        "mechanism": "dp_sgd",
        "description": "our own",
    }
    assert "claimed ε = 1" in record["statement"]
    assert UNVERIFIED_NOTE in record["statement"]
    empty = upload_privacy_record(None)
    assert empty["claim"] is None
    assert empty["guarantee"] == "none"


def test_json_safe_handles_numpy_and_non_finite_values() -> None:
    value = {
        "a": np.float64(1.5),
        "b": np.int64(3),
        "c": [math.inf, -math.inf, math.nan],
        "d": np.array([1.0, 2.0]),
        "e": (np.bool_(True), None, "x"),
    }
    assert json_safe(value) == {
        "a": 1.5,
        "b": 3,
        "c": ["inf", "-inf", "nan"],
        "d": [1.0, 2.0],
        "e": [True, None, "x"],
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([0.5, -1e308, 1e308], [0.5, -1e308, 1e308]),  # finite floats: kept as they are
        ([0.5, math.nan], [0.5, "nan"]),  # one non-finite float: the slow path
        ([1.0, math.inf, 2.0], [1.0, "inf", 2.0]),
        (np.array([0.25, -np.inf], dtype=np.float32), [0.25, "-inf"]),
        (np.array([0.25, 4.0]), [0.25, 4.0]),
        ([np.float64(0.5), 1.0], [0.5, 1.0]),  # a numpy scalar: converted
        ([True, 1.0], [True, 1.0]),
    ],
)
def test_json_safe_fast_paths_for_float_lists_give_the_same_answer(
    value: object, expected: list[object]
) -> None:
    out = json_safe(value)
    assert out == expected
    assert [type(v) for v in out] == [type(v) for v in expected]
    json.dumps(out, allow_nan=False)


def test_randomness_comes_from_a_seed_only_in_test_mode() -> None:
    assert Randomness.from_settings(environment="prod", test_seed=5).seed is None
    assert Randomness.from_settings(environment="dev", test_seed=5).generator("j1") is None
    seeded = Randomness.from_settings(environment="test", test_seed=5)
    assert seeded.source == "test_seed"
    gen_a, gen_b = seeded.generator("j1"), seeded.generator("j1")
    assert gen_a is not None
    assert gen_b is not None
    assert gen_a.random() == gen_b.random()
    with pytest.raises(ValueError, match="seed"):
        Randomness(seed=-1)
