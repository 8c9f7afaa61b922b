"""``noisy_average``: average of exact local fits plus one noise draw at a trusted aggregator.

Seed 000 §4.4.1 scenario 2 (Xie 2016, Fig. 4.5) and the local-averaging baseline "LA" of
Pathak et al. that seed 002 compares with. K sites with n_k rows each; λ > 0; a convex,
differentiable loss with |l′| ≤ 1 (logistic or Huber); ‖x‖ ≤ 1; y ∈ {−1, +1}.

Protocol (one communication round):

1. Site k computes, inside its own computation, the exact minimiser of its local objective
   w_k = argmin_w J_k(w),  J_k(w) = (1/n_k) Σ_{j∈D_k} l(y_j wᵀx_j) + (λ/2)‖w‖²
   (solved to the solver's tight tolerance; non-convergence fails the job). w_k is never
   stored or released.
2. The aggregator (the service itself, the trusted party of scenario 2) receives the K
   vectors and releases only  w_priv = (1/K) Σ_k w_k + b,  b ~ ν(b) ∝ exp(−β‖b‖),
   β = K · min_k n_k · λ · ε / 2   (‖b‖ ~ Gamma(shape d, scale 1/β), direction uniform).

Sensitivity (seed 000 eqs 4.1–4.2, with unequal sizes). Replacing one record of D_i changes
only w_i, and by CMS11 Cor. 8 (see ``output_perturbation``) ‖w_i − w_i′‖ ≤ 2/(n_i λ). So
the average moves by at most Δ_i = 2/(K n_i λ) ≤ 2/(K n_min λ).

Privacy, per dataset. p_D(v)/p_D′(v) = exp(−β‖v − w̄_D‖)/exp(−β‖v − w̄_D′‖)
≤ exp(β‖w̄_D − w̄_D′‖) ≤ exp(β Δ_i), so the release is ε_i-DP for site i's dataset with

    ε_i = β · 2/(K n_i λ) = ε · n_min / n_i  ≤ ε,

exactly ε for the smallest site and less for larger ones; ε_i is what is charged to site i.
No δ is spent. The other sites' data are fixed under a change to D_i (parallel composition
over disjoint datasets). The released vector is the exact grid point γ·round((w̄ + b)/γ),
γ = 2⁻³², with b's law sampled exactly (:mod:`service.dp.lattice`): post-processing of
w̄ + b, so the bound holds for the doubles released (issue 19 §1). The trust assumption
— the aggregator sees the raw local minimisers — is met because the aggregator is the
service, and nothing but w_priv leaves it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from service.dp import lattice
from service.dp.accounting import PrivacyCost
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    FloatArray,
    RoundClock,
    Site,
    finite,
    site_round,
)
from service.dp.losses import Loss
from service.dp.solvers import solve_erm
from service.dp.validation import check_known_params

__all__ = ["NAME", "NoisyAverageSite", "aggregate", "calibrate", "run"]

NAME = "noisy_average"
ALLOWED_PARAMS: tuple[str, ...] = ()


class NoisyAverageSite(Site):
    """Site k of ``noisy_average``: fits its exact local minimiser on its own rows."""

    def local_minimiser(self, loss: Loss, regularization: float) -> FloatArray:
        """w_k = argmin (1/n_k) Σ l(y wᵀx) + (λ/2)‖w‖² (sent to the trusted aggregator only)."""
        result = solve_erm(self._X, self._y, loss, regularization=regularization)
        return self._send(result.coef)


class LocalFitter(Protocol):
    """What the aggregator may ask a site: its local minimiser."""

    index: int

    def local_minimiser(self, loss: Loss, regularization: float) -> FloatArray: ...


def calibrate(problem: FederatedProblem) -> FederatedCalibration:
    """β = K·n_min·λ·ε/2; per-site ε_i = ε·n_min/n_i (module docstring)."""
    check_known_params(problem.params, ALLOWED_PARAMS, NAME)
    K, d, lam, eps = problem.sites, problem.d, problem.regularization, problem.epsilon
    n_min = min(problem.site_sizes)
    beta = K * n_min * lam * eps / 2.0
    sensitivity = 2.0 / (K * n_min * lam)
    site_eps = [eps * (n_min / n) for n in problem.site_sizes]
    loss = problem.loss_object()
    details = {
        "protocol": NAME,
        "K": K,
        "d": d,
        "epsilon": finite(eps),
        "delta": 0.0,
        "loss": loss.name,
        "lipschitz": 1.0,
        "regularization": finite(lam),
        "n_min": n_min,
        "sensitivity": finite(sensitivity),
        "beta": finite(beta),
        "noise": "norm_exponential",
        "noise_norm_distribution": f"Gamma(shape={d}, scale={1.0 / beta!r})",
        "expected_noise_norm": finite(d / beta),
        "release": lattice.RELEASE_NOTE,
        "sites": [
            {
                "n": n,
                "sensitivity": finite(2.0 / (K * n * lam)),
                "epsilon": finite(e),
                "delta": 0.0,
            }
            for n, e in zip(problem.site_sizes, site_eps, strict=True)
        ],
    }
    if loss.name == "huber":
        details["huber_h"] = finite(problem.huber_h)
    return FederatedCalibration(
        protocol=NAME,
        site_costs=tuple(PrivacyCost(e, 0.0) for e in site_eps),
        private=True,
        details=details,
        composition=(
            f"one release w̄ + b with b ∝ exp(−β‖b‖), β = K·min n_k·λ·ε/2 = {beta:.6g}; the "
            f"average of the K = {K} exact local minimisers moves by at most 2/(K n_i λ) when "
            f"one record of site i changes, so site i's dataset is protected at "
            f"ε_i = ε·min n_k/n_i ≤ ε = {eps:g} (the smallest site at exactly ε); no δ"
        ),
        rounds=1,
        notes=(
            "trusted aggregator: the service sees the sites' exact local minimisers inside one "
            "computation and releases only their average plus noise; they are never stored",
        ),
    )


def aggregate(
    sites: Sequence[LocalFitter],
    loss: Loss,
    regularization: float,
    *,
    beta: float,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    """The trusted aggregator: collects the K local minimisers (one round), releases the mean
    plus ν(b) ∝ exp(−β‖b‖) noise. It never sees a site's rows."""
    local = site_round(sites, lambda _, site: site.local_minimiser(loss, regularization))
    mean = np.mean(np.stack(local), axis=0)
    clock.tick()
    released: FloatArray = lattice.norm_exponential_release(mean, beta=beta, rng=rng)
    return released


def run(
    data: Sequence[tuple[FloatArray, FloatArray]],
    problem: FederatedProblem,
    calibration: FederatedCalibration,
    *,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    sites = [NoisyAverageSite(k, X, y) for k, (X, y) in enumerate(data)]
    beta = float(calibration.details["beta"])
    if not math.isfinite(beta) or beta <= 0.0:
        raise ValueError("beta must be finite and positive")
    return aggregate(
        sites, problem.loss_object(), problem.regularization, beta=beta, rng=rng, clock=clock
    )
