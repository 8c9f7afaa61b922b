"""dp_sgd: calibration by hand, the noise law, convergence without noise, projection folding,
composition over passes and an empirical privacy audit."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from service.dp.core.base import Calibration, LinearModel, Problem
from service.dp.core.losses import get_loss
from service.dp.data.projection import RandomProjection
from service.dp.mechanisms import dp_sgd
from service.dp.mechanisms.dp_sgd import (
    MECHANISM,
    DPSGDPlan,
    batch_sizes,
    gradient_sensitivity,
    release_sensitivity,
    split_epsilon,
)
from service.dp.noise import lattice
from service.dp.optimize.solvers import ConvergenceError, minimize_erm
from tests.unit.dp._audit import sequential_audit


def _problem(
    n: int,
    d: int,
    epsilon: float,
    *,
    loss: str = "logistic",
    lam: float = 0.01,
    **params: Any,
) -> Problem:
    return MECHANISM.validate_params(
        Problem("dp_sgd", n, d, epsilon, 0.0, loss, lam, params=params)
    )


def _fit(
    X: np.ndarray, y: np.ndarray, problem: Problem, seed: int | None = 0, **kw: Any
) -> tuple[LinearModel, Calibration]:
    cal = MECHANISM.calibrate(problem)
    rng = None if seed is None else np.random.default_rng(seed)
    model = MECHANISM.run(X, y, problem, cal, rng=rng, progress=kw.get("progress"))
    assert isinstance(model, LinearModel)
    return model, cal


def _plan(cal: Calibration) -> DPSGDPlan:
    """The typed plan ``run`` reads."""
    assert isinstance(cal.plan, DPSGDPlan)
    return cal.plan


def _coef(model: object) -> np.ndarray:
    assert isinstance(model, LinearModel)
    return model.coef


def _data(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X /= 1.5 * np.maximum(np.linalg.norm(X, axis=1), 1.0)[:, None]
    w = np.linspace(3.0, -2.0, d)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ w))), 1.0, -1.0)
    return X, y


# ---- calibration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "d", "b", "eps", "epochs", "beta", "updates", "b_min"),
    [
        # β = (ε/epochs)·b_min/2, b_min = ⌊n/m⌋, m = ⌊n/b⌋ batches per pass
        (1000, 10, 10, 1.0, 1, 1.0 * 10 / 2, 100, 10),
        (1000, 10, 50, 0.5, 5, 0.1 * 50 / 2, 5 * 20, 50),
        (100, 3, 7, 2.0, 2, 1.0 * 7 / 2, 2 * 14, 7),  # 100 = 2·8 + 12·7
        (10, 3, 10, 0.3, 1, 0.3 * 10 / 2, 1, 10),
        (23, 2, 10, 1.0, 1, 1.0 * 11 / 2, 2, 11),  # two batches of 12 and 11 rows
    ],
)
def test_calibration_matches_the_hand_derivation(
    n: int, d: int, b: int, eps: float, epochs: int, beta: float, updates: int, b_min: int
) -> None:
    cal = MECHANISM.calibrate(_problem(n, d, eps, batch_size=b, epochs=epochs))
    det = cal.details
    assert det["beta"] == pytest.approx(beta, rel=1e-12)
    assert det["updates"] == updates
    assert det["min_batch_size"] == b_min
    assert det["epsilon_per_epoch"] == pytest.approx(eps / epochs, rel=1e-12)
    assert det["gradient_sensitivity"] == pytest.approx(2.0 / b_min)
    assert cal.epsilon == pytest.approx(eps, rel=1e-12)
    assert cal.epsilon <= eps
    assert cal.delta == 0.0
    assert cal.expected_noise_norm == pytest.approx(d / beta, rel=1e-12)
    assert det["expected_noise_norm_per_update"] == cal.expected_noise_norm
    assert f"{epochs} pass(es)" in cal.composition


def _hand_mean_sensitivity(b: int, d: int) -> Fraction:
    """Δ_mean(b) for C = 1, written out from the derivation (service.dp.data.clipping, step 4):
    2/b + 2[(E + u(b + E))/b + ⌈√d⌉η/2], E = γ_b·b + ⌈√d⌉·b·η, γ_b = bu/(1 − bu)."""
    u, eta = Fraction(1, 2**53), Fraction(1, 2**1074)
    root = math.isqrt(d) + (0 if math.isqrt(d) ** 2 == d else 1)
    gamma = b * u / (1 - b * u)
    error = gamma * b + root * b * eta
    return Fraction(2, b) + 2 * ((error + u * (b + error)) / b + root * eta / 2)


@pytest.mark.parametrize(
    ("n", "d", "b", "eps", "epochs"),
    [(1000, 10, 10, 1.0, 1), (30162, 106, 50, 1.0, 1), (23, 2, 10, 1.0, 1), (100, 3, 7, 2.0, 2)],
)
def test_noise_scale_includes_the_floating_point_margin(
    n: int, d: int, b: int, eps: float, epochs: int
) -> None:
    cal = MECHANISM.calibrate(_problem(n, d, eps, batch_size=b, epochs=epochs))
    det = cal.details
    sizes = batch_sizes(n, b)
    # the largest Δ over the batch sizes of a pass (b_min, and b_min + 1 when n mod m ≠ 0)
    delta = max(_hand_mean_sensitivity(int(k), d) for k in set(sizes.tolist()))
    assert delta > Fraction(2, int(sizes.min()))
    eps_pass = det["epsilon_per_epoch"]
    beta = det["beta"]
    # β is the largest double with β·Δ ≤ ε_pass, exactly
    assert Fraction(beta) * delta <= Fraction(eps_pass)
    assert Fraction(math.nextafter(beta, math.inf)) * delta > Fraction(eps_pass)
    assert Fraction(det["gradient_sensitivity"]) >= delta
    assert det["gradient_sensitivity_exact_arithmetic"] == 2.0 / int(sizes.min())
    margin = float(delta / Fraction(2, int(sizes.min())) - 1)
    assert det["float_margin"] == pytest.approx(margin, rel=1e-9)
    assert 0.0 < det["float_margin"] < 1e-11
    assert det["clip"] == 1.0
    assert det["clip_applied"] == math.nextafter(1.0, 0.0)
    assert "exact grid release" in det["release"]
    assert "floating point" in cal.composition
    # and the charged total is the one of the exact-arithmetic proof
    assert cal.epsilon == pytest.approx(eps, rel=1e-12)
    assert cal.epsilon <= eps


def test_the_adult_margin_is_about_three_in_ten_trillion() -> None:
    cal = MECHANISM.calibrate(_problem(30162, 106, 1.0, batch_size=50))
    assert 2e-13 < cal.details["float_margin"] < 4e-13


def test_released_gradients_lie_on_the_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every update's noisy gradient leaves the sampler as a multiple of 2⁻³²; the iterate is
    a function of those releases only."""
    released: list[np.ndarray] = []
    centres: list[np.ndarray] = []
    original = lattice.NormExponentialBlock.release

    def spy(self: lattice.NormExponentialBlock, j: int, centre: np.ndarray) -> np.ndarray:
        out = original(self, j, centre)
        centres.append(np.array(centre))
        released.append(out)
        return out

    monkeypatch.setattr(lattice.NormExponentialBlock, "release", spy)
    X, y = _data(300, 4)
    problem = _problem(300, 4, 1.0, batch_size=10, epochs=2)
    _fit(X, y, problem, seed=3)
    assert len(released) == problem_updates(problem)
    grid = np.array(released) * 2.0**32
    np.testing.assert_array_equal(grid, np.round(grid))
    # the centres are the clipped means: norm ≤ 1 (each term < 1), and off the grid
    assert max(float(np.linalg.norm(c)) for c in centres) < 1.0
    assert any(not np.array_equal(c * 2.0**32, np.round(c * 2.0**32)) for c in centres)


def problem_updates(problem: Problem) -> int:
    return int(MECHANISM.calibrate(problem).details["updates"])


def test_clipping_holds_in_floating_point_for_rows_at_the_bound() -> None:
    # rows of norm exactly 1 (as preprocessing produces) and |l′| = 1 (Huber in its linear
    # part): each clipped term has exact norm < 1, so the mean of the batch has norm < 1
    from service.dp.data import clipping

    rng = np.random.default_rng(4)
    X = rng.standard_normal((50, 106))
    X /= np.linalg.norm(X, axis=1)[:, None]
    bounds = clipping.row_norm_bounds(X)
    a = np.ones(50)
    coefficients = clipping.clip_coefficients(a, clipping.clip_caps(bounds, dp_sgd.CLIP))
    for c, x in zip(coefficients, X, strict=True):
        exact_sq = sum(Fraction(float(c)) ** 2 * Fraction(float(v)) ** 2 for v in x)
        assert exact_sq < 1


def test_projection_reduces_the_noise_dimension() -> None:
    cal = MECHANISM.calibrate(_problem(1000, 40, 1.0, batch_size=20, projection_dim=5))
    assert cal.details["noise_dimension"] == 5
    assert cal.expected_noise_norm == pytest.approx(5 / (1.0 * 20 / 2))


@pytest.mark.parametrize(("eps", "parts"), [(0.1, 3), (1.0, 7), (0.7, 10), (1e-9, 3), (5.0, 1)])
def test_the_split_budget_never_exceeds_the_total(eps: float, parts: int) -> None:
    share = split_epsilon(eps, parts)
    assert Fraction(share) * parts <= Fraction(eps)
    assert share == pytest.approx(eps / parts, rel=1e-15)
    cal = MECHANISM.calibrate(_problem(100, 2, eps, batch_size=10, epochs=parts))
    assert Fraction(cal.epsilon) <= Fraction(eps)


@pytest.mark.parametrize(("eps", "parts"), [(0.9, 3), (0.7, 9), (0.1, 7)])
def test_the_charged_basic_total_is_not_below_the_passes_sum(eps: float, parts: int) -> None:
    # E·ε_pass is ≤ ε exactly but not always a double: the nearest double lies below it for
    # these (ε, E), and the record must not charge less than the passes spend
    cal = MECHANISM.calibrate(_problem(100, 2, eps, batch_size=10, epochs=parts))
    spent = Fraction(cal.details["epsilon_per_epoch"]) * parts
    assert Fraction(cal.epsilon) >= spent
    assert Fraction(cal.details["basic_total"]["epsilon"]) >= spent
    assert cal.epsilon <= eps


def test_batch_sizes_cover_every_row_once_with_at_least_b_rows() -> None:
    for n in (1, 9, 10, 11, 99, 1000, 1001):
        for b in (1, 3, 10):
            if b > n:
                continue
            sizes = batch_sizes(n, b)
            assert sizes.sum() == n
            assert sizes.min() >= b
            assert sizes.max() - sizes.min() <= 1


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 101}, "batch_size"),
        ({"batch_size": 2.0}, "batch_size"),
        ({"epochs": 0}, "epochs"),
        ({"schedule": "cosine"}, "schedule"),
        ({"eta": -1.0}, "eta"),
        ({"eta": 1.0, "schedule": "inverse"}, "eta"),
        ({"radius": 0.0}, "radius"),
        ({"projection_seed": 3}, "projection_dim"),
        ({"projection_dim": 0}, "projection_dim"),
        ({"projection_dim": 2, "projection_kind": "fjlt"}, "projection_kind"),
        ({"learning_rate": 0.1}, "unknown parameter"),
    ],
)
def test_invalid_parameters_are_rejected(params: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _problem(100, 3, 1.0, **params)


def test_losses_without_a_bounded_derivative_are_rejected() -> None:
    with pytest.raises(ValueError, match="loss"):
        _problem(100, 3, 1.0, loss="squared")


# ---- the noise law ---------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize(("dim", "beta"), [(1, 2.0), (5, 0.7), (40, 3.0)])
def test_update_noise_has_gamma_norms_and_uniform_directions(dim: int, beta: float) -> None:
    # the noise of the updates, as released (zero centre): on the 2⁻³² grid the norm moves by
    # at most √d·2⁻³³, far below what a KS test of 20 000 draws resolves
    block = lattice.NormExponentialBlock(20_000, dim, beta=beta, rng=np.random.default_rng(dim))
    z = np.array([block.release(j, np.zeros(dim)) for j in range(20_000)])
    norms = np.linalg.norm(z, axis=1)
    assert stats.kstest(norms, stats.gamma(a=dim, scale=1.0 / beta).cdf).pvalue > 1e-3
    if dim > 1:
        # first coordinate of a uniform point on S^{d−1}: (u₁ + 1)/2 ~ Beta((d−1)/2, (d−1)/2)
        u1 = (z[:, 0] / norms + 1.0) / 2.0
        a = (dim - 1) / 2.0
        assert stats.kstest(u1, stats.beta(a, a).cdf).pvalue > 1e-3
    else:
        assert 0.47 < np.mean(z[:, 0] > 0) < 0.53


@pytest.mark.statistical
def test_released_noise_has_the_calibrated_scale_end_to_end() -> None:
    # Zero rows ⇒ zero gradients, so with η = 1 and λ ≈ 0 the last iterate is −Σ_t z_t:
    # each coordinate has variance T·E‖z‖²/d = T(d + 1)/β² (E‖z‖² = d(d + 1)/β²).
    n, d, b, eps = 20, 3, 2, 1.0
    problem = _problem(n, d, eps, lam=1e-12, batch_size=b, schedule="constant", eta=1.0)
    cal = MECHANISM.calibrate(problem)
    beta, T = cal.details["beta"], cal.details["updates"]
    # β = ε/Δ with Δ = 2/b·(1 + margin): one ulp-scale step below the exact-arithmetic 1.0
    assert T == 10
    assert beta == pytest.approx(1.0, rel=1e-12)
    assert beta < 1.0
    X, y = np.zeros((n, d)), np.ones(n)
    rng = np.random.default_rng(3)
    W = np.array(
        [_coef(MECHANISM.run(X, y, problem, cal, rng=rng, progress=None)) for _ in range(600)]
    )
    var = W.var()
    assert var == pytest.approx(T * (d + 1) / beta**2, rel=0.2)


@pytest.mark.statistical
def test_released_gradient_follows_the_exact_cell_probabilities() -> None:
    """One update, d = 1, batch 1: the model is −o₁, o₁ the released noisy gradient, whose law
    is that of the cell of ḡ + z, z Laplace(1/β) (the 1-d norm-exponential law), ḡ = −0.3 the
    clipped gradient l′(0)·y·x of the Huber loss (l′(0) = −1) on x = 0.3, y = 1. β is set to
    0.35 cells so every cell's probability is resolved; chi-square against
    P(k) = ∫_{cell k} (β/2)e^{−β|x − ḡ|} dx (by hand)."""
    X, y = np.array([[0.3]]), np.array([1.0])
    problem = _problem(1, 1, 1.0, loss="huber", lam=1e-300, batch_size=1, schedule="constant")
    cal = MECHANISM.calibrate(problem)
    beta_cells = 0.35
    cal = replace(cal, plan=replace(_plan(cal), beta=beta_cells * 2.0**32))  # run reads the plan
    rng = np.random.default_rng(17)
    draws = 5000
    released = np.array(
        [-_coef(MECHANISM.run(X, y, problem, cal, rng=rng, progress=None))[0] for _ in range(draws)]
    )
    cells = released * 2.0**32
    np.testing.assert_array_equal(cells, np.round(cells))
    mu = -0.3 * 2.0**32  # the centre in cells (exact), off the grid
    base = math.floor(mu)
    frac = mu - base
    support = np.arange(-10, 12)

    def cdf(x: np.ndarray) -> np.ndarray:  # Laplace(frac, 1/β) in cells
        out: np.ndarray = np.where(
            x < frac,
            0.5 * np.exp(beta_cells * (x - frac)),
            1.0 - 0.5 * np.exp(-beta_cells * (x - frac)),
        )
        return out

    probs = cdf(support + 0.5) - cdf(support - 0.5)
    offsets = cells - base
    observed = np.array([(offsets == k).sum() for k in support])
    observed = np.append(observed, draws - observed.sum())
    expected = draws * np.append(probs, 1.0 - probs.sum())
    assert expected.min() > 5
    assert stats.chisquare(observed, expected).pvalue > 1e-4


# ---- optimisation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "extra", "tol"),
    [
        ("inverse", {}, 0.01),
        ("inverse_sqrt", {"eta": 1.0}, 0.02),
        ("constant", {"eta": 0.05}, 0.05),
    ],
)
def test_huge_epsilon_approaches_the_non_private_optimum(
    schedule: str, extra: dict[str, Any], tol: float
) -> None:
    X, y = _data(2000, 4)
    lam = 0.05
    w_star = minimize_erm(X, y, get_loss("logistic"), regularization=lam)
    problem = _problem(2000, 4, 1e8, lam=lam, epochs=20, batch_size=10, schedule=schedule, **extra)
    model, _ = _fit(X, y, problem, seed=1)
    assert np.linalg.norm(model.coef - w_star) < tol * np.linalg.norm(w_star)
    # and at a small ε the noise is visible
    noisy, _ = _fit(
        X,
        y,
        _problem(2000, 4, 0.05, lam=lam, epochs=20, batch_size=10, schedule=schedule, **extra),
        seed=1,
    )
    assert np.linalg.norm(noisy.coef - w_star) > 0.5 * np.linalg.norm(w_star)


def test_huber_loss_runs_and_learns() -> None:
    X, y = _data(3000, 3)
    model, _ = _fit(X, y, _problem(3000, 3, 1e6, loss="huber", epochs=5, batch_size=20))
    assert np.mean(np.sign(X @ model.coef) == y) > 0.6


def test_release_is_rounded_and_reproducible_with_a_seed() -> None:
    X, y = _data(500, 3)
    problem = _problem(500, 3, 1.0)
    a, _ = _fit(X, y, problem, seed=5)
    b, _ = _fit(X, y, problem, seed=5)
    c, _ = _fit(X, y, problem, seed=6)
    np.testing.assert_array_equal(a.coef, b.coef)
    assert not np.array_equal(a.coef, c.coef)
    np.testing.assert_array_equal(a.coef, np.round(a.coef * 2.0**32) / 2.0**32)


def test_csprng_runs_differ() -> None:
    X, y = _data(200, 3)
    problem = _problem(200, 3, 1.0)
    a, _ = _fit(X, y, problem, seed=None)
    b, _ = _fit(X, y, problem, seed=None)
    assert np.all(np.isfinite(a.coef))
    assert not np.array_equal(a.coef, b.coef)


def test_radius_bounds_the_iterate() -> None:
    X, y = _data(300, 4)
    model, _ = _fit(X, y, _problem(300, 4, 0.01, batch_size=5, radius=0.5))
    assert np.linalg.norm(model.coef) <= 0.5 + 1e-8
    free, _ = _fit(X, y, _problem(300, 4, 0.01, batch_size=5))
    assert np.linalg.norm(free.coef) > 0.5


def test_per_example_gradients_are_clipped_even_for_long_rows() -> None:
    # Rows of norm 100 with a zero-noise-budget-free setup: ε huge, one update of batch 1.
    # Unclipped, the gradient l′(0)·y·x would have norm 50; clipped it has norm 1.
    X = np.array([[100.0, 0.0]])
    y = np.array([1.0])
    problem = _problem(1, 2, 1e12, lam=1e-9, batch_size=1, schedule="constant", eta=1.0)
    model, _ = _fit(X, y, problem)
    np.testing.assert_allclose(model.coef, [1.0, 0.0], atol=1e-6)


def test_diverging_runs_raise() -> None:
    X, y = _data(200, 3)
    problem = _problem(200, 3, 1.0, lam=1.0, batch_size=2, schedule="constant", eta=1e200)
    with pytest.raises(ConvergenceError, match="diverged"):
        _fit(X, y, problem)


def test_progress_is_reported_and_can_abort() -> None:
    X, y = _data(1000, 3)
    problem = _problem(1000, 3, 1.0, batch_size=2, epochs=2)
    seen: list[float] = []
    _fit(X, y, problem, progress=seen.append)
    assert seen[0] == 0.0
    assert seen[-1] == 1.0
    assert all(a <= b for a, b in itertools.pairwise(seen))
    assert 90 <= len(seen) <= 110

    class Cancelled(Exception):
        pass

    def cancel(fraction: float) -> None:
        if fraction > 0.3:
            raise Cancelled

    with pytest.raises(Cancelled):
        _fit(X, y, problem, progress=cancel)


# ---- projection --------------------------------------------------------------------------------


def test_projection_is_folded_into_original_space_coefficients() -> None:
    X, y = _data(800, 12)
    k, seed = 4, 4242
    problem = _problem(800, 12, 2.0, batch_size=8, projection_dim=k, projection_seed=seed)
    model, cal = _fit(X, y, problem, seed=9)
    assert model.coef.shape == (12,)
    assert cal.details["noise_dimension"] == k
    P = RandomProjection(d_in=12, k=k, seed=seed)
    # the same run by hand in the projected space, with the same random stream
    Z = P.project(X)
    inner, _ = _fit(Z, y, _problem(800, k, 2.0, batch_size=8), seed=9)
    np.testing.assert_allclose(model.coef, P.fold(inner.coef), atol=1e-8)
    # the released model scores original rows as the projected model scores projected rows
    np.testing.assert_allclose(X @ model.coef, Z @ inner.coef, atol=1e-7)
    # coef = Pᵀw lies in the row space of P
    w, *_ = np.linalg.lstsq(P.matrix.T, model.coef, rcond=None)
    np.testing.assert_allclose(P.matrix.T @ w, model.coef, atol=1e-8)


def test_projection_seed_defaults_to_a_fresh_draw() -> None:
    # coef = Pᵀw lies in the 3-dimensional row space of P: four fits with one fixed P span at
    # most 3 dimensions, whatever their noise; four fresh P (generically) span 4
    X, y = _data(200, 10)
    problem = _problem(200, 10, 1.0, projection_dim=3)
    fresh = np.array([_fit(X, y, problem, seed=None)[0].coef for _ in range(4)])
    assert fresh.shape == (4, 10)
    assert np.linalg.matrix_rank(fresh, tol=1e-6) == 4
    fixed = _problem(200, 10, 1.0, projection_dim=3, projection_seed=7)
    same = np.array([_fit(X, y, fixed, seed=None)[0].coef for _ in range(4)])
    assert np.linalg.matrix_rank(same, tol=1e-6) == 3


# ---- empirical privacy -------------------------------------------------------------------------


#: ε of the audit (its power grows with ε) and runs per dataset; the events {z > t} are fixed
#: before sampling, so every run counts.
AUDIT_EPS = 2.0
AUDIT_RUNS = 2000
#: The sequential audit's looks (cumulative runs a dataset, up to AUDIT_RUNS; see
#: :func:`_one_update_bound`).
AUDIT_LOOKS = (500, 1000, 1500, AUDIT_RUNS)


def _one_update_statistic(
    y_value: float,
    seed: int | np.random.Generator,
    noise_scale: float = 1.0,
    runs: int = AUDIT_RUNS,
) -> np.ndarray:
    """z = (w₁ + 1)/2 of ``runs`` seeded releases of one pass over one row.

    n = 1, d = 1, batch 1, one pass: w₁ = −η(λ·0 + l′(0)·y·x + z) with Huber l′(0) = −1, η = 1,
    so w₁ = y − z: the two neighbours (y = ±1) sit at the full sensitivity 2, and z's noise
    is Laplace with scale 1/β = 2/ε on w, 1/ε on z = (w₁ + 1)/2 (D: mean 1, D′: mean 0)."""
    X = np.array([[1.0]])
    problem = _problem(
        1, 1, AUDIT_EPS, loss="huber", lam=1e-9, batch_size=1, schedule="constant", eta=1.0
    )
    cal = MECHANISM.calibrate(problem)
    # β = ε/Δ, Δ = 2/b_min·(1 + margin) ≈ ε/2 by hand; the noise scale 1/β is multiplied by
    # noise_scale
    beta = cal.details["beta"]
    assert beta == pytest.approx(AUDIT_EPS / 2, rel=1e-12)
    assert beta < AUDIT_EPS / 2
    cal = replace(cal, plan=replace(_plan(cal), beta=beta / noise_scale))  # run reads the plan
    rng = np.random.default_rng(seed)
    y = np.array([y_value])
    w = np.array(
        [_coef(MECHANISM.run(X, y, problem, cal, rng=rng, progress=None))[0] for _ in range(runs)]
    )
    z: np.ndarray = (w + 1.0) / 2.0
    return z


def _one_update_bound(seed: int, noise_scale: float = 1.0) -> float:
    """The audit on {z > t}, t ∈ {1, 1 + s/2, 1 + s} (the Laplace likelihood ratio is e^ε on
    every {z > t} with t ≥ 1, D's mean), stopped early by
    :func:`tests.unit.dp._audit.sequential_audit`: looks after 500, 1000, 1500 and 2000 runs a
    dataset, each bound at 1 − α/4, stopping at the first look where the bound passes 0.6ε and
    a 1 − α/4 upper bound on ln(p/q) for {z > 1 − s} is below ε. There ln(p/q) = (1 − s)/s′ +
    ln(2 − e^{−s/s′}) for noise of scale s′: 1.49 at s′ = s = 1/ε, 2.63 at s/2, so half the
    noise stops early as a pass with probability ≤ 1 %. Simulated from the law (z = 1 + Laplace
    on D, Laplace on D′) over 200 seeds: the calibrated noise passes in all 200 after 677 runs
    a dataset on average instead of 2000; half the noise exceeds ε and twice stays below 0.6ε
    in all 200, as with the fixed 2000 runs."""
    s = 1.0 / AUDIT_EPS
    rng_d, rng_dp = np.random.default_rng(seed), np.random.default_rng(seed + 1)
    return sequential_audit(
        lambda runs: (
            _one_update_statistic(1.0, rng_d, noise_scale, runs),
            _one_update_statistic(-1.0, rng_dp, noise_scale, runs),
        ),
        looks=AUDIT_LOOKS,
        claim=AUDIT_EPS,
        tight=0.6,
        decisive=1.0 - s,
        thresholds=[1.0, 1.0 + s / 2.0, 1.0 + s],
        confidence=0.99,
    ).bound


@pytest.mark.statistical
@pytest.mark.slow
def test_empirical_privacy_of_one_update_is_tight_but_not_exceeded() -> None:
    bound = _one_update_bound(11)
    assert bound < AUDIT_EPS
    # the neighbours are at the worst case, so the audit sees most of ε (not over-noised)
    assert bound > 0.6 * AUDIT_EPS


def test_the_audit_pair_releases_y_when_the_noise_is_off() -> None:
    # sanity of the setup: with (almost) no noise z is 1 on D and 0 on D′
    assert _one_update_statistic(1.0, 0, 1e-9, runs=3) == pytest.approx([1.0] * 3, abs=1e-6)
    assert _one_update_statistic(-1.0, 0, 1e-9, runs=3) == pytest.approx([0.0] * 3, abs=1e-6)


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize("noise_scale", [0.5, 2.0])
def test_empirical_privacy_audit_notices_half_and_twice_the_noise(noise_scale: float) -> None:
    # half the noise: the true ε is 2ε and the audit's lower bound exceeds the claim;
    # twice the noise: the true ε is ε/2, below the tightness check above (> 0.6 ε)
    bound = _one_update_bound(21, noise_scale)
    if noise_scale < 1.0:
        assert bound > AUDIT_EPS
    else:
        assert bound <= 0.6 * AUDIT_EPS


def test_calibrate_is_a_pure_function_of_public_quantities() -> None:
    p = _problem(1234, 7, 0.8, batch_size=16, epochs=3)
    assert MECHANISM.calibrate(p) == MECHANISM.calibrate(p)
    assert math.isclose(MECHANISM.calibrate(p).details["beta"], (0.8 / 3) * (1234 // 77) / 2)


# ---- through the public entry point -------------------------------------------------------------


def test_fit_reports_the_composed_total_and_calibrate_agrees() -> None:
    from service.dp import calibrate, fit

    X, y = _data(400, 5)
    res = fit(
        X,
        y,
        "dp_sgd",
        epsilon=0.9,
        regularization=0.01,
        rng=np.random.default_rng(0),
        epochs=3,
        batch_size=20,
    )
    assert res.mechanism == "dp_sgd"
    assert res.coef is not None
    assert res.coef.shape == (5,)
    assert res.epsilon <= 0.9
    assert res.epsilon == pytest.approx(0.9, rel=1e-12)
    assert res.delta == 0.0
    assert res.details["epsilon_per_epoch"] == pytest.approx(0.3)
    assert res.details["beta"] == pytest.approx(0.3 * 20 / 2)
    assert res.seeded
    dry = calibrate("dp_sgd", n=400, d=5, epsilon=0.9, regularization=0.01, epochs=3, batch_size=20)
    assert dry.details == res.details
    with pytest.raises(ValueError, match="batch_size"):
        fit(X, y, "dp_sgd", epsilon=1.0, regularization=0.01, batch_size=401)


def _with_delta(n: int, d: int, epsilon: float, delta: float, **params: Any) -> Problem:
    return MECHANISM.validate_params(
        Problem("dp_sgd", n, d, epsilon, delta, "logistic", 0.01, params=params)
    )


def test_advanced_composition_over_epochs_when_it_is_tighter() -> None:
    # E = 100 passes, ε = 1, δ′ = δ = 1e-5. Basic: ε_pass = 0.01. Advanced (DRV10):
    # ε_s√(2·100·ln 1e5) + 100ε_s(e^{ε_s} − 1) = 1 with √(200·11.5129255) = 47.98526; the
    # quadratic 100x² + 47.98526x − 1 = 0 (e^x − 1 ≈ x) gives x ≈ 0.02000, the exact equation
    # 0.0199979275: twice the per-pass budget, half the noise.
    cal = MECHANISM.calibrate(_with_delta(1000, 3, 1.0, 1e-5, batch_size=10, epochs=100))
    det = cal.details
    eps_pass = det["epsilon_per_epoch"]
    assert eps_pass == pytest.approx(0.0199979275, rel=1e-8)

    def advanced(x: float) -> float:  # the bound, written out independently of the code
        return x * math.sqrt(200 * math.log(1e5)) + 100 * x * (math.exp(x) - 1)

    assert advanced(eps_pass) <= 1.0
    assert det["composition_method"] == "advanced"
    assert cal.epsilon == pytest.approx(1.0, rel=1e-12)
    assert cal.delta == 1e-5
    assert cal.epsilon <= 1.0
    assert det["basic_total"]["epsilon"] == pytest.approx(100 * 0.0199979275, rel=1e-8)
    assert det["beta"] == pytest.approx(eps_pass * 10 / 2)
    assert "advanced composition" in cal.composition


def _drv_bound(step: float, k: int, delta: float) -> Decimal:
    """ε_s√(2k ln(1/δ′)) + kε_s(e^{ε_s} − 1) in 80-digit decimals (the doubles taken exactly)."""
    ctx = Context(prec=80)
    s = Decimal(step)
    root = ctx.sqrt(2 * k * ctx.ln(ctx.divide(1, Decimal(delta))))
    return s * root + k * s * (ctx.exp(s) - 1)


@pytest.mark.parametrize(
    ("eps", "epochs", "delta"), [(0.3, 30, 1e-5), (1.0, 100, 1e-5), (3.0, 200, 1e-8)]
)
def test_advanced_composition_never_exceeds_the_budget_in_real_arithmetic(
    eps: float, epochs: int, delta: float
) -> None:
    # the DRV10 bound at the chosen ε_pass, evaluated far beyond double precision, is ≤ ε, and
    # the total the calibration charges is not below it (doubles alone land a few ulps over ε
    # for (0.3, 30, 1e-5) and charge a few ulps under the bound for the other two)
    cal = MECHANISM.calibrate(_with_delta(1000, 3, eps, delta, batch_size=10, epochs=epochs))
    det = cal.details
    assert det["composition_method"] == "advanced"
    real = _drv_bound(det["epsilon_per_epoch"], epochs, delta)
    assert real <= Decimal(eps)
    assert Decimal(cal.epsilon) >= real
    assert cal.epsilon <= eps
    assert cal.epsilon == pytest.approx(eps, rel=1e-12)
    assert Decimal(det["advanced_total"]["epsilon"]) >= real


def test_one_epoch_spends_no_delta_even_when_delta_is_offered() -> None:
    # E = 1: advanced would be ε√(2 ln 1e7) + ε(e^ε − 1) = 7.40 > 1 at ε = 1, so basic wins
    # and the job is pure ε-DP: the ledger correctly records δ = 0 for an offered δ = 1e-7.
    cal = MECHANISM.calibrate(_with_delta(1000, 3, 1.0, 1e-7, batch_size=10))
    assert (cal.epsilon, cal.delta) == (1.0, 0.0)
    assert cal.details["composition_method"] == "basic"
    assert cal.details["delta_offered"] == 1e-7
    assert cal.details["advanced_total"]["epsilon"] == pytest.approx(7.395974256, rel=1e-9)
    assert "the δ offered is not spent" in cal.composition


# --- the release grid scaled to the noise (public: d and β) ------------------------------------


@pytest.mark.parametrize(
    ("n", "d", "b", "eps", "epochs", "scale"),
    [
        (30162, 106, 50, 1.0, 1, 1),  # Adult at ε = 1: E‖z‖ ≈ 4.2, the plain 2⁻³² grid
        (200, 5, 1, 1.0, 10_000, 2**13),  # ε_pass = 10⁻⁴, b = 1 (Δ ≈ 2): E‖z‖ ≈ 10⁵ = 16·6250
        (200, 5, 1, 0.05, 250, 2**12),  # ε_pass = 2·10⁻⁴: E‖z‖ ≈ 5·10⁴ = 16·3125
    ],
)
def test_the_release_grid_scales_with_the_expected_noise(
    n: int, d: int, b: int, eps: float, epochs: int, scale: int
) -> None:
    det = MECHANISM.calibrate(_problem(n, d, eps, batch_size=b, epochs=epochs)).details
    # by hand: β = ε_pass/Δ with ε_pass = ε/epochs and Δ = 2/b (b_min = b for these n; the
    # float margin and the subnormal rounding move Δ by < 10⁻¹¹ relatively); E‖z‖ = d/β
    beta = eps / epochs / (2.0 / b)
    assert det["beta"] == pytest.approx(beta, rel=1e-9)
    expected = d / beta
    s = det["release_scale"]
    # the smallest power of two that brings the expected noise norm to at most 16 grid scales
    assert s == scale
    assert s & (s - 1) == 0
    assert expected / s <= 16.0
    assert s == 1 or expected / (s // 2) > 16.0
    assert det["release_grid"] == s * 2.0**-32
    # the centre's rounding when ḡ/s is subnormal is in Δ: s·⌈√d⌉·2⁻¹⁰⁷⁴ more, nothing at s = 1
    sizes = batch_sizes(n, b)
    base = gradient_sensitivity(sizes, d)
    root = math.isqrt(d) + (0 if math.isqrt(d) ** 2 == d else 1)
    assert release_sensitivity(sizes, d, s) == base + (Fraction(s * root, 2**1074) if s > 1 else 0)
    assert Fraction(det["beta"]) * release_sensitivity(sizes, d, s) <= Fraction(
        det["epsilon_per_epoch"]
    )


def test_with_a_scaled_grid_the_released_gradients_lie_on_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ε = 1 over 3 passes with b = 1 (ε_pass = 1/3, β = 1/6, E‖z‖ = d/β = 30, so s = 2 by
    hand, the smallest power of two with 30/s ≤ 16): the noisy gradients are multiples of
    s·2⁻³² = 2⁻³¹, the sampler drawing z/s around ḡ/s."""
    released: list[np.ndarray] = []
    original = lattice.NormExponentialBlock.release

    def spy(self: lattice.NormExponentialBlock, j: int, centre: np.ndarray) -> np.ndarray:
        out = original(self, j, centre)
        released.append(out)
        return out

    monkeypatch.setattr(lattice.NormExponentialBlock, "release", spy)
    X, y = _data(200, 5)
    problem = _problem(200, 5, 1.0, batch_size=1, epochs=3)
    det = MECHANISM.calibrate(problem).details
    s = det["release_scale"]
    assert s == 2
    _fit(X, y, problem, seed=5)
    assert len(released) == problem_updates(problem)
    # the block releases (ḡ + z)/s on 2⁻³², i.e. ḡ + z on s·2⁻³² (a factor s more would
    # accept a grid s times finer than the calibration's)
    cells = np.array(released) * 2.0**32
    np.testing.assert_array_equal(cells, np.round(cells))
    # and the noise the block drew is z/s, with E‖z/s‖ = d/(βs) ≤ 16
    # by hand: β = ε_pass/Δ = (1/3)/(2/1) = 1/6 (up to the < 10⁻¹¹ float margin)
    beta = 1.0 / 6.0
    assert det["beta"] == pytest.approx(beta, rel=1e-9)
    norms = [float(np.linalg.norm(r)) for r in released]
    assert np.mean(norms) == pytest.approx(5 / (beta * s), rel=0.2)
