"""A job's estimated work (service.dp.analysis.work), in row-feature passes, computed by hand; and
the submission's refusal of a job over the cap names the estimate only when it is the caller's."""

from __future__ import annotations

import pytest

from service.domain.jobs.charged import JobTooLargeError
from service.dp import calibrate
from service.dp.analysis.work import (
    SOLVE_PASSES,
    UPDATE_ROWS,
    dp_sgd_work,
    evaluation_work,
    federated_work,
    fit_work,
    solve_work,
)


def test_the_constants_the_estimates_are_stated_with() -> None:
    assert (SOLVE_PASSES, UPDATE_ROWS) == (20, 64)


def test_one_solve_is_twenty_passes() -> None:
    assert solve_work(30_000, 106) == 20 * 30_000 * 106
    assert fit_work("objective_perturbation", 30_000, 106, {}) == 20 * 30_000 * 106


def test_a_projected_objective_perturbation_solves_in_k_after_one_projection() -> None:
    # 30,000 rows, d = 106 projected to k = 8: one solve on the n × 8 design plus n·d·k
    details = calibrate(
        "objective_perturbation",
        n=30_000,
        d=106,
        epsilon=1.0,
        regularization=0.01,
        projection_dim=8,
    ).details
    assert fit_work("objective_perturbation", 30_000, 106, details) == (
        20 * 30_000 * 8 + 30_000 * 106 * 8
    )
    plain = calibrate("objective_perturbation", n=30_000, d=106, epsilon=1.0, regularization=0.01)
    assert fit_work("objective_perturbation", 30_000, 106, plain.details) == 20 * 30_000 * 106


def test_dp_sgd_counts_rows_and_updates_per_pass() -> None:
    # 1,000 rows in batches of 50: 20 updates per pass; 10 passes in 6 dimensions
    assert dp_sgd_work(1_000, 6, epochs=10, batches_per_epoch=20) == 10 * (1_000 + 20 * 64) * 6
    # projected to k = 3: the passes run in 3 dimensions, plus projecting the rows once
    assert dp_sgd_work(1_000, 6, epochs=10, batches_per_epoch=20, dimension=3) == (
        10 * (1_000 + 20 * 64) * 3 + 1_000 * 6 * 3
    )


def test_dp_sgd_reads_its_calibration() -> None:
    """Adult-sized, 10,000 one-row passes: the issue's long job, 2.1·10¹², far over 5·10¹⁰."""
    calibration = calibrate(
        "dp_sgd",
        n=30_162,
        d=106,
        epsilon=1.0,
        regularization=1e-3,
        epochs=10_000,
        batch_size=1,
    )
    work = fit_work("dp_sgd", 30_162, 106, calibration.details)
    assert work == 10_000 * (30_162 + 30_162 * 64) * 106
    assert work > 5e10
    # the default single pass of batches of 50 on Adult: 603 updates, 1·(30,162 + 603·64)·106
    default = calibrate("dp_sgd", n=30_162, d=106, epsilon=1.0, regularization=1e-3)
    assert fit_work("dp_sgd", 30_162, 106, default.details) == (30_162 + 603 * 64) * 106


def test_noisy_gd_counts_one_pass_and_one_release_per_step() -> None:
    details = calibrate(
        "noisy_gd", n=1000, d=5, epsilon=1.0, delta=1e-5, regularization=0.01, iterations=30
    ).details
    # T·(n + U)·d = 30·(1000 + 64)·5
    assert fit_work("noisy_gd", 1000, 5, details) == 30 * 1064 * 5


def test_evaluation_is_one_pass() -> None:
    assert evaluation_work(15_060, 106) == 15_060 * 106


@pytest.mark.parametrize(
    ("protocol", "per_round"), [("psgd", 1), ("distributed_lasso", 1), ("admm", 20)]
)
def test_federated_fits_count_rounds_over_the_hosted_rows(protocol: str, per_round: int) -> None:
    work = federated_work(protocol, rounds=50, rows=[1_000, 3_000], d=10, remote=2)
    assert work == 50 * (per_round * 4_000 * 10 + 2 * 10) + 20 * 4_000 * 10


def test_the_refusal_shows_the_estimate_only_when_it_is_the_callers() -> None:
    own = JobTooLargeError(work=4.2e11, max_work=5e10)
    assert own.extensions()["work"] == 4.2e11
    assert "4.2e+11" in own.detail
    others = JobTooLargeError(work=None, max_work=5e10)
    assert "work" not in others.extensions()
    assert others.extensions()["max_work"] == 5e10
    assert "row-feature passes per job" in others.detail
