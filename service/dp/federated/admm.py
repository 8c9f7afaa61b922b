"""``admm``: consensus ADMM over a graph of sites, with dual (DVP) or primal (PVP) variable
perturbation or none (Zhang & Zhu, seed 004, Algs. 1–3), composed over the iterations; and
Gaussian PVP accounted in zCDP (``noise: "gaussian"``, below).

Setting. Sites p = 1..P (P = K) on a connected undirected graph, neighbours 𝒩_p, degree
N_p = |𝒩_p|; site p holds B_p = n_p rows, N = Σ_p B_p. Loss convex, twice differentiable
(a.e. for Huber), |l′| ≤ 1, l″ ≤ c; ‖x‖ ≤ 1; y ∈ {−1, +1}; λ > 0.

Normalisation. PrivFit's global objective is J(f) = (1/N) Σ_all l(y fᵀx) + (λ/2)‖f‖². It
splits as Σ_p Z_p(f) with Z_p(f) = (1/N) Σ_{i∈D_p} l + (λB_p/(2N))‖f‖², i.e. the paper's
Z_p = (C^R/B_p) Σ l + ρR with C^R/B_p = 1/N, ρ = λB_p/N, R = ½‖·‖² (so B_p/C^R = N). With
this weighting the consensus solution is the centralised minimiser even for unequal B_p
(the paper's common C^R/B_p weighs every site equally instead).

Iteration t (Forero's simplified form, seed 004 Eqs. 9–11; broadcasts start at 0, λ_p(0) = 0):

    f_p(t+1) = argmin_f Z_p(f) + 2μ_pᵀf + (Φ_p/2)‖f‖² + η Σ_{j∈𝒩_p} ‖f − ½(u_p(t) + u_j(t))‖²
    λ_p(t+1) = λ_p(t) + (η/2) Σ_{j∈𝒩_p} (u_p(t+1) − u_j(t+1))

where u is what sites broadcast. Per ``perturbation``:

* ``"none"`` (Alg. 1): μ_p = λ_p, Φ_p = 0, u_p = f_p. Not DP (the iterates are deterministic
  functions of the data).
* ``"dual"`` (DVP, Alg. 2): μ_p = λ_p(t) + (C^R/(2B_p)) ε_p = λ_p(t) + ε_p/(2N) with fresh
  ε_p ~ ∝ exp(−ζ‖ε‖); u_p = f_p. Calibration at per-iteration α (Alg. 2, with C^R/B_p = 1/N):

      s_p = (B_p/C^R)(ρ + 2ηN_p) = λB_p + 2NηN_p,   κ_p = c/s_p,   ᾱ_p = 2 ln(1 + κ_p)
      if ᾱ_p ≤ α/2:  Φ_p = 0,                                   α̂_p = α − ᾱ_p
      else:          Φ_p = c/(N(e^{α/4} − 1)) − λB_p/N − 2ηN_p,  α̂_p = α/2
      ζ_p = α̂_p/2       (the algorithm box's ζ = α̂ is a misprint: the proof needs α̂/2)

  The Φ branch is taken whenever ᾱ_p > α/2 (seed 004 note §6 item 8), not only when
  α̂ ≤ 0: it is valid there (Φ_p ≥ 0 ⇔ ᾱ_p ≥ α/2) and gives less noise than a tiny α̂.
  Proof (App. A, restated in these units): multiplying the step's objective by N gives
  Σ_{i∈D_p} l(y fᵀx) + εᵀf + (N/2)(λB_p/N + Φ_p + 2ηN_p)‖f‖² + (linear terms in public
  quantities); its stationarity condition is a bijection ε ↔ f_p(t+1); a changed record
  moves ε by ≤ 2 (|l′| ≤ 1, ‖x‖ ≤ 1) — a factor ≤ e^{2ζ} = e^{α̂} in the noise density — and
  the Jacobian ratio is ≤ (1 + c/(λB_p + NΦ_p + 2NηN_p))² ≤ e^{α − α̂}: α per iteration.
  In floating point (issue 19 §1, :mod:`service.dp.optimize.certified`) that argument is about the
  exact minimiser for a real ε_p, so each round runs it at α₁ = α − α_r (every formula above
  with α₁ for α; ``alpha_objective``): ε_p is the real noise of exact uniforms, known as
  doubles within a proved radius; the site's solve is certified within r = τ/μ_p of the exact
  minimiser by a gradient bound proved in IEEE arithmetic (τ from B_p, d, c, μ_p = λ + the
  step's ridge, and ‖2N(λ_p − η·centre)‖ and ζ_p's noise quantile — public numbers); the
  broadcast is the exact lattice release of f̂_p + Z, Z ∝ exp(−β_r‖z‖), β_r = α_r/(2r)
  (``release_epsilon``). By adaptive composition each broadcast is α₁ + α_r ≤ α-DP given the
  public history, so the composition below is unchanged.
* ``"primal"`` (PVP, Alg. 3): μ_p = λ_p, Φ_p = 0, and site p broadcasts V_p = f_p + ε_p
  (Eq. 19; the box's "broadcast f_p" is a misprint), u_p = V_p in both the local objective
  and the dual update (Eq. 20). PrivFit builds the local objective from the public
  broadcasts only (own V_p(t), not the secret f_p(t) and ε_p(t) the paper uses), which is
  what makes each step a mechanism of (D_p, public history) so that composition applies
  (seed 004 note §6 item 4). Sensitivity: the step objective times N/B_p is
  (1/B_p)Σ l + (λ/2)‖f‖² + (N/B_p)(public terms), strongly convex with
  μ_p = λ + 2NηN_p/B_p; a changed record changes it by G with ‖∇G‖ ≤ 2/B_p, so
  ‖f_p − f_p′‖ ≤ 2/(B_p μ_p) = 2/(λB_p + 2NηN_p) =: Δ_p (CMS11 Cor. 8; the paper's
  2C^R/(ρB_p) = 2/(λB_p) drops the penalty's strong convexity, which only adds noise), and
  ζ_p = α/(Δ_p(1 + S)) makes each broadcast α-DP, where the factor 1 + S accounts for the
  local solve stopping at ‖∇‖ ≤ S/B_p (S = ``SOLVER_SLACK``; see Gaussian primal
  perturbation below). That stopping test is a *proved* bound on the gradient of the step
  objective the site minimises (:func:`service.dp.optimize.certified.gradient_bound`, IEEE
  arithmetic), at (1 − 10⁻⁹)·S/B_p: the 10⁻⁹·S covers the rounding of the step's ridge
  coefficient, whose exact-minimiser sensitivity 2/(B_pμ̂_p) exceeds Δ_p by at most a
  factor 1 + 4u. Whether a step *can* answer must not depend on the data: a coordinator
  that sees a refusal learns a noise-free bit. So before solving, the site checks the public
  certificate floor F (:func:`service.dp.optimize.certified_failure.certificate_floor`: an upper
  bound on the proved bound at the double nearest the exact minimiser, from B_p, d, c, μ_p and
  ‖2N(λ_p − η·centre)‖/B_p only) against half the stopping bound, and refuses the step when it
  is above: a decision from public inputs alone, the same on neighbouring datasets (issue 25;
  an honest coordinator's broadcasts stay far below it; a malicious one sending broadcasts of
  ~10¹⁰ meets it). Below it a certifiable point exists with a factor 2 to spare; that the
  solver reaches it is checked, not proved (docs/privacy.md). The paper's last DVP step is
  not run: the released model averages the final broadcasts.

Composition (the paper states a per-iteration guarantee only; docs/design.md §3). Site p's dataset
enters T released broadcasts, each α-DP given the public history (DVP: f's and λ's built
from them; PVP: V's), so by adaptive composition the dataset is protected at the tighter of
basic composition T·α and advanced composition α√(2T ln(1/δ′)) + Tα(e^α − 1) with δ′ (if
the caller chose one). PrivFit takes the LARGEST α for which that tighter total is ≤ the
offered ε (α = ε/T for basic; advanced solved numerically), and charges the tighter total:
(Tα, 0), or (advanced ε, δ′). Other sites' broadcasts depend on D_p only through public
broadcasts (post-processing), and datasets are disjoint (parallel composition). The released
model, the average of the final broadcasts, is post-processing.

Gaussian primal perturbation (``noise: "gaussian"``; PVP only). Same protocol as PVP, but
V_p = f̂_p + N(0, σ_p²I), accounted in zCDP (Bun & Steinke 2016) instead of composing pure
ε-DP rounds. Sensitivity of one broadcast: the step objective (× N/B_p) is
J_t(f; D_p) = (1/B_p)Σ_{i∈D_p} l(y_i fᵀx_i) + (μ_p/2)‖f‖² + (1/B_p)g_tᵀf with
μ_p = λ + 2NηN_p/B_p and g_t = 2N(λ_p(t) − η·centre_p(t)) built from public broadcasts only.
Replacing one record adds G with ‖∇G‖ ≤ 2/B_p, so the exact minimisers differ by
≤ 2/(B_pμ_p) = Δ_p = 2/(λB_p + 2NηN_p). The solve stops at ‖∇J_t(f̂)‖ ≤ S/B_p
(S = ``SOLVER_SLACK`` = 10⁻⁴; the bound is public and checked), so ‖f̂ − f*‖ ≤ S/(B_pμ_p) =
SΔ_p/2 on either dataset and the released f̂ (a deterministic function of D_p and the public
history, warm starts included) has L2 sensitivity Δ_p(1 + S). The Gaussian mechanism then
gives ρ_r = Δ_p²(1 + S)²/(2σ_p²)-zCDP per round (Prop. 1.6); T rounds compose adaptively to
Tρ_r (Lemma 2.3), and everything else (duals, other sites, the final average) is
post-processing or touches disjoint datasets. Calibration: ρ = the largest total whose
conversion at the offered δ is ≤ ε (``zcdp_conversion``: ``"cks"``, the default, Canonne,
Kamath & Steinke 2020 Cor. 13, by root finding; or ``"bun_steinke"``, ε = ρ + 2√(ρ ln(1/δ)),
in closed form √ρ = √(ln(1/δ) + ε) − √(ln(1/δ))); ρ_r = ρ/T; σ_p = Δ_p(1 + S)/√(2ρ_r). Every
site's ρ is the same, so every dataset is charged exactly the (ε, δ) offered. A Gaussian DVP
is not offered: the noise shift that explains a changed record, Σl′-terms at the released f,
depends on f, so the step has no fixed L2 sensitivity to calibrate. The draws come from
the exact Gaussian lattice release (:func:`service.dp.noise.lattice.gaussian_release`).

Gaussian defaults (from λ, the loss's c, K and the graph only; no site size, so they reveal
none).
T = 4 rounds and η = 0.2·√(λ(c + λ))/(2K·N̄): the penalty curvature 2ηN̄ is 0.2 times the
geometric mean of a site's share (≈ 1/K) of the curvature bounds λ and c + λ, i.e. about 3λ/K
at λ = 10⁻³ and λ/K at λ = 10⁻² (logistic). More penalty lowers Δ_p (less noise) but anchors
each step to the previous broadcasts, which start at 0, so consensus needs more rounds, and
each round costs ρ/T. On Adult in 5 equal sites (δ = 10⁻⁵, 20 runs a cell) T ∈ {2, 3, 4} and
penalty curvatures of λ/K and 3λ/K were compared at ε ∈ {0.5, 1} and λ ∈ {10⁻³, 10⁻²} (and
T up to 10, multipliers 0.01 to 10, in smaller runs): T = 4 was best or within one standard
error of it in every cell, with 3λ/K best at λ = 10⁻³ and λ/K at λ = 10⁻², which the
geometric-mean form follows (benchmarks/RESULTS.md, "Gaussian ADMM").

Penalty η. The paper does not report it. The default η = 0.3·√(λ(c + λ))/(2K·N̄) (N̄ the mean
degree) sets the penalty curvature 2ηN̄ to 0.3 times the geometric mean of a site's share
(≈ 1/K) of the loss curvature bounds λ and c + λ; on Adult (λ = 10⁻³, 10 sites) it reached
the centralised minimiser fastest after 50 and 100 iterations among multipliers from 0.01 to
10 in place of 0.3. Larger η also lowers ᾱ (more strong convexity) but slows consensus.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol

import numpy as np

from service.dp.core.losses import Loss
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    FloatArray,
    RoundClock,
    Site,
    exactly,
    site_round,
)
from service.dp.federated.admm_calibration import calibrate
from service.dp.federated.admm_calibration.graph import neighbours_from_params
from service.dp.federated.admm_calibration.laplace import per_iteration_alpha
from service.dp.federated.admm_calibration.params import (
    DEFAULT_ITERATIONS,
    DEFAULT_PERTURBATION,
    NAME,
    PERTURBATIONS,
    SOLVER_SLACK,
    default_penalty,
    gaussian_default_penalty,
)
from service.dp.federated.admm_calibration.plans import ADMMPlan, ADMMSitePlan
from service.dp.federated.protocol import Coordinator, FederatedProtocol, run_rounds
from service.dp.noise import lattice
from service.dp.noise.rounding import UNIT_ROUNDOFF, norm_up
from service.dp.optimize import certified, certified_failure
from service.dp.optimize.solvers import DEFAULT_TOLERANCE, solve_erm

#: the protocol's interface (NAME, calibrate, run) and its calibration's public names, which
#: live in :mod:`.admm_calibration`
__all__ = [
    "DEFAULT_ITERATIONS",
    "DEFAULT_PERTURBATION",
    "NAME",
    "PERTURBATIONS",
    "PROTOCOL",
    "SOLVER_SLACK",
    "ADMMPlan",
    "ADMMSite",
    "calibrate",
    "coordinate",
    "default_penalty",
    "gaussian_default_penalty",
    "neighbours_from_params",
    "party",
    "per_iteration_alpha",
    "run",
    "run_parties",
]


class ADMMSite(Site):
    """Site p: holds its rows, its dual variable λ_p and its last broadcast; answers one ADMM
    step at a time given its neighbours' broadcasts (public).

    Warm start: each round's local solve starts from where the site's solve of the round
    before ended (zero in the first round): its broadcast for DVP (the released point), its
    solution for PVP and the non-private variant. The step's minimiser moves little from round
    to round once the iterates approach consensus, so the solve usually needs fewer Newton
    steps than from zero. It changes the solver's path, not the law of what is sent. The
    starting point is this site's own state (a function of its rows and the public history,
    never of another site's rows); what makes a broadcast private is a stopping test that
    holds at whatever point the solver stops: DVP releases a point *proved* within r of the
    exact minimiser of the round's objective, with noise covering any point of that ball
    (:mod:`service.dp.optimize.certified`), and PVP stops at a *proved* ‖∇‖ ≤ S/B_p, which bounds
    the distance to the exact minimiser on either neighbouring dataset (module docstring). Both
    tests are the same with or without the warm start, so each broadcast's guarantee given
    the public history, and the composition over rounds, are unchanged.
    """

    def __init__(
        self,
        index: int,
        X: FloatArray,
        y: FloatArray,
        *,
        loss: Loss,
        regularization: float,
        total: int,
        penalty: float,
    ) -> None:
        super().__init__(index, X, y)
        self._loss = loss
        self._lam = regularization
        self._total = total
        self._penalty = penalty
        self._dual = np.zeros(self.d)
        self._broadcast = np.zeros(self.d)
        self._warm: FloatArray | None = None

    def local_step(
        self,
        neighbour_broadcasts: Sequence[FloatArray],
        *,
        perturbation: str,
        extra: float,
        zeta: float,
        rng: np.random.Generator | None,
        sigma: float | None = None,
        gradient_bound: float | None = None,
        release_epsilon: float | None = None,
    ) -> FloatArray:
        """Solve the step objective and return this iteration's broadcast (f_p for none,
        the certified release of f_p for DVP, V_p = f_p + ε_p for PVP). ``extra`` is Φ_p,
        ``zeta`` ζ_p of the norm-exponential noise; with ``sigma`` (Gaussian PVP)
        ε_p ~ N(0, σ²I) instead. PVP's solve must reach a *proved* ‖∇‖ ≤ ``gradient_bound``
        (the slack its sensitivity accounts for); DVP's release spends ``release_epsilon``
        (α_r) on the noise that covers its certified distance
        (:mod:`service.dp.optimize.certified`)."""
        N, B, eta = self._total, self.n, self._penalty
        degree = len(neighbour_broadcasts)
        centre = np.zeros(self.d)
        for u in neighbour_broadcasts:
            centre += 0.5 * (self._broadcast + u)
        # objective × N/B_p = (1/B_p)Σl + (λ/2)‖f‖² + (N/B_p)(Φ + 2ηN_p)/2·‖f‖²
        #                      + (1/B_p)·[2N(λ_p − η·centre) + ε]ᵀf
        linear = 2.0 * N * (self._dual - eta * centre)
        ridge = (N / B) * (extra + 2.0 * eta * degree)
        if perturbation == "dual":
            if release_epsilon is None:
                raise ValueError("dual perturbation needs its release budget")
            solved = self._certified_dual_step(linear, ridge, zeta, release_epsilon, rng)
            self._warm = solved
            self._broadcast = self._send(solved)
            return self._send(self._broadcast)
        solved = self._solve(linear, ridge, gradient_bound)
        self._warm = solved
        # the primal broadcast leaves the site: an exact grid release (service.dp.noise.lattice),
        # post-processing of solved + noise, so its guarantee holds for the doubles sent
        if perturbation == "primal" and sigma is not None:
            out = lattice.gaussian_release(solved, sigma=sigma, rng=rng)
        elif perturbation == "primal":
            out = lattice.norm_exponential_release(solved, beta=zeta, rng=rng)
        else:
            out = solved
        self._broadcast = self._send(out)
        return self._send(self._broadcast)

    def _solve(self, linear: FloatArray, ridge: float, gradient_bound: float | None) -> FloatArray:
        """The step objective's minimiser (public linear term); with ``gradient_bound``, a
        point whose proved gradient norm (:func:`certified.gradient_bound`, in IEEE
        arithmetic) is at most (1 − 10⁻⁹)·bound — the 10⁻⁹ covers the rounding of the ridge
        coefficient in the sensitivity (module docstring) — after one tighter retry."""
        if gradient_bound is None:
            return solve_erm(
                self._X,
                self._y,
                self._loss,
                regularization=self._lam,
                extra_regularization=ridge,
                linear=linear,
                initial=self._warm,
            ).coef
        # a step that cannot be certified is refused from public inputs alone (module
        # docstring): never a failure that depends on the rows
        floor = certified_failure.certificate_floor(
            n=self.n,
            d=self.d,
            loss=self._loss,
            strong_convexity=self._lam + ridge,
            noise_norm=norm_up(linear) / self.n,
        )
        if not floor <= 0.5 * gradient_bound:
            raise ValueError(
                "the public inputs of this step (the neighbours' broadcasts and the dual) are "
                "too large for its proved stopping test; the step is refused before it reads "
                "the data"
            )
        # solve_erm stops at ‖∇‖ ≤ tol·(1 + ‖linear‖/B_p); aim well below the bound
        scale = 1.0 + float(np.linalg.norm(linear)) / self.n
        return certified.certified_solve(
            self._X,
            self._y,
            self._loss,
            regularization=self._lam,
            extra_regularization=ridge,
            noise=lattice.Enclosure(linear, 0.0),
            threshold=(1.0 - 1e-9) * gradient_bound,
            tol=min(DEFAULT_TOLERANCE, 0.5 * gradient_bound / scale),
            failure=(
                "the ADMM step did not reach the gradient tolerance its sensitivity assumes; "
                "nothing was released"
            ),
            initial=self._warm,
        )

    def _certified_dual_step(
        self,
        public: FloatArray,
        ridge: float,
        zeta: float,
        release_epsilon: float,
        rng: np.random.Generator | None,
    ) -> FloatArray:
        """DVP's step as a certified release: the real noise ε_p enclosed, added to the public
        linear term (one rounding, in the radius), the solve certified within τ/μ_p of the
        exact minimiser, and the broadcast released with the noise covering that distance;
        τ from public numbers only (B_p, d, c, μ_p = λ + ridge, ‖public‖ and ζ's quantile)."""
        enclosure = lattice.norm_exponential_enclosure(self.d, beta=zeta, rng=rng)
        linear = public + enclosure.value
        radius = enclosure.radius + UNIT_ROUNDOFF * norm_up(linear)  # the one addition
        bound = (norm_up(public) + certified.norm_exponential_quantile(self.d, zeta)) / self.n
        plan = certified.plan(
            n=self.n,
            d=self.d,
            c=float(self._loss.c),
            strong_convexity=self._lam + ridge,
            linear_bound=bound,
            epsilon=release_epsilon,
        )
        return certified.release_minimiser(
            self._X,
            self._y,
            self._loss,
            regularization=self._lam,
            extra_regularization=ridge,
            noise=lattice.Enclosure(linear, radius),
            release=plan,
            rng=rng,
            initial=self._warm,
        )

    def dual_update(self, neighbour_broadcasts: Sequence[FloatArray]) -> None:
        """λ_p ← λ_p + (η/2) Σ_j (u_p − u_j), from public broadcasts only."""
        for u in neighbour_broadcasts:
            self._dual += 0.5 * self._penalty * (self._broadcast - u)


class ADMMParty(Protocol):
    """What the network (coordinator) may ask an ADMM site."""

    index: int

    def local_step(
        self,
        neighbour_broadcasts: Sequence[FloatArray],
        *,
        perturbation: str,
        extra: float,
        zeta: float,
        rng: np.random.Generator | None,
        sigma: float | None = None,
        gradient_bound: float | None = None,
        release_epsilon: float | None = None,
    ) -> FloatArray: ...

    def dual_update(self, neighbour_broadcasts: Sequence[FloatArray]) -> None: ...


# ----------------------------------------------------------------------------- running


class _Network(Coordinator):
    """The network: delivers each site's broadcasts to its neighbours for T iterations (a
    round of local steps, then a round of dual updates on the new broadcasts) and returns the
    average of the final broadcasts. It sees only broadcasts."""

    def __init__(
        self,
        graph: Sequence[Sequence[int]],
        *,
        d: int,
        iterations: int,
        perturbation: str,
        phis: Sequence[float],
        zetas: Sequence[float],
        sigmas: Sequence[float | None] | None = None,
        gradient_bounds: Sequence[float | None] | None = None,
        release_epsilons: Sequence[float | None] | None = None,
    ) -> None:
        super().__init__(iterations)
        self._graph = [list(row) for row in graph]
        self._perturbation = perturbation
        self._phis, self._zetas = list(phis), list(zetas)
        self._sigmas = sigmas
        self._gradient_bounds = gradient_bounds
        self._release_epsilons = release_epsilons
        self._broadcasts: list[FloatArray] = [np.zeros(d) for _ in self._graph]

    def ask(self, t: int, k: int, party: ADMMParty, rng: np.random.Generator | None) -> Any:
        del t
        heard = self._broadcasts
        return party.local_step(
            [heard[j] for j in self._graph[k]],
            perturbation=self._perturbation,
            extra=self._phis[k],
            zeta=self._zetas[k],
            rng=rng,
            sigma=None if self._sigmas is None else self._sigmas[k],
            gradient_bound=None if self._gradient_bounds is None else self._gradient_bounds[k],
            release_epsilon=(None if self._release_epsilons is None else self._release_epsilons[k]),
        )

    def combine(self, t: int, answers: list[Any], parties: Sequence[Any]) -> None:
        del t
        graph = self._graph

        def dual_update(p: int, site: ADMMParty) -> None:
            site.dual_update([answers[j] for j in graph[p]])

        site_round(parties, dual_update)
        self._broadcasts = answers

    def result(self, rng: np.random.Generator | None) -> FloatArray:
        del rng
        averaged: FloatArray = np.mean(np.stack(self._broadcasts), axis=0)
        return averaged


def coordinate(
    sites: Sequence[ADMMParty],
    graph: Sequence[Sequence[int]],
    *,
    d: int,
    iterations: int,
    perturbation: str,
    phis: Sequence[float],
    zetas: Sequence[float],
    rng: np.random.Generator | None,
    clock: RoundClock,
    sigmas: Sequence[float | None] | None = None,
    gradient_bounds: Sequence[float | None] | None = None,
    release_epsilons: Sequence[float | None] | None = None,
) -> FloatArray:
    """The network (:class:`_Network`) over ``sites``: T iterations, then the average of the
    final broadcasts."""
    network = _Network(
        graph,
        d=d,
        iterations=iterations,
        perturbation=perturbation,
        phis=phis,
        zetas=zetas,
        sigmas=sigmas,
        gradient_bounds=gradient_bounds,
        release_epsilons=release_epsilons,
    )
    return run_rounds(network, sites, rng=rng, clock=clock)


def _local_step_numbers(own: ADMMSitePlan) -> dict[str, Any]:
    """Site p's calibrated numbers for its local step, from its plan."""
    return {
        "extra": own.phi,
        "zeta": 0.0 if own.zeta is None else own.zeta,
        "sigma": own.sigma,
        "gradient_bound": own.gradient_bound,
        "release_epsilon": own.release_epsilon,
    }


class ADMM(FederatedProtocol[ADMMPlan]):
    """ADMM's own steps within the shared skeleton (:mod:`.protocol`)."""

    name = NAME
    plan_type = ADMMPlan
    steps = ("local_step", "dual_update")

    def calibrate(self, problem: FederatedProblem) -> FederatedCalibration:
        return calibrate(problem)

    def party(
        self, problem: FederatedProblem, plan: ADMMPlan, index: int, X: FloatArray, y: FloatArray
    ) -> ADMMSite:
        return ADMMSite(
            index,
            X,
            y,
            loss=problem.loss_object(),
            regularization=plan.regularization,
            total=plan.total,
            penalty=plan.penalty,
        )

    def coordinator(self, problem: FederatedProblem, plan: ADMMPlan) -> Coordinator:
        del problem
        sites = plan.sites
        return _Network(
            plan.neighbours,
            d=plan.d,
            iterations=plan.iterations,
            perturbation=plan.perturbation,
            phis=[s.phi for s in sites],
            zetas=[0.0 if s.zeta is None else s.zeta for s in sites],
            sigmas=[s.sigma for s in sites],
            gradient_bounds=[s.gradient_bound for s in sites],
            release_epsilons=[s.release_epsilon for s in sites],
        )

    def perform(
        self,
        site: Any,
        plan: ADMMPlan,
        step: str,
        points: list[FloatArray],
        rng: np.random.Generator | None,
    ) -> FloatArray | None:
        assert isinstance(site, ADMMSite)
        exactly(points, len(plan.neighbours[site.index]))
        if step == "dual_update":
            site.dual_update(points)
            return None
        return site.local_step(
            points,
            perturbation=plan.perturbation,
            rng=rng,
            **_local_step_numbers(plan.sites[site.index]),
        )


PROTOCOL: Final[ADMM] = ADMM()
#: Site ``index`` of a fit, holding (X, y): the in-process fit and a node build it alike.
party = PROTOCOL.local_party
#: The network over local :class:`ADMMSite` objects or proxies of sites on nodes.
run_parties = PROTOCOL.run_parties
run = PROTOCOL.run
