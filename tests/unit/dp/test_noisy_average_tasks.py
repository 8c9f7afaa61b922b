"""noisy_average on multi-class and numeric labels (issue 29): the hand-derived calibration
S_i = (2L/(n_i λ) + 2τ/λ)/K + 2ρ with L = √2 (multinomial, noise in ℝ^{dm}) or L = h (Huber
residual), τ the task's certificate tolerance; the release is the average of the sites' exact
fits plus noise whose norm follows Gamma(D, 1/β) (half and twice the scale rejected); the
refusals (squared loss, a loss the task does not take, PSGD and ADMM) name their reason."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp.core.plan import PlanMismatchError, plan_from_json, plan_to_json
from service.dp.core.regression_losses import RegressionHuberLoss
from service.dp.core.released import MulticlassModel
from service.dp.core.validation import PrivacyParameterError
from service.dp.federated import TASK_REFUSALS, federated_calibrate, federated_fit
from service.dp.noise import lattice
from service.dp.optimize import multinomial, regression
from service.dp.optimize.regression import minimize_regression
from service.dp.optimize.solvers import ConvergenceError
from tests.unit.dp._laws import gamma_norms_fit_only_at_the_right_scale

FloatArray = NDArray[np.float64]

U = 2.0**-53
KAPPA = 1 + 2.0**-20
SQRT2 = math.sqrt(2.0)


def _gamma(k: int) -> float:
    return k * U / (1 - k * U) * KAPPA


def _rows(rng: np.random.Generator, n: int, d: int) -> FloatArray:
    X = rng.normal(size=(n, d))
    out: FloatArray = X / np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    return out


def multiclass_sites(
    sizes: tuple[int, ...], d: int, classes: int, seed: int
) -> list[tuple[FloatArray, FloatArray]]:
    """Sites whose class follows the largest of the first ``classes`` scores of x (noisy)."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(classes, d))
    out = []
    for n in sizes:
        X = _rows(rng, n, d)
        y = np.argmax(X @ W.T + 0.5 * rng.normal(size=(n, classes)), axis=1).astype(np.float64)
        out.append((X, y))
    return out


def regression_sites(
    sizes: tuple[int, ...], d: int, seed: int
) -> list[tuple[FloatArray, FloatArray]]:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d) / math.sqrt(d)
    return [
        (X, np.clip(X @ w + 0.1 * rng.normal(size=n), -1.0, 1.0))
        for n in sizes
        for X in (_rows(rng, n, d),)
    ]


# ---- calibration by hand -----------------------------------------------------------------------


def test_multiclass_calibration_by_hand() -> None:
    # m = 5 classes, d = 4: D = 20. τ = 1e-10 + 8(4096 + 20)u + 4·½·γ₂₀/λ (the multinomial
    # certificate, c = ½ in dimension dm) = 1.0374456e-10 at λ = 0.05;
    # ρ = (γ₂ + u(1 + γ₂))(√2 + τ)/λ·κ ≈ 3u·28.28 = 9.42e-15;
    # S = (2√2/(300·0.05) + 2τ/λ)/3 + 2ρ = 0.188562/3 + 1.38e-9 = 0.0628539375;
    # β = 2/S = 31.8198045; ε_i = β·S_i ≈ 2·300/n_i: 2, 1.2, 0.75
    sizes, lam, eps, d, m = (300, 500, 800), 0.05, 2.0, 4, 5
    cal = federated_calibrate(
        "noisy_average",
        site_sizes=sizes,
        d=d,
        epsilon=eps,
        regularization=lam,
        task="multiclass",
        n_classes=m,
    )
    tau = 1e-10 + 8 * (4096 + d * m) * U + 4 * 0.5 * _gamma(d * m) / lam
    rho = (_gamma(2) + U * (1 + _gamma(2))) * (SQRT2 + tau) / lam * KAPPA
    sensitivity = (2 * SQRT2 / (300 * lam) + 2 * tau / lam) / 3 + 2 * rho
    details = cal.details
    assert details["certificate_tolerance"] == pytest.approx(tau, rel=1e-14)
    assert details["certificate_tolerance"] == pytest.approx(1.0374456e-10, rel=1e-7)
    assert details["mean_rounding_bound"] == pytest.approx(rho, rel=1e-12)
    assert details["sensitivity"] == pytest.approx(sensitivity, rel=1e-13)
    assert details["sensitivity"] == pytest.approx(0.0628539375, rel=1e-9)
    assert details["beta"] == pytest.approx(eps / sensitivity, rel=1e-13)
    assert details["beta"] == pytest.approx(31.8198045, rel=1e-8)
    assert details["lipschitz"] == SQRT2
    assert details["noise_dimension"] == d * m == 20
    assert details["noise_norm_distribution"].startswith("Gamma(shape=20,")
    assert details["expected_noise_norm"] == pytest.approx(20 / details["beta"], rel=1e-12)
    assert (details["task"], details["n_classes"]) == ("multiclass", 5)
    assert [c.epsilon for c in cal.site_costs] == pytest.approx((2.0, 1.2, 0.75), rel=1e-7)
    # β·S_i ≤ ε_i in exact arithmetic (fl(√2) ≥ √2 is the L used)
    rho_exact = Fraction(details["mean_rounding_bound"])
    for n, cost in zip(sizes, cal.site_costs, strict=True):
        s_i = (2 * Fraction(SQRT2) / (n * Fraction(lam)) + 2 * Fraction(tau) / Fraction(lam)) / 3
        assert Fraction(details["beta"]) * (s_i + 2 * rho_exact) <= Fraction(cost.epsilon)
    json.dumps(details, allow_nan=False)


def test_regression_calibration_by_hand() -> None:
    # Huber h = 0.25, d = 6, λ = 0.1: τ = 1e-10 + 8(4096 + 6)u + 4·1·γ₆/λ (the regression
    # certificate, c = 1) = 1.0366995e-10; ρ = (γ₁ + u(1 + γ₁))(h + τ)/λ·κ = 5.55e-16;
    # S = (2·0.25/(200·0.1) + 2τ/λ)/2 + 2ρ = 0.0125 + 1.04e-9 = 0.012500001037; β = 1/S
    # = 79.9999934; ε_i = 1, 0.5
    sizes, lam, d, h = (200, 400), 0.1, 6, 0.25
    cal = federated_calibrate(
        "noisy_average",
        site_sizes=sizes,
        d=d,
        epsilon=1.0,
        loss="huber",
        h=h,
        regularization=lam,
        task="regression",
    )
    tau = 1e-10 + 8 * (4096 + d) * U + 4 * 1.0 * _gamma(d) / lam
    rho = (_gamma(1) + U * (1 + _gamma(1))) * (h + tau) / lam * KAPPA
    sensitivity = (2 * h / (200 * lam) + 2 * tau / lam) / 2 + 2 * rho
    details = cal.details
    assert details["certificate_tolerance"] == pytest.approx(tau, rel=1e-14)
    assert details["mean_rounding_bound"] == pytest.approx(rho, rel=1e-12)
    assert details["sensitivity"] == pytest.approx(sensitivity, rel=1e-13)
    assert details["sensitivity"] == pytest.approx(0.012500001037, rel=1e-10)
    assert details["beta"] == pytest.approx(79.9999934, rel=1e-8)
    assert details["lipschitz"] == h
    assert details["huber_h"] == h
    assert "noise_dimension" not in details
    assert details["noise_norm_distribution"].startswith("Gamma(shape=6,")
    assert (details["task"], details["n_classes"]) == ("regression", 1)
    assert [c.epsilon for c in cal.site_costs] == pytest.approx((1.0, 0.5), rel=1e-7)
    assert "2L (L = 0.25)" in cal.composition


def test_binary_calibration_is_unchanged_by_the_tasks() -> None:
    # the binary record has no task fields and L = 1 (tests/unit/dp/federated has its numbers)
    cal = federated_calibrate(
        "noisy_average", site_sizes=(300, 500), d=3, epsilon=1.0, regularization=0.05
    )
    assert cal.details["lipschitz"] == 1.0
    assert not {"task", "n_classes", "noise_dimension"} & set(cal.details)


# ---- the release -------------------------------------------------------------------------------


def _multiclass_mean(sites: list[tuple[FloatArray, FloatArray]], m: int, lam: float) -> FloatArray:
    fits = [multinomial.minimise(X, y, m, ridge=lam, tol=1e-12) for X, y in sites]
    mean: FloatArray = np.mean(fits, axis=0)
    return mean


def _regression_mean(
    sites: list[tuple[FloatArray, FloatArray]], h: float, lam: float
) -> FloatArray:
    loss = RegressionHuberLoss(h=h)
    fits = [minimize_regression(X, y, loss, regularization=lam, tol=1e-12) for X, y in sites]
    mean: FloatArray = np.mean(fits, axis=0)
    return mean


def test_multiclass_release_is_the_average_of_the_sites_fits() -> None:
    sites = multiclass_sites((120, 200, 150), 3, 4, seed=5)
    lam = 0.1
    result = federated_fit(
        sites,
        "noisy_average",
        epsilon=1e9,  # negligible noise: the release is the average of the local fits
        regularization=lam,
        task="multiclass",
        n_classes=4,
        rng=np.random.default_rng(0),
    )
    assert isinstance(result.model, MulticlassModel)
    assert result.coef.shape == (4, 3)
    np.testing.assert_allclose(result.coef, _multiclass_mean(sites, 4, lam), atol=1e-6)
    assert result.model.to_dict()["kind"] == "multiclass"


def test_regression_release_is_the_average_of_the_sites_fits() -> None:
    sites = regression_sites((120, 200, 150), 3, seed=6)
    lam = 0.1
    result = federated_fit(
        sites,
        "noisy_average",
        epsilon=1e9,
        loss="huber",
        regularization=lam,
        task="regression",
        rng=np.random.default_rng(0),
    )
    assert result.coef.shape == (3,)
    np.testing.assert_allclose(result.coef, _regression_mean(sites, 0.5, lam), atol=1e-6)


def test_a_regression_site_that_cannot_be_certified_is_named_and_nothing_is_released(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def hopeless(*args: object, **kwargs: object) -> float:
        return math.inf

    released: list[object] = []
    monkeypatch.setattr(regression, "regression_gradient_bound", hopeless)
    monkeypatch.setattr(lattice, "norm_exponential_release", lambda *a, **k: released.append(a))
    with pytest.raises(ConvergenceError, match="site 0's local minimiser could not be certified"):
        federated_fit(
            regression_sites((120, 200, 150), 3, seed=6),
            "noisy_average",
            epsilon=1.0,
            loss="huber",
            regularization=0.1,
            task="regression",
            rng=np.random.default_rng(0),
        )
    assert released == []


def test_a_stored_multiclass_plan_runs_and_a_different_one_is_refused() -> None:
    sites = multiclass_sites((80, 90), 2, 3, seed=8)
    kwargs = {"epsilon": 1.0, "regularization": 0.1, "task": "multiclass"}
    cal = federated_calibrate(
        "noisy_average",
        site_sizes=(80, 90),
        d=2,
        n_classes=3,
        **kwargs,  # type: ignore[arg-type]
    )
    assert cal.plan is not None
    stored = plan_from_json(json.loads(json.dumps(plan_to_json(cal.plan))))
    assert stored == cal.plan
    result = federated_fit(sites, "noisy_average", n_classes=3, plan=stored, **kwargs)  # type: ignore[arg-type]
    assert result.coef.shape == (3, 2)
    other = federated_calibrate(
        "noisy_average",
        site_sizes=(80, 90),
        d=2,
        n_classes=4,
        **kwargs,  # type: ignore[arg-type]
    )
    assert other.plan is not None
    with pytest.raises(PlanMismatchError, match="n_classes"):
        federated_fit(sites, "noisy_average", n_classes=3, plan=other.plan, **kwargs)  # type: ignore[arg-type]


def _noise_norms(
    fit: list[tuple[FloatArray, FloatArray]],
    mean: FloatArray,
    runs: int,
    **kwargs: object,
) -> list[float]:
    rng = np.random.default_rng(2024)
    norms = []
    for _ in range(runs):
        result = federated_fit(fit, "noisy_average", rng=rng, **kwargs)  # type: ignore[arg-type]
        norms.append(float(np.linalg.norm(result.coef - mean)))
    return norms


@pytest.mark.statistical
@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_released_noise_norm_follows_the_derived_gamma_law(task: str) -> None:
    lam, eps = 0.5, 2.0
    if task == "multiclass":
        # m = 3 classes, d = 2: D = 6; S ≈ (2√2/(60·0.5))/3 = 0.0314270, β = 2/S ≈ 63.64
        sites = multiclass_sites((60, 90, 75), 2, 3, seed=11)
        mean = _multiclass_mean(sites, 3, lam)
        dim, big_l = 6, SQRT2
        kwargs: dict[str, object] = {"task": "multiclass", "n_classes": 3}
    else:
        # d = 3, h = 0.5: S ≈ (2·0.5/(60·0.5))/3 = 0.0111111, β = 2/S ≈ 180
        sites = regression_sites((60, 90, 75), 3, seed=12)
        mean = _regression_mean(sites, 0.5, lam)
        dim, big_l = 3, 0.5
        kwargs = {"task": "regression", "loss": "huber"}
    beta = eps / ((2 * big_l / (60 * lam)) / 3)  # τ/λ and ρ are ~1e-10 relative: negligible
    cal = federated_calibrate(
        "noisy_average",
        site_sizes=(60, 90, 75),
        d=2 if task == "multiclass" else 3,
        epsilon=eps,
        regularization=lam,
        **kwargs,  # type: ignore[arg-type]
    )
    assert cal.details["beta"] == pytest.approx(beta, rel=1e-7)
    norms = _noise_norms(sites, mean, 300, epsilon=eps, regularization=lam, **kwargs)
    # half and twice the noise are rejected: the test has power
    gamma_norms_fit_only_at_the_right_scale(norms, dim, beta)


# ---- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "loss", "reason"),
    [
        ("regression", "squared", "derivative is unbounded"),
        ("regression", "logistic", "Huber loss of the residual"),
        ("multiclass", "huber", "multinomial logistic loss"),
    ],
)
def test_a_loss_the_task_does_not_take_is_refused_with_the_reason(
    task: str, loss: str, reason: str
) -> None:
    with pytest.raises(PrivacyParameterError, match=reason) as caught:
        federated_calibrate(
            "noisy_average",
            site_sizes=(100, 100),
            d=3,
            epsilon=1.0,
            loss=loss,
            regularization=0.05,
            task=task,  # type: ignore[arg-type]
            n_classes=4,
        )
    assert repr(loss) in str(caught.value)


def test_a_multiclass_fit_needs_its_classes_and_labels_in_range() -> None:
    with pytest.raises(PrivacyParameterError, match="needs n_classes"):
        federated_calibrate(
            "noisy_average",
            site_sizes=(100, 100),
            d=3,
            epsilon=1.0,
            regularization=0.05,
            task="multiclass",
        )
    with pytest.raises(PrivacyParameterError, match="3 to"):
        federated_calibrate(
            "noisy_average",
            site_sizes=(100, 100),
            d=3,
            epsilon=1.0,
            regularization=0.05,
            task="multiclass",
            n_classes=2,
        )
    sites = multiclass_sites((40, 40), 2, 4, seed=3)
    with pytest.raises(PrivacyParameterError, match="site 0: y must contain only the class"):
        federated_fit(
            sites,
            "noisy_average",
            epsilon=1.0,
            regularization=0.1,
            task="multiclass",
            n_classes=3,  # the labels hold 4 classes
        )


@pytest.mark.parametrize("protocol", ["psgd", "admm"])
@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_psgd_and_admm_stay_refused_naming_their_margin_loss_analysis(
    protocol: str, task: str
) -> None:
    reason = TASK_REFUSALS[protocol][task]
    assert "margin loss" in reason or "margin-loss" in reason
    with pytest.raises(PrivacyParameterError) as caught:
        federated_calibrate(
            protocol,
            site_sizes=(100, 100),
            d=3,
            epsilon=1.0,
            delta=1e-6,
            regularization=0.05,
            task=task,  # type: ignore[arg-type]
            n_classes=4,
        )
    assert reason in str(caught.value)
    assert "the protocols that fit it: noisy_average" in str(caught.value)
