"""``psgd``: private multiparty gradient descent of Rajkumar & Agarwal 2012 (seed 002, Alg. 1).

K sites with n_k rows, N = Σ n_k; global objective J(w) = (1/N) Σ_all l(y wᵀx) + (λ/2)‖w‖²
with l convex, twice differentiable (a.e. for Huber), |l′| ≤ L = 1, 0 ≤ l″ ≤ c (logistic
c = 1/4, Huber c = 1/(2h)); ‖x‖ ≤ 1; y ∈ {−1, +1}; 0 < δ < 1.

Calibration (all public):

    [Δ, ε̃] = computeSlack(ε, λ, N, c)     (tight: ε̃ = ε − ln(1 + c/(N(λ + Δ))), Δ from
                                          ``jacobian_slack``, e^{ε/2} branch)
    σ*     = (√q + √(q + 2ε̃))/ε̃,  q = χ²_d quantile at 1 − δ   (GOP's σ*, see
             ``mechanisms.gaussian_objective``)
    η^k    ~ N(0, (σ*²/K) I_d), drawn ONCE by site k   ⇒ Σ_k η^k ~ N(0, σ*² I_d)
    ρ_t^k  ~ ν(ρ) ∝ exp(−β‖ρ‖), β = ε/(2L), drawn afresh by site k in every round

Round t: the coordinator sends its query point v_t to every site; site k returns
∇Ĝ_k(v_t) = Σ_{j∈D_k} l′(y_j v_tᵀx_j) y_j x_j + ρ_t^k + η^k; the coordinator forms

    g_t = (1/N) Σ_k ∇Ĝ_k(v_t) + (λ + Δ) v_t = ∇J̃(v_t) + (1/N) Σ_k ρ_t^k,
    J̃(w) = J(w) + (Σ_k η^k)ᵀw/N + (Δ/2)‖w‖²        (the GOP objective, seed 002 Alg. 4)

and takes a gradient step. Since E[ρ] = 0 the iterates approach the GOP minimiser
w_gop = argmin J̃, which is (ε, δ)-DP with respect to every record of the union (Thm 4.1),
hence with respect to each site's dataset.

Privacy claim and its assumptions (recorded as notes). Thm 4.2 identifies PSGD with GOP when
the party running the iterations sees only the SUM over sites of the noisy gradients (secure
sum) and only the final model is released: here the coordinator is inside the service, the
per-round sums are never stored or released, and only the final model leaves. The theorem
concerns the exact minimiser of J̃; after T rounds the iterates are only near it (measured on
Adult-sized data: 1.6–4.5 away at T = 5…50, with ‖w‖ ≈ 6 and sensitivity 2), so PrivFit does
not release them. It certifies instead:

* Certification. After the T noisy rounds (a warm start), the coordinator keeps iterating with
  each site's share of ∇J̃, Σ_{j∈D_k} l′(y_j wᵀx_j) y_j x_j + η^k (no fresh ρ; still a sum
  seen only inside the service), by Nesterov's method with adaptive restart, until a proved
  bound on ‖∇J̃(w)‖ at the point it keeps is ≤ τ (``certificate_tolerance``, the public
  tolerance of :func:`service.dp.certified.tolerance` for N rows). Each site's η^k is the real
  Gaussian vector of exact uniforms, known as doubles within a proved radius, and each site
  answers its share with a proved error bound (:func:`service.dp.certified.site_share`); the
  coordinator adds the rounding of its own sum (:func:`service.dp.certified.combine_shares`).
  If the certificate is not met within ``MAX_CERTIFY_ROUNDS`` the job fails
  (:class:`~service.dp.solvers.ConvergenceError`) and nothing is released.
* Distance to the exact minimiser: J̃ is μ-strongly convex (μ = λ + Δ), so
  μ‖w − w_gop‖² ≤ ⟨∇J̃(w) − ∇J̃(w_gop), w − w_gop⟩ ≤ τ‖w − w_gop‖, i.e. ‖w − w_gop‖ ≤ τ/μ = r.
* Release: γ·round((w + Z)/γ) with Z ∝ exp(−β_r‖z‖), β_r = ε_r/(2r), sampled exactly
  (:mod:`service.dp.lattice`). As in :mod:`service.dp.certified`, the GOP minimiser is
  (ε₁, δ)-DP at the objective's share ε₁ = ε − ε_r and the release of a point certified
  within r of it is ε_r-DP given it, so the released doubles are (ε, δ)-DP.

The per-round transcript is not covered by the theorem (each round's sum would be ε-DP and T
rounds Tε), which is why it must stay inside. The number of certification rounds depends on
the data; they are not counted as protocol rounds (no per-round progress or timing is recorded
for them). Each site is charged (ε, δ).

Step sizes. J̃ is μ-strongly convex with μ = λ + Δ and, because ‖x‖ ≤ 1 and l″ ≤ c, has a
(c + μ)-Lipschitz gradient: L_J = c + μ is a public bound, so z = 1/L_J is a safe constant
step without looking at the data. Schedules (``step_size``):

* ``"nesterov"`` (default): Nesterov's accelerated gradient for strongly convex functions,
  v_{t+1} = w_{t+1} + m (w_{t+1} − w_t), w_{t+1} = v_t − z g_t, m = (√κ − 1)/(√κ + 1),
  κ = L_J/μ. Noise-free it contracts like (1 − 1/√κ)^t: on Adult (λ = 10⁻³, κ ≈ 250, 10
  sites) 200 rounds come within 10⁻⁴ of the GOP minimiser (itself ≈ 8 away from the
  non-private one at ε = 1) where plain gradient descent is still ≈ 3.5 away.
* ``"constant"``: w_{t+1} = w_t − z g_t (seed 002 Alg. 1 with z_t = 1/L_J); contracts like
  (1 − 1/κ)^t.
* ``"decreasing"``: z_t = 1/(L_J + μ t), the Robbins–Monro schedule of Alg. 1
  (Σ z_t = ∞, Σ z_t² < ∞); slow when κ is large.

In every schedule the warm start handed to the certification is the average of the iterates
w_t of the second half, t > ⌊T/2⌋ (Polyak–Ruppert tail averaging): ρ's contribution to its
error falls like √(K/T) relative to GOP's own noise. It only decides how many certification
rounds are needed, never what is released.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol

import numpy as np

from service.dp import certified, lattice, noise
from service.dp.accounting import PrivacyCost
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    FloatArray,
    RoundClock,
    Site,
    choice_param,
    finite,
    int_param,
    site_call,
    site_generators,
)
from service.dp.losses import Loss
from service.dp.mechanisms._common import chi_mean
from service.dp.mechanisms.gaussian_objective import compute_slack, gop_sigma
from service.dp.solvers import DEFAULT_TOLERANCE, ConvergenceError
from service.dp.validation import PrivacyParameterError, check_known_params

__all__ = [
    "CERTIFICATE_TOLERANCE",
    "DEFAULT_ITERATIONS",
    "MAX_CERTIFY_ROUNDS",
    "NAME",
    "SCHEDULES",
    "PSGDSite",
    "calibrate",
    "coordinate",
    "party",
    "run",
    "run_parties",
]

NAME = "psgd"
ALLOWED_PARAMS = ("iterations", "step_size")
SCHEDULES = ("nesterov", "constant", "decreasing")
#: 500 rounds: with tail averaging the per-round noise ρ moves the model by about √(K/250)
#: times GOP's own perturbation (0.14 measured on Adult with 10 sites, where PSGD's test error
#: matched centralised GOP's at ε = 0.5, 1 and 4); a round is two passes over the data.
DEFAULT_ITERATIONS = 500
MAX_ITERATIONS = 100_000
#: The Lipschitz constant of every supported loss (|l′| ≤ 1).
LIPSCHITZ = 1.0
#: :func:`certify`'s default tolerance (the coordinator passes the calibration's τ instead).
CERTIFICATE_TOLERANCE = DEFAULT_TOLERANCE
#: Exact-gradient rounds allowed to reach the certificate before the job fails.
MAX_CERTIFY_ROUNDS = 50_000


class PSGDSite(Site):
    """Site k of PSGD: holds its rows, its fixed Gaussian share η^k, and answers gradients."""

    def __init__(self, index: int, X: FloatArray, y: FloatArray, loss: Loss) -> None:
        super().__init__(index, X, y)
        self._loss = loss
        self._enclosure: lattice.Enclosure | None = None

    def draw_fixed_noise(self, sigma_share: float, rng: np.random.Generator | None) -> None:
        """η^k ~ N(0, sigma_share² I_d), drawn once and kept by the site: the real Gaussian
        vector of exact uniforms, known as doubles within a proved radius
        (:func:`~service.dp.lattice.gaussian_enclosure`)."""
        self._enclosure = lattice.gaussian_enclosure(self.d, sigma=sigma_share, rng=rng)

    def noisy_gradient(
        self, w: FloatArray, beta: float, rng: np.random.Generator | None
    ) -> FloatArray:
        """∇Ĝ_k(w) = Σ_j l′(y_j wᵀx_j) y_j x_j + ρ + η^k with fresh ρ ∝ exp(−β‖ρ‖)."""
        if self._enclosure is None:
            raise RuntimeError("the site's fixed noise must be drawn before the first round")
        slopes = self._loss.derivative(self._y * (self._X @ w))
        grad: FloatArray = self._X.T @ (slopes * self._y)
        grad += noise.norm_exponential_vector(self.d, beta=beta, rng=rng)
        grad += self._enclosure.value
        return self._send(grad)

    def gop_gradient(self, w: FloatArray) -> FloatArray:
        """The site's share of N·∇J̃, Σ_j l′(y_j wᵀx_j) y_j x_j + η^k (no fresh ρ), with a
        proved bound on its distance to the real share (:func:`certified.site_share`): d + 1
        numbers, the share then the bound."""
        if self._enclosure is None:
            raise RuntimeError("the site's fixed noise must be drawn before the first round")
        share, bound = certified.site_share(self._X, self._y, self._loss, w, self._enclosure)
        return self._send(np.append(share, bound), with_bound=True)


class GradientParty(Protocol):
    """What the coordinator may ask a PSGD site."""

    index: int

    def draw_fixed_noise(self, sigma_share: float, rng: np.random.Generator | None) -> None: ...

    def noisy_gradient(
        self, w: FloatArray, beta: float, rng: np.random.Generator | None
    ) -> FloatArray: ...

    def gop_gradient(self, w: FloatArray) -> FloatArray: ...


def calibrate(problem: FederatedProblem) -> FederatedCalibration:
    """computeSlack, GOP's σ*, the shares σ*/√K, β = ε/(2L) and the step schedule."""
    check_known_params(problem.params, ALLOWED_PARAMS, NAME)
    iterations = int_param(
        problem.params, "iterations", DEFAULT_ITERATIONS, minimum=1, maximum=MAX_ITERATIONS
    )
    schedule = choice_param(problem.params, "step_size", "nesterov", SCHEDULES)
    if not problem.delta > 0.0:
        raise PrivacyParameterError(
            f"{NAME} is (ε, δ)-DP (Gaussian noise, seed 002) and needs 0 < delta < 1; "
            f"got delta = {problem.delta!r}"
        )
    loss = problem.loss_object()
    K, N, d = problem.sites, problem.total, problem.d
    eps, delta, lam, c = problem.epsilon, problem.delta, problem.regularization, loss.c

    def public(budget: float) -> tuple[float, float]:
        extra, epsilon_tilde = compute_slack(budget, lam, N, c)
        sigma, _ = gop_sigma(d, epsilon_tilde, delta)
        return lam + extra, certified.gaussian_quantile(d, sigma) / N

    eps_objective, release = certified.split(eps, n=N, d=d, c=c, public=public)
    extra, epsilon_tilde = compute_slack(eps_objective, lam, N, c)
    sigma, q = gop_sigma(d, epsilon_tilde, delta)
    sigma_share = sigma / math.sqrt(K)
    beta = eps / (2.0 * LIPSCHITZ)
    mu = lam + extra
    smooth = c + mu
    kappa = smooth / mu
    momentum = (math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0)
    details = {
        "protocol": NAME,
        "K": K,
        "N": N,
        "d": d,
        "epsilon": finite(eps),
        "delta": finite(delta),
        "loss": loss.name,
        "c": finite(c),
        "lipschitz": LIPSCHITZ,
        "regularization": finite(lam),
        "branch": "no_extra_regularization" if extra == 0.0 else "extra_regularization",
        "epsilon_objective": finite(eps_objective),
        "epsilon_tilde": finite(epsilon_tilde),
        "Delta": finite(extra),
        "effective_regularization": finite(mu),
        "chi2_quantile": finite(q),
        "sigma_star": finite(sigma),
        "sigma_share": finite(sigma_share),
        "beta": finite(beta),
        "expected_fixed_noise_norm": finite(sigma * chi_mean(d)),
        "expected_round_noise_norm_per_site": finite(d / beta),
        "iterations": iterations,
        "step_size": schedule,
        "smoothness_bound": finite(smooth),
        "z0": finite(1.0 / smooth),
        "momentum": finite(momentum) if schedule == "nesterov" else 0.0,
        "averaging_from": iterations // 2,
        "certificate_tolerance": finite(release.tolerance),
        "distance_to_gop_minimiser_bound": finite(release.distance),
        "sites": [{"n": n} for n in problem.site_sizes],
    }
    details.update(release.details())
    if loss.name == "huber":
        details["huber_h"] = finite(problem.huber_h)
    cost = PrivacyCost(float(eps), float(delta))
    return FederatedCalibration(
        protocol=NAME,
        site_costs=tuple(cost for _ in problem.site_sizes),
        private=True,
        details=details,
        composition=(
            f"(ε = {eps:g}, δ = {delta:g}) per dataset for the released model (Rajkumar & "
            f"Agarwal 2012, Thm 4.2): the K = {K} fixed shares η^k sum to N(0, σ*² I) with "
            f"σ* = {sigma:.6g}, so the rounds' limit is the GOP minimiser (Thm 4.1 at the "
            f"objective's ε₁ = {eps_objective:.6g}, ε̃ = {epsilon_tilde:.6g}, Δ = {extra:.6g}, "
            f"N = Σ n_k); {iterations} rounds; {release.describe()} (ε₁ + ε_r ≤ ε)"
        ),
        rounds=iterations,
        notes=(
            "secure sum: the per-round sums of the sites' noisy gradients exist only inside the "
            "service and are never stored or released; only the final model leaves, which is "
            "the condition of Rajkumar & Agarwal's Thm 4.2",
            "the guarantee is the one of the GOP minimiser (Thm 4.1) composed with the release "
            f"noise: after the {iterations} noisy rounds the coordinator certifies "
            f"‖∇J̃(w)‖ ≤ {release.tolerance:.3g} from the sites' exact gradient shares and their "
            "proved error bounds (no fresh noise), so w is within "
            f"{release.distance:.3g} of the exact GOP minimiser, and releases w with noise "
            "covering that distance; the job fails if the certificate is not reached",
        ),
    )


def coordinate(
    sites: Sequence[GradientParty],
    *,
    total: int,
    d: int,
    effective_regularization: float,
    smoothness: float,
    sigma_share: float,
    beta: float,
    iterations: int,
    schedule: str,
    release: certified.CertifiedRelease,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    """The coordinator of Alg. 1: sees only the sums of the sites' answers (module docstring);
    runs the T noisy rounds, certifies ‖∇J̃(w)‖ ≤ τ (:func:`certify`) and releases w with the
    certified release's noise (:mod:`service.dp.certified`)."""
    rngs = site_generators(rng, len(sites))
    for k, site in enumerate(sites):
        site_call(site.index, partial(site.draw_fixed_noise, sigma_share, rngs[k]))
    mu = effective_regularization
    z0 = 1.0 / smoothness
    kappa = smoothness / mu
    momentum = (
        (math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0) if schedule == "nesterov" else 0.0
    )
    w = np.zeros(d)
    query = w.copy()
    tail_sum = np.zeros(d)
    tail_count = 0
    start_average = iterations // 2
    for t in range(iterations):
        answers = np.zeros(d)
        for k, site in enumerate(sites):
            answers += site_call(site.index, partial(site.noisy_gradient, query, beta, rngs[k]))
        grad = answers / total + mu * query
        step = z0 if schedule != "decreasing" else 1.0 / (smoothness + mu * t)
        w_next = query - step * grad
        query = w_next + momentum * (w_next - w) if momentum else w_next
        w = w_next
        if t >= start_average:
            tail_sum += w
            tail_count += 1
        clock.tick()
    averaged: FloatArray = tail_sum / tail_count

    def gop_gradient(point: FloatArray) -> tuple[FloatArray, float]:
        answers = [site_call(site.index, partial(site.gop_gradient, point)) for site in sites]
        return certified.combine_shares(
            [a[:d] for a in answers],
            [float(a[d]) for a in answers],
            total=total,
            regularization=mu,
            w=point,
        )

    w_cert = certify(
        gop_gradient, averaged, strong_convexity=mu, smoothness=smoothness, tol=release.tolerance
    )
    return lattice.norm_exponential_release(w_cert, beta=release.beta, rng=rng)


def certify(
    gradient: Callable[[FloatArray], tuple[FloatArray, float]],
    start: FloatArray,
    *,
    strong_convexity: float,
    smoothness: float,
    tol: float = CERTIFICATE_TOLERANCE,
    max_rounds: int = MAX_CERTIFY_ROUNDS,
) -> FloatArray:
    """A point w whose proved gradient bound is ≤ tol, found from ``start`` by Nesterov's
    method for a μ-strongly convex, L-smooth function (step 1/L, momentum (√κ − 1)/(√κ + 1),
    κ = L/μ) with gradient restart (O'Donoghue & Candès 2015: drop the momentum when
    ⟨∇f(v), w⁺ − w⟩ > 0). ``gradient`` returns the computed gradient and a proved upper bound
    on the true gradient's norm (:func:`certified.combine_shares`).

    The certificate is checked at the returned point itself; :class:`ConvergenceError` (no
    data values in it) when ``max_rounds`` gradients do not reach it."""
    z = 1.0 / smoothness
    kappa = smoothness / strong_convexity
    momentum = (math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0)
    w = np.array(start, dtype=np.float64)
    query = w.copy()
    for _ in range(max_rounds):
        g, bound = gradient(query)
        if not np.all(np.isfinite(g)):
            break
        if bound <= tol:
            return query
        w_next = query - z * g
        # restart (no momentum) when the momentum would point uphill
        uphill = float(g @ (w_next - w)) > 0.0
        query = w_next if uphill else w_next + momentum * (w_next - w)
        w = w_next
    raise ConvergenceError(
        f"psgd could not certify the released model: the gradient of the perturbed objective "
        f"did not fall below {tol:.1e} within {max_rounds} exact rounds; nothing is released"
    )


def party(
    problem: FederatedProblem,
    calibration: FederatedCalibration,
    index: int,
    X: FloatArray,
    y: FloatArray,
) -> PSGDSite:
    """Site ``index`` of this fit, holding (X, y): the in-process fit and a node build it alike."""
    del calibration
    return PSGDSite(index, X, y, problem.loss_object())


def run_parties(
    parties: Sequence[GradientParty],
    problem: FederatedProblem,
    calibration: FederatedCalibration,
    *,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    """The coordinator over ``parties`` (local :class:`PSGDSite` objects or proxies of sites
    that run elsewhere), with the calibration's numbers."""
    det = calibration.details
    return coordinate(
        parties,
        total=problem.total,
        d=problem.d,
        effective_regularization=float(det["effective_regularization"]),
        smoothness=float(det["smoothness_bound"]),
        sigma_share=float(det["sigma_share"]),
        beta=float(det["beta"]),
        iterations=int(det["iterations"]),
        schedule=str(det["step_size"]),
        release=certified.CertifiedRelease.from_details(det),
        rng=rng,
        clock=clock,
    )


def run(
    data: Sequence[tuple[FloatArray, FloatArray]],
    problem: FederatedProblem,
    calibration: FederatedCalibration,
    *,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    sites = [party(problem, calibration, k, X, y) for k, (X, y) in enumerate(data)]
    return run_parties(sites, problem, calibration, rng=rng, clock=clock)
