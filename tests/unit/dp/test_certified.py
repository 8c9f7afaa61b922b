"""The certified minimiser release (service.dp.optimize.certified): the proved error bounds hold
against 50-digit decimal arithmetic, the public numbers are the hand-derived ones, the release
noise has the hand-derived law, and a model is never released without its certificate."""

from __future__ import annotations

import math
from decimal import Context, Decimal
from fractions import Fraction

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp import calibrate as dp_calibrate
from service.dp.core.losses import HuberLoss, LogisticLoss, Loss
from service.dp.noise import lattice
from service.dp.optimize import certified
from service.dp.optimize.solvers import ConvergenceError, SolverResult, solve_erm
from tests.unit.dp._budget import objective_budget, release_budget
from tests.unit.dp._laws import gamma_norms_fit_only_at_the_right_scale

FloatArray = NDArray[np.float64]
CTX = Context(prec=50)
U = 2.0**-53


def _dec_exp(v: float) -> Decimal:
    return CTX.exp(Decimal(v))


def _data(n: int, d: int, seed: int) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) * (1.0 + 1e-12)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


# ---- exp and l′ against decimal --------------------------------------------------------------


def test_exp_enclosure_contains_the_true_exponential() -> None:
    rng = np.random.default_rng(0)
    v = np.concatenate(
        [
            -rng.exponential(3.0, 3000),
            -rng.uniform(0.0, 800.0, 3000),
            [
                0.0,
                -0.0,
                -1e-300,
                -0.34657359027997264,
                -0.3465735902799727,
                -708.3,
                -745.1,
                -745.2,
                -746.0,
                -900.0,
            ],
            -np.log(2.0) * np.arange(0, 1080, 7) - 0.5 * np.log(2.0),
        ]
    )
    value, err = certified.exp_enclosure(v)
    for vi, ei, bi in zip(v.tolist(), value.tolist(), err.tolist(), strict=True):
        truth = _dec_exp(vi)
        assert abs(Decimal(ei) - truth) <= Decimal(bi), vi
        # and the bound is tight: under 100 ulps relative (plus the subnormal floor)
        assert bi <= 100.0 * U * float(truth) + 2.0 * 2.0**-1074, vi


@pytest.mark.parametrize("loss", [LogisticLoss(), HuberLoss(h=0.5), HuberLoss(h=0.1)])
def test_loss_derivative_enclosure_contains_the_true_derivative(loss: Loss) -> None:
    rng = np.random.default_rng(1)
    m = np.concatenate(
        [
            rng.normal(0.0, 3.0, 2000),
            rng.uniform(-800.0, 800.0, 500),
            [0.0, 1.0, 1.5, 0.5, 1.1, 0.9, 1.0 + 1e-16, 0.5 - 1e-16, 1.5 + 1e-15, -40.0, 40.0],
        ]
    )
    value, err = certified.loss_derivative_enclosure(loss, m)
    for mi, li, bi in zip(m.tolist(), value.tolist(), err.tolist(), strict=True):
        if isinstance(loss, LogisticLoss):
            truth = -1 / (1 + CTX.exp(Decimal(mi)))
        else:
            assert isinstance(loss, HuberLoss)
            h = Decimal(loss.h)
            z = Decimal(mi)
            if z > 1 + h:
                truth = Decimal(0)
            elif z < 1 - h:
                truth = Decimal(-1)
            else:
                truth = -(1 + h - z) / (2 * h)
        assert abs(Decimal(li) - truth) <= Decimal(bi), mi
        assert bi <= 1e-14 * (1.0 + loss.c * abs(mi)), mi


# ---- the gradient bound -----------------------------------------------------------------------


def _exact_gradient_norm(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    w: FloatArray,
    mu: Fraction,
    b: FloatArray,
    centre: FloatArray | None,
    eta: float,
) -> float:
    """‖∇J̃_b(w)‖ in 50-digit decimal arithmetic (rows, w, b exact doubles)."""
    n, d = X.shape
    grad = [Decimal(0)] * d
    for i in range(n):
        z = sum((Decimal(X[i, j]) * Decimal(w[j]) for j in range(d)), Decimal(0))
        m = Decimal(y[i]) * z
        if isinstance(loss, LogisticLoss):
            lp = -1 / (1 + CTX.exp(m))
        else:
            assert isinstance(loss, HuberLoss)
            h = Decimal(loss.h)
            lp = Decimal(0) if m > 1 + h else Decimal(-1) if m < 1 - h else -(1 + h - m) / (2 * h)
        for j in range(d):
            grad[j] += lp * Decimal(y[i]) * Decimal(X[i, j])
    mu_dec = Decimal(mu.numerator) / Decimal(mu.denominator)
    total = Decimal(0)
    for j in range(d):
        g = grad[j] / n + mu_dec * Decimal(w[j]) + Decimal(b[j]) / n
        if centre is not None:
            g -= Decimal(eta) * Decimal(centre[j])
        total += g * g
    return float(CTX.sqrt(total))


@pytest.mark.parametrize("loss", [LogisticLoss(), HuberLoss(h=0.5)])
@pytest.mark.parametrize("with_centre", [False, True])
def test_gradient_bound_is_an_upper_bound_and_tight(loss: Loss, with_centre: bool) -> None:
    X, y = _data(60, 4, seed=2)
    rng = np.random.default_rng(3)
    lam, extra, eta = 0.01, 0.003, (0.5 if with_centre else 0.0)
    centre = rng.normal(size=4) if with_centre else None
    b_hat = rng.normal(scale=20.0, size=4)
    radius = 1e-13
    noise = lattice.Enclosure(value=b_hat, radius=radius)
    mu = Fraction(lam) + Fraction(extra) + Fraction(eta)
    solved = solve_erm(
        X,
        y,
        loss,
        regularization=lam,
        linear=b_hat,
        extra_regularization=extra,
        centre=centre,
        centre_weight=eta,
        tol=1e-14,
    ).coef
    for w in (solved, solved + 1e-6 * rng.normal(size=4), rng.normal(size=4)):
        bound = certified.gradient_bound(
            X,
            y,
            loss,
            w,
            regularization=lam,
            extra_regularization=extra,
            noise=noise,
            centre=centre,
            centre_weight=eta,
        )
        exact = _exact_gradient_norm(X, y, loss, w, mu, b_hat, centre, eta)
        # the real b is anywhere within `radius` of b̂: the worst case moves the norm by radius/n
        assert exact + radius / 60 <= bound
        assert bound <= exact + radius / 60 + 1e-13


# ---- the public numbers -----------------------------------------------------------------------


def test_split_epsilon_never_exceeds_the_budget() -> None:
    rng = np.random.default_rng(4)
    for eps in np.concatenate([10.0 ** rng.uniform(-6, 3, 2000), [0.1, 0.3, 1.0, 1000.0]]):
        for share in (1e-5, 0.0018, 0.3, 0.5):
            objective, release = certified.split_epsilon(float(eps), share)
            assert Fraction(objective) + Fraction(release) <= Fraction(float(eps))
            assert objective > 0.0
            assert release > 0.0
            assert release == float(eps) * share


def test_plan_is_the_hand_derived_one() -> None:
    # n = 1000, d = 4, logistic c = 1/4, μ = 0.01, L = 0.5, ε_r = 0.001:
    # μ₋ = 0.01(1 − 4u); γ_4 = 4u/(1 − 4u)·(1 + 2⁻²⁰)
    # τ = 1.5·(1e-10 + 8·1004u + 4·0.25·γ_4/μ₋) = 1.5·(1e-10 + 8.9173e-13 + 4.4409e-14)
    #   = 1.514043e-10; r = τ/μ₋ = 1.514043e-8; β_r = ε_r/(2r) = 33023.5
    got = certified.plan(
        n=1000, d=4, c=0.25, strong_convexity=0.01, linear_bound=0.5, epsilon=0.001
    )
    gamma4 = 4 * U / (1 - 4 * U) * (1 + 2.0**-20)
    mu = 0.01 * (1 - 4 * U)
    tau = 1.5 * (1e-10 + 8 * 1004 * U + 4 * 0.25 * gamma4 / mu)
    assert got.tolerance == pytest.approx(tau, rel=1e-14)
    assert got.tolerance == pytest.approx(1.514043e-10, rel=1e-6)
    assert got.distance == pytest.approx(tau / 0.01, rel=1e-12)
    assert got.beta == pytest.approx(0.001 / (2 * tau / 0.01), rel=1e-12)
    assert got.beta * 2.0 * got.distance <= 0.001  # β_r·2r ≤ ε_r
    assert got.expected_noise_norm == pytest.approx(4 / got.beta)
    # the record's details carry the plan's public inputs and what was derived from them
    shown = got.details()["certified_release"]
    assert (shown["n"], shown["d"], shown["c"]) == (1000, 4, 0.25)
    assert (shown["strong_convexity"], shown["linear_bound"]) == (0.01, 0.5)
    assert shown["certificate_tolerance"] == got.tolerance
    assert shown["distance_to_exact_minimiser_bound"] == got.distance
    assert shown["beta"] == got.beta


def test_release_share_is_the_hand_derived_one() -> None:
    # n = 60, d = 3: τ₀ = 1e-10 + 8·63u = 1.000560e-10, √(nτ₀) = 7.74813e-5,
    # κ = 7.74753e-5; Adult-sized n = 30 162, d = 106: τ₀ = 1e-10 + 8(4096 + 106)u
    # = 1.0373213e-10 (blocks of 4096 rows), √(nτ₀) = 1.7688325e-3, κ = 1.7657092e-3
    tau0 = certified.base_tolerance(60, 3)
    assert tau0 == pytest.approx(1e-10 + 8 * 63 * U, rel=1e-15)
    assert certified.release_share(60, tau0) == pytest.approx(7.74753e-5, rel=1e-5)
    share = certified.release_share(30162, certified.base_tolerance(30162, 106))
    assert share == pytest.approx(1.7657092e-3, rel=1e-7)
    assert certified.release_share(10**12, 1.0) == 0.5  # capped


# ---- the release ------------------------------------------------------------------------------


def test_release_noise_is_the_hand_derived_law() -> None:
    """o − θ, θ the (tightly solved) minimiser, is the release noise Z ∝ exp(−β_r‖z‖) up to
    the certified distance r: KS against Gamma(d, 1/β_r) with β_r derived by hand, which
    rejects half and twice the noise."""
    X, y = _data(80, 3, seed=5)
    loss = LogisticLoss()
    b_hat = np.array([3.0, -1.0, 2.0])
    noise = lattice.Enclosure(value=b_hat, radius=0.0)
    release = certified.plan(
        n=80, d=3, c=0.25, strong_convexity=0.02, linear_bound=0.1, epsilon=1e-3
    )
    # hand: τ = 1.1·(1e-10 + 8·83u + 4·¼·γ₃/μ₋) = 1.1·(1e-10 + 7.372e-14 + 1.665e-14)
    # = 1.100994e-10, r = τ/0.02 = 5.50497e-9, β_r = 1e-3/(2r) = 90827
    assert release.beta == pytest.approx(90827, rel=1e-5)
    theta = solve_erm(X, y, loss, regularization=0.02, linear=b_hat, tol=1e-15).coef
    rng = np.random.default_rng(6)
    norms = np.array(
        [
            np.linalg.norm(
                certified.release_minimiser(
                    X,
                    y,
                    loss,
                    regularization=0.02,
                    extra_regularization=0.0,
                    noise=noise,
                    release=release,
                    rng=rng,
                )
                - theta
            )
            for _ in range(600)
        ]
    )
    gamma_norms_fit_only_at_the_right_scale(norms, 3, 90827)
    # every release is a grid point
    one = certified.release_minimiser(
        X,
        y,
        loss,
        regularization=0.02,
        extra_regularization=0.0,
        noise=noise,
        release=release,
        rng=rng,
    )
    assert np.array_equal(one, np.round(one * 2.0**32) * 2.0**-32)


def test_nothing_is_released_without_the_certificate(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(50, 3, seed=7)
    calls: list[float] = []

    def sloppy(*args: object, **kwargs: object) -> SolverResult:
        calls.append(float(kwargs["tol"]))  # type: ignore[arg-type]
        return SolverResult(
            coef=np.array([0.3, 0.0, 0.0]),
            iterations=1,
            gradient_norm=0.0,
            gradient_tolerance=1.0,
            strong_convexity=0.1,
            method="test",
        )

    monkeypatch.setattr(certified, "solve_erm", sloppy)
    release = certified.plan(
        n=50, d=3, c=0.25, strong_convexity=0.1, linear_bound=0.0, epsilon=0.01
    )
    with pytest.raises(ConvergenceError, match="no model was released"):
        certified.release_minimiser(
            X,
            y,
            LogisticLoss(),
            regularization=0.1,
            extra_regularization=0.0,
            noise=lattice.Enclosure(value=np.zeros(3), radius=0.0),
            release=release,
            rng=None,
        )
    assert len(calls) == 2
    assert calls[1] == calls[0] / 64.0


def test_solver_target_leaves_room_for_the_rounding_bounds() -> None:
    """On Adult-sized data the certificate is met at the first solve: the bound is far
    below τ (checked through release_minimiser's first attempt)."""
    X, y = _data(20000, 20, seed=8)
    loss = LogisticLoss()
    enclosure = lattice.norm_exponential_enclosure(20, beta=0.05, rng=np.random.default_rng(9))
    release = certified.plan(
        n=20000,
        d=20,
        c=0.25,
        strong_convexity=1e-3,
        linear_bound=certified.norm_exponential_quantile(20, 0.05) / 20000,
        epsilon=1e-3,
    )
    tol = release.tolerance * 0.25 / (1 + float(np.linalg.norm(enclosure.value / 20000)))
    w = solve_erm(X, y, loss, regularization=1e-3, linear=enclosure.value, tol=tol).coef
    bound = certified.gradient_bound(
        X, y, loss, w, regularization=1e-3, extra_regularization=0.0, noise=enclosure
    )
    assert bound <= 0.5 * release.tolerance


def test_blocked_gradient_sum_bound_holds_beyond_one_block() -> None:
    """Above 4096 rows the sum is taken in BLAS blocks and combined by compensated summation;
    the bound (γ₄₀₉₆, not γ_n) still contains the exact sum, checked in decimal arithmetic."""
    X, y = _data(9000, 2, seed=10)
    w = np.array([0.7, -1.3])
    t, bound = certified.loss_gradient_sum(X, y, LogisticLoss(), w)
    exact = [Decimal(0), Decimal(0)]
    for i in range(9000):
        z = Decimal(X[i, 0]) * Decimal(w[0]) + Decimal(X[i, 1]) * Decimal(w[1])
        lp = -1 / (1 + CTX.exp(Decimal(y[i]) * z))
        for j in range(2):
            exact[j] += lp * Decimal(y[i]) * Decimal(X[i, j])
    distance = math.sqrt(sum(float(Decimal(t[j]) - exact[j]) ** 2 for j in range(2)))
    assert distance <= bound
    # the bound is γ₄₀₉₆·Σ|s_i| plus terms of order u: half what γ₉₀₀₀·Σ|s_i| would be
    slopes = np.abs(1.0 / (1.0 + np.exp(y * (X @ w))))
    assert bound <= 1.01 * 4096 * U * float(slopes.sum()) + 100 * U * 9000


# ---- the certificate from the solver's own last pass -----------------------------------------


@pytest.mark.parametrize("loss", [LogisticLoss(), HuberLoss(h=0.5)])
def test_bound_from_the_solvers_last_pass_holds_and_matches_the_full_one(loss: Loss) -> None:
    """The solver's last float64 pass (FinalPass) gives a proved bound without another pass
    over X: its margins are within their stated error of the exact ones (50-digit decimals),
    and the bound contains the exact gradient norm and agrees with :func:`gradient_bound`."""
    X, y = _data(300, 4, seed=11)
    rng = np.random.default_rng(12)
    b_hat = rng.normal(scale=30.0, size=4)
    noise = lattice.Enclosure(value=b_hat, radius=1e-13)
    result = solve_erm(
        X, y, loss, regularization=0.02, linear=b_hat, extra_regularization=0.001, tol=1e-12
    )
    final = result.final_pass
    assert final is not None
    w = result.coef
    for i in range(300):
        exact = Decimal(y[i]) * sum(
            (Decimal(X[i, j]) * Decimal(w[j]) for j in range(4)), Decimal(0)
        )
        assert abs(Decimal(final.margins[i]) - exact) <= Decimal(final.margin_error)
    from_pass = certified.gradient_bound_from_pass(
        final, loss, w, n=300, regularization=0.02, extra_regularization=0.001, noise=noise
    )
    full = certified.gradient_bound(
        X, y, loss, w, regularization=0.02, extra_regularization=0.001, noise=noise
    )
    exact_norm = _exact_gradient_norm(
        X, y, loss, w, Fraction(0.02) + Fraction(0.001), b_hat, None, 0.0
    )
    assert exact_norm + 1e-13 / 300 <= from_pass
    assert from_pass == pytest.approx(full, abs=1e-13)


def test_the_last_pass_after_newton_steps_on_adult_sized_data() -> None:
    """With the float32 phase and incremental float64 steps (margins updated, not
    recomputed), the pass's bound stays within 5e-13 of the full two-pass bound (its margins
    carry the steps' rounding too) and far below a certified release's τ."""
    X, y = _data(20000, 20, seed=13)
    loss = LogisticLoss()
    enclosure = lattice.norm_exponential_enclosure(20, beta=0.05, rng=np.random.default_rng(14))
    result = solve_erm(X, y, loss, regularization=1e-3, linear=enclosure.value, tol=1e-11)
    assert result.final_pass is not None
    assert result.iterations >= 1
    from_pass = certified.gradient_bound_from_pass(
        result.final_pass,
        loss,
        result.coef,
        n=20000,
        regularization=1e-3,
        extra_regularization=0.0,
        noise=enclosure,
    )
    full = certified.gradient_bound(
        X, y, loss, result.coef, regularization=1e-3, extra_regularization=0.0, noise=enclosure
    )
    assert from_pass == pytest.approx(full, abs=5e-13)
    assert from_pass <= 1e-10


def test_objective_perturbation_release_noise_is_hand_derived() -> None:
    """The release noise an objective-perturbation calibration records, by hand: n = 1000,
    d = 4, logistic (c = 1/4), λ = 0.01, ε = 1. ε₁ = 0.99968246627 (tests/unit/dp/_budget);
    ε_J = ln 1.025 ≤ ε₁/2 so Δ = 0, β = (ε₁ − ln 1.025)/2 = 0.48749492684; the public noise
    bound L = (d + 10√d + 10)/β/n = 34/0.48749492684/1000 = 0.069745; μ₋ = 0.01(1 − 4u);
    τ = (1 + L)(1e-10 + 8·1004u + γ₄/μ₋) = 1.0799e-10; r = τ/μ₋; β_r = ε_r/(2r)."""
    cal = dp_calibrate("objective_perturbation", n=1000, d=4, epsilon=1.0, regularization=0.01)
    got = cal.details["certified_release"]
    eps_1 = objective_budget(1.0, 1000, 4)
    eps_r = release_budget(1.0, 1000, 4)
    beta = (eps_1 - math.log1p(0.025)) / 2.0
    bound = (4 + 10 * 2 + 10) / beta / 1000
    mu = 0.01 * (1 - 4 * U)
    gamma4 = 4 * U / (1 - 4 * U) * (1 + 2.0**-20)
    tau = (1 + bound) * (1e-10 + 8 * 1004 * U + 4 * 0.25 * gamma4 / mu)
    r = tau / mu
    assert got["certificate_tolerance"] == pytest.approx(tau, rel=1e-12)
    assert got["certificate_tolerance"] == pytest.approx(1.0799e-10, rel=1e-4)
    assert got["distance_to_exact_minimiser_bound"] == pytest.approx(r, rel=1e-12)
    assert got["beta"] == pytest.approx(eps_r / (2 * r), rel=1e-12)
    assert got["epsilon"] == eps_r
    assert got["beta"] * 2 * got["distance_to_exact_minimiser_bound"] <= eps_r
