"""Output perturbation and the noisy average stop on the *proved* gradient bound (issue 25 §4):
the centre they release has a certified ‖∇J‖ ≤ τ, the solver is asked for τ/4, and when the
bound cannot be met nothing is released."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp import calibrate, make_problem
from service.dp.core.base import Problem
from service.dp.core.losses import HuberLoss, LogisticLoss, Loss
from service.dp.core.validation import PrivacyParameterError
from service.dp.federated import federated_calibrate, federated_fit, noisy_average
from service.dp.mechanisms.output_perturbation import MECHANISM as OUTPUT_PERTURBATION
from service.dp.noise import lattice
from service.dp.optimize import certified, certified_failure
from service.dp.optimize.solvers import ConvergenceError, SolverResult, solve_erm
from tests.unit.dp.federated._data import make_sites

FloatArray = NDArray[np.float64]


def _data(n: int, d: int, seed: int) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) * (1.0 + 1e-12)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _proved(X: FloatArray, y: FloatArray, loss: Loss, w: FloatArray, lam: float) -> float:
    return certified.gradient_bound(
        X,
        y,
        loss,
        w,
        regularization=lam,
        extra_regularization=0.0,
        noise=lattice.Enclosure(value=np.zeros(X.shape[1]), radius=0.0),
    )


class _Spy:
    """Records the centres handed to the exact lattice release, and the solver's targets."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.centres: list[FloatArray] = []
        self.tols: list[float] = []
        release = lattice.norm_exponential_release
        solve = solve_erm

        def spy_release(centre: FloatArray, **kwargs: Any) -> FloatArray:
            self.centres.append(np.array(centre, copy=True))
            return release(centre, **kwargs)

        def spy_solve(*args: Any, **kwargs: Any) -> SolverResult:
            self.tols.append(float(kwargs["tol"]))
            return solve(*args, **kwargs)

        monkeypatch.setattr(lattice, "norm_exponential_release", spy_release)
        monkeypatch.setattr(certified, "solve_erm", spy_solve)

    @staticmethod
    def never_certified(monkeypatch: pytest.MonkeyPatch) -> None:
        """A certificate that is never met (whatever the solver returns)."""

        def hopeless(*args: Any, **kwargs: Any) -> float:
            return math.inf

        monkeypatch.setattr(certified, "gradient_bound", hopeless)
        monkeypatch.setattr(certified, "gradient_bound_from_pass", hopeless)


@pytest.mark.parametrize("loss_name", ["logistic", "huber"])
def test_output_perturbation_releases_a_minimiser_with_a_proved_gradient_bound(
    monkeypatch: pytest.MonkeyPatch, loss_name: str
) -> None:
    X, y = _data(400, 5, seed=1)
    lam = 0.01
    cal = calibrate(
        "output_perturbation", n=400, d=5, epsilon=1.0, regularization=lam, loss=loss_name
    )
    tau = float(cal.details["certificate_tolerance"])
    spy = _Spy(monkeypatch)
    problem = _problem("output_perturbation", 400, 5, lam, loss_name)
    OUTPUT_PERTURBATION.run(X, y, problem, cal, rng=np.random.default_rng(2), progress=None)
    assert len(spy.centres) == 1
    loss: Loss = LogisticLoss() if loss_name == "logistic" else HuberLoss(h=0.5)
    assert _proved(X, y, loss, spy.centres[0], lam) <= tau
    assert spy.tols[0] == tau / 4.0  # the solver's own target leaves room for the rounding


def test_output_perturbation_releases_nothing_when_the_bound_is_not_met(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, y = _data(200, 3, seed=3)
    cal = calibrate("output_perturbation", n=200, d=3, epsilon=1.0, regularization=0.1)
    spy = _Spy(monkeypatch)
    _Spy.never_certified(monkeypatch)
    problem = _problem("output_perturbation", 200, 3, 0.1, "logistic")
    with pytest.raises(ConvergenceError, match="no model was released"):
        OUTPUT_PERTURBATION.run(X, y, problem, cal, rng=np.random.default_rng(4), progress=None)
    assert spy.centres == []  # the release was never reached
    tau = float(cal.details["certificate_tolerance"])
    assert spy.tols == [tau / 4.0, tau / 256.0]  # one tighter retry, then give up


def test_noisy_average_releases_the_mean_of_certified_local_minimisers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = make_sites((120, 200, 150), 4, seed=5)
    lam = 0.05
    cal = federated_calibrate(
        "noisy_average", site_sizes=(120, 200, 150), d=4, epsilon=1.0, regularization=lam
    )
    tau = float(cal.details["certificate_tolerance"])
    by_site: dict[int, FloatArray] = {}
    fit_locally = noisy_average.NoisyAverageSite.local_minimiser

    def spy_local(self: noisy_average.NoisyAverageSite, *args: Any) -> FloatArray:
        out = fit_locally(self, *args)
        by_site[self.index] = out  # the sites are asked at once: keyed, not in call order
        return out

    monkeypatch.setattr(noisy_average.NoisyAverageSite, "local_minimiser", spy_local)
    spy = _Spy(monkeypatch)
    federated_fit(
        data, "noisy_average", epsilon=1.0, regularization=lam, rng=np.random.default_rng(6)
    )
    local = [by_site[k] for k in range(3)]
    for (X, y), w in zip(data, local, strict=True):
        assert _proved(X, y, LogisticLoss(), w, lam) <= tau
    assert spy.tols == [tau / 4.0] * 3
    assert len(spy.centres) == 1
    np.testing.assert_array_equal(spy.centres[0], (local[0] + local[1] + local[2]) / 3)


def test_noisy_average_releases_nothing_when_a_site_is_not_certified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = make_sites((60, 80), 3, seed=7)
    spy = _Spy(monkeypatch)
    _Spy.never_certified(monkeypatch)
    with pytest.raises(ConvergenceError, match="site 0's local minimiser could not be certified"):
        federated_fit(
            data, "noisy_average", epsilon=1.0, regularization=0.1, rng=np.random.default_rng(8)
        )
    assert spy.centres == []
    # every site is asked at once (site_round), and each tries its τ/4 and one tighter retry
    # (τ/256); the failure named is the lowest site's, and no centre is released
    assert len(spy.tols) == 4
    first, retry = max(spy.tols), min(spy.tols)
    assert retry == pytest.approx(first / 64.0, rel=1e-12)
    assert sorted(spy.tols) == [retry, retry, first, first]


def _problem(mechanism: str, n: int, d: int, lam: float, loss: str) -> Problem:
    return make_problem(
        mechanism, n=n, d=d, epsilon=1.0, delta=0.0, loss=loss, regularization=lam, params={}
    )[1]


# ---- when the certificate can fail ----------------------------------------------------------

U = 2.0**-53


def test_certificate_floor_is_the_hand_derived_one() -> None:
    """Logistic, n = 100 (one block), d = 4, μ = 0.1, b = 0: s = 1, W = 10 (up to u).
    ē = 1.5γ₂₇ + 2⁻⁵⁷ + 1.5·0.35u + 2.01u = 40.5 + 0.0625 + 0.525 + 2.01 = 43.1u;
    loss sum/n: γ₁₀₀ + ē + cγ₄W = 100u + 43.1u + 0.25·4u·10 = 153.1u;
    tail: u·1.01 + (2u + γ₂)μW + u‖p‖ + 2u‖p‖ with ‖p‖ = 1.01 + μW = 2.01:
    1.01u + 4u + 2.01u + 4.02u = 11.04u; e = 164.14u;
    F = (c + μ)u·s/μ + 2e = 3.5u + 328.28u = 331.8u = 3.684e-14."""
    got = certified_failure.certificate_floor(
        n=100, d=4, loss=LogisticLoss(), strong_convexity=0.1, noise_norm=0.0
    )
    assert got == pytest.approx(331.8 * U, rel=2e-3)
    assert got == pytest.approx(3.684e-14, rel=2e-3)


@pytest.mark.parametrize("loss", [LogisticLoss(), HuberLoss(h=0.5)])
@pytest.mark.parametrize("scale", [0.0, 5.0, 300.0])
def test_certificate_floor_bounds_the_proved_bound_near_the_minimiser(
    loss: Loss, scale: float
) -> None:
    """At a tightly solved minimiser of J + bᵀw/n, the proved bound (with the enclosure radius
    at its public maximum 2⁻³⁹‖b̂‖) stays below the public floor F(‖b̂‖/n)."""
    X, y = _data(300, 4, seed=21)
    b_hat = np.random.default_rng(22).normal(size=4) * scale
    noise = lattice.Enclosure(
        value=b_hat, radius=certified_failure.NOISE_RADIUS_RATIO * float(np.linalg.norm(b_hat))
    )
    w = solve_erm(X, y, loss, regularization=0.02, linear=b_hat, tol=1e-15).coef
    bound = certified.gradient_bound(
        X, y, loss, w, regularization=0.02, extra_regularization=0.0, noise=noise
    )
    floor = certified_failure.certificate_floor(
        n=300,
        d=4,
        loss=loss,
        strong_convexity=0.02,
        noise_norm=float(np.linalg.norm(b_hat)) / 300,
    )
    assert bound <= floor


def test_feasible_noise_norm_is_where_the_floor_meets_tau() -> None:
    terms: dict[str, Any] = {"n": 1000, "d": 4, "loss": LogisticLoss(), "strong_convexity": 0.01}
    tau = certified.tolerance(n=1000, d=4, c=0.25, strong_convexity=0.01, linear_bound=0.07)
    q = certified_failure.feasible_noise_norm(tolerance=tau, **terms)
    assert certified_failure.certificate_floor(noise_norm=q, **terms) <= tau
    assert certified_failure.certificate_floor(noise_norm=q * (1 + 1e-6), **terms) > tau
    # F is affine in q
    f0, f1, f2 = (
        certified_failure.certificate_floor(noise_norm=x, **terms) for x in (0.0, q, 2 * q)
    )
    assert f2 - f1 == pytest.approx(f1 - f0, rel=1e-9)
    # no room at all: −1
    assert certified_failure.feasible_noise_norm(tolerance=f0 / 2, **terms) == -1.0


def test_tail_bounds_are_the_hand_derived_ones() -> None:
    # d = 1: ‖b‖ ~ Exp(β), P[‖b‖ > t] = e^{−βt} exactly: log₁₀ = −βt/ln 10 (underflows as a
    # probability at βt = 5000, so the log-space bound is used; it is exact for d = 1)
    assert certified_failure.norm_exponential_tail_log10(1, 2.0, 2500.0) == pytest.approx(
        -5000 / math.log(10), abs=1e-6
    )
    # d = 2: Q(2, x) = (1 + x)e^{−x}; at x = 10: 11e^{−10} = 4.994e-4
    assert 10.0 ** certified_failure.norm_exponential_tail_log10(2, 1.0, 10.0) == pytest.approx(
        11 * math.exp(-10), rel=1e-8
    )
    # d = 2, x = 3000: the bound ln(x²/(x − 1)) − x is above ln(1 + x) − x by ln(1 + 1/(x² − 1))
    exact = (math.log(3001.0) - 3000.0) / math.log(10)
    got = certified_failure.norm_exponential_tail_log10(2, 1.0, 3000.0)
    assert exact <= got <= exact + 1e-6
    # Gaussian: exp(−(t/σ − √d)²/2): σ = 1, d = 4, t = 12 → e^{−50}
    assert certified_failure.gaussian_tail_log10(4, 1.0, 12.0) == pytest.approx(-50 / math.log(10))
    assert certified_failure.gaussian_tail_log10(4, 1.0, 1.0) == 0.0
    assert certified_failure.probability_text(math.log10(3.2e-20)) == "≤ 3.2e-20"
    assert certified_failure.probability_text(-4342.3) == "≤ 10^-4342"


def test_enclosure_radius_is_at_most_2_to_the_minus_39_of_the_noise() -> None:
    rng = np.random.default_rng(31)
    for d in (1, 2, 5):
        for _ in range(300):
            got = lattice.norm_exponential_enclosure(d, beta=3.0, rng=rng)
            assert got.radius <= certified_failure.NOISE_RADIUS_RATIO * float(
                np.linalg.norm(got.value)
            )
            got = lattice.gaussian_enclosure(d, sigma=2.0, rng=rng)
            assert got.radius <= certified_failure.NOISE_RADIUS_RATIO * float(
                np.linalg.norm(got.value)
            )


def test_objective_perturbation_records_when_its_certificate_can_fail() -> None:
    """n = 1000, d = 4, λ = 0.01, ε = 1 (logistic): a certifiable point exists unless
    ‖b‖ > T, and P[‖b‖ > T] = Q(4, βT) is recorded; T is hundreds of times the public
    quantile (d + 10√d + 10)/β = 34/β behind τ."""
    cal = calibrate("objective_perturbation", n=1000, d=4, epsilon=1.0, regularization=0.01)
    got = cal.details["certificate_failure"]
    beta = cal.details["beta"]
    assert got["noise_norm_threshold"] > 100 * 34 / beta
    assert got["log10_probability_bound"] == pytest.approx(
        certified_failure.norm_exponential_tail_log10(4, beta, got["noise_norm_threshold"])
    )
    assert got["log10_probability_bound"] < -1000
    assert got["probability"].startswith("≤ 10^-")
    assert "not charged as δ" in cal.composition
    assert cal.delta == 0.0


def test_objective_perturbation_refuses_a_request_it_cannot_certify() -> None:
    """Huber, d = 1, λ = 1e-8, ε = 100 (Δ = 0): the Huber derivative's rounding at large
    coefficients, 4u·c‖w‖ per row with ‖w‖ up to 1/λ, is beyond τ's 4cγ₁/λ: refused before
    any charge (PrivacyParameterError: a 422)."""
    with pytest.raises(PrivacyParameterError, match="no minimiser can be certified"):
        calibrate(
            "objective_perturbation",
            n=1000,
            d=1,
            epsilon=100.0,
            regularization=1e-8,
            loss="huber",
        )


def test_gaussian_objective_perturbation_records_its_gaussian_tail() -> None:
    """σ from the calibration; P[‖b‖ > T] ≤ exp(−(T/σ − √d)²/2) (Gaussian concentration)."""
    cal = calibrate(
        "gaussian_objective_perturbation",
        n=1000,
        d=4,
        epsilon=1.0,
        delta=1e-6,
        regularization=0.01,
    )
    got = cal.details["certificate_failure"]
    sigma = cal.details["sigma"]
    excess = got["noise_norm_threshold"] / sigma - 2.0
    assert got["log10_probability_bound"] == pytest.approx(-(excess**2) / 2 / math.log(10))
    assert got["log10_probability_bound"] < -1000
    assert "not charged as δ" in cal.composition


@pytest.mark.parametrize(
    ("mechanism", "delta"),
    [
        ("objective_perturbation", 0.0),
        ("generalized_objective_perturbation", 0.0),
        ("generalized_objective_perturbation", 1e-6),
        ("gaussian_objective_perturbation", 1e-6),
    ],
)
def test_every_accepted_objective_perturbation_request_fails_with_probability_below_1e_45(
    mechanism: str, delta: float
) -> None:
    refused = 0
    for loss in ("logistic", "huber"):
        for d in (1, 3, 10, 100):
            for lam in (1e-8, 1e-5, 1e-2, 1.0):
                for n in (10, 1000, 100_000):
                    for eps in (1e-3, 1.0, 100.0):
                        try:
                            cal = calibrate(
                                mechanism,
                                n=n,
                                d=d,
                                epsilon=eps,
                                delta=delta,
                                regularization=lam,
                                loss=loss,
                            )
                        except PrivacyParameterError:
                            refused += 1
                            assert loss == "huber"
                            assert d <= 3
                            continue
                        assert cal.details["certificate_failure"]["log10_probability_bound"] < -45
    assert refused < 30


def test_output_perturbation_tolerance_covers_twice_the_floor() -> None:
    """Huber, d = 1, λ = 1e-6: the floor F (its Huber term 8u·c/λ) exceeds τ₀/2, so
    τ = 2F; a logistic case with d = 5, λ = 0.01 keeps τ₀ (F ≈ 0.06τ₀)."""
    cal = calibrate(
        "output_perturbation", n=300, d=1, epsilon=1.0, regularization=1e-6, loss="huber"
    )
    floor = certified_failure.certificate_floor(
        n=300, d=1, loss=HuberLoss(h=0.5), strong_convexity=1e-6, noise_norm=0.0
    )
    base = certified.tolerance(n=300, d=1, c=1.0, strong_convexity=1e-6, linear_bound=0.0)
    assert floor > base / 2
    assert cal.details["certificate_tolerance"] == 2 * floor
    cal = calibrate("output_perturbation", n=1000, d=5, epsilon=1.0, regularization=0.01)
    assert cal.details["certificate_floor"] < 0.1 * cal.details["certificate_tolerance"]
    X, y = _data(300, 1, seed=41)
    problem = _problem("output_perturbation", 300, 1, 1e-6, "huber")
    cal = calibrate(
        "output_perturbation", n=300, d=1, epsilon=1.0, regularization=1e-6, loss="huber"
    )
    OUTPUT_PERTURBATION.run(X, y, problem, cal, rng=np.random.default_rng(42), progress=None)
