"""admm: per-iteration α from T (basic, and advanced at δ′ when tighter), DVP's κ/ᾱ/Φ/α̂ with
ζ = α̂/2 and the Φ-branch fix, PVP's sensitivity, topologies; non-private ADMM reaches the
centralised minimiser.

DVP releases each round's broadcast as a certified minimiser (:mod:`service.dp.optimize.certified`):
per site p the round's α is split into α_r = fl(α·κ_p) for the release noise and
α₁ = α − α_r for the step objective, κ_p = min(½, √(B_pτ₀)/(1 + √(B_pτ₀))),
τ₀ = 10⁻¹⁰ + 8(min(B_p, 4096) + d)u; every DVP formula (ᾱ_p ≤ α₁/2, Φ_p, α̂_p, ζ_p) runs at
α₁. α₁ is derived by hand in :mod:`tests.unit.dp._budget` (``objective_budget``); its values
are spelled out at each test."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from service.dp.core.accounting import PrivacyCost, advanced_composition
from service.dp.core.losses import LogisticLoss
from service.dp.federated import federated_calibrate, federated_fit
from service.dp.optimize.solvers import erm_gradient, minimize_erm
from tests.unit.dp._budget import objective_budget, release_budget
from tests.unit.dp._laws import gamma_norms_fit_only_at_the_right_scale
from tests.unit.dp.federated._data import make_sites, pooled


def _cal(sizes: tuple[int, ...], eps: float, **params: Any) -> Any:
    delta = params.pop("delta", 0.0)
    lam = params.pop("regularization", 0.01)
    return federated_calibrate(
        "admm", site_sizes=sizes, d=5, epsilon=eps, delta=delta, regularization=lam, **params
    )


def test_basic_composition_alpha_is_eps_over_t() -> None:
    cal = _cal((100, 200), 1.0, iterations=50)
    det = cal.details
    assert det["alpha"] == pytest.approx(0.02, rel=1e-12)
    assert 50 * det["alpha"] <= 1.0
    assert det["composition_method"] == "basic"
    assert det["advanced_total"] is None
    assert [c.delta for c in cal.site_costs] == [0.0, 0.0]
    assert all(c.epsilon <= 1.0 for c in cal.site_costs)
    assert cal.rounds == 50


def test_basic_charge_is_never_below_the_exact_t_alpha() -> None:
    # ε = 0.1 over T = 7: α = 0.014285714285714284 and 7·α in doubles is 0.09999999999999998,
    # below the exact 7·fl(α); the charge is that sum rounded up (still ≤ ε)
    cal = _cal((100,), 0.1, iterations=7)
    alpha = cal.details["alpha"]
    assert alpha == 0.014285714285714284
    charged = cal.site_costs[0].epsilon
    assert 7 * Fraction(alpha) <= Fraction(charged) <= Fraction(0.1)
    assert cal.details["basic_total"]["epsilon"] == charged


def test_advanced_composition_is_chosen_when_tighter() -> None:
    # T = 100 at α = 0.01, δ′ = 1e-5: 0.01·√(200 ln 1e5) + 100·0.01·(e^0.01 − 1) = 0.4899027583
    # (seed 004 note §2.6: "T = 100 at α = 0.01 → ≈ 0.49"); basic would be 1.0
    eps = 0.48990275830297614
    cal = _cal((100, 200), eps, iterations=100, delta=1e-5, delta_prime=1e-5)
    det = cal.details
    assert det["alpha"] == pytest.approx(0.01, rel=1e-9)
    assert det["composition_method"] == "advanced"
    assert det["basic_total"]["epsilon"] == pytest.approx(1.0, rel=1e-9)
    assert det["advanced_total"]["epsilon"] == pytest.approx(eps, rel=1e-12)
    assert det["advanced_total"]["delta"] == 1e-5
    for cost in cal.site_costs:
        assert cost.epsilon <= eps
        assert cost.delta == 1e-5
    assert "advanced composition" in cal.composition
    assert "basic composition would give" in cal.composition


def test_basic_is_kept_when_advanced_is_looser() -> None:
    # T = 2 at α = 0.1: basic 0.2 < advanced 0.1·√(4 ln 1e5) + 2·0.1·(e^0.1 − 1) ≈ 0.70
    cal = _cal((100,), 0.2, iterations=2, delta=1e-5, delta_prime=1e-5)
    det = cal.details
    assert det["alpha"] == pytest.approx(0.1, rel=1e-12)
    assert det["composition_method"] == "basic"
    expected_adv = advanced_composition(PrivacyCost(det["alpha"]), 2, 1e-5).epsilon
    assert det["advanced_total"]["epsilon"] == pytest.approx(expected_adv)
    assert cal.site_costs[0].delta == 0.0


def test_dvp_without_phi_uses_half_alpha_hat() -> None:
    # K = 2, n = (1000, 3000), N = 4000, d = 5, λ = 0.01, η = 0.001, complete graph (degree 1),
    # T = 1, α = 1:
    # s_0 = λ·1000 + 2·4000·0.001·1 = 18, κ = 0.25/18, ᾱ = 2 ln(1 + 0.25/18) = 0.02758664426467154
    # s_1 = 30 + 8 = 38, ᾱ = 2 ln(1 + 0.25/38) = 0.013114801092318079
    # The step objective runs at α₁ (u = 2⁻⁵³):
    # site 0: τ₀ = 1e-10 + 8·1005u = 1.0089261931e-10, √(1000τ₀) = 3.1763598554e-4,
    #   κ_0 = 3.1753512496e-4, α_r = 3.1753512496e-4, α₁ = 0.9996824648750394;
    # site 1: τ₀ = 1e-10 + 8·3005u = 1.0266897615e-10, √(3000τ₀) = 5.5498371909e-4,
    #   κ_1 = 5.5467588300e-4, α_r = 5.5467588300e-4, α₁ = 0.9994453241169956.
    # ᾱ ≤ α₁/2 at both, so Φ = 0 and α̂ = α₁ − ᾱ:
    # site 0: α̂ = 0.9996824648750394 − 0.02758664426467154 = 0.9720958206103679, ζ = 0.486047910305
    # site 1: α̂ = 0.9994453241169956 − 0.013114801092318079 = 0.9863305230246775,
    #   ζ = 0.493165261512
    alpha_1 = (objective_budget(1.0, 1000, 5), objective_budget(1.0, 3000, 5))
    assert alpha_1[0] == pytest.approx(0.9996824648750394, rel=1e-12)
    assert alpha_1[1] == pytest.approx(0.9994453241169956, rel=1e-12)
    cal = _cal((1000, 3000), 1.0, iterations=1, penalty=0.001, perturbation="dual")
    s0, s1 = cal.details["sites"]
    assert s0["kappa"] == pytest.approx(0.25 / 18, rel=1e-12)
    assert s0["alpha_bar"] == pytest.approx(0.02758664426467154, rel=1e-12)
    assert s0["branch"] == "no_Phi"
    assert s0["Phi"] == 0.0
    assert s0["alpha_objective"] == alpha_1[0]
    assert s1["alpha_objective"] == alpha_1[1]
    assert s0["release_epsilon"] == pytest.approx(3.1753512496e-4, rel=1e-9)
    assert s1["release_epsilon"] == pytest.approx(5.5467588300e-4, rel=1e-9)
    assert s0["release_epsilon"] == release_budget(1.0, 1000, 5)
    assert s0["alpha_hat"] == pytest.approx(0.9720958206103679, rel=1e-12)
    assert s0["alpha_hat"] == pytest.approx(alpha_1[0] - 0.02758664426467154, rel=1e-12)
    assert s0["zeta"] == pytest.approx(0.9720958206103679 / 2, rel=1e-12)
    assert s1["alpha_hat"] == pytest.approx(0.9863305230246775, rel=1e-12)
    assert s1["alpha_hat"] == pytest.approx(alpha_1[1] - 0.013114801092318079, rel=1e-12)
    assert s1["zeta"] == pytest.approx(0.9863305230246775 / 2, rel=1e-12)
    # not the algorithm box's ζ = α̂
    assert s0["zeta"] != pytest.approx(s0["alpha_hat"])


def test_dvp_phi_branch_is_taken_whenever_alpha_bar_exceeds_half_alpha() -> None:
    # one site, n = 100, d = 5, λ = 0.005: s = 0.5, κ = 0.5, ᾱ = 2 ln 1.5 = 0.8109302162163288;
    # α = 1, and the step objective runs at α₁: τ₀ = 1e-10 + 8·105u = 1.0009325873e-10,
    # √(100τ₀) = 1.0004661850e-4, κ_p = 1.0003661018e-4, α₁ = 0.9998999633898239.
    # ᾱ < α₁: Alg. 2 as printed keeps Φ = 0 with α̂ = 0.189; the fix takes (ᾱ > α₁/2)
    # Φ = c/(N(e^{α₁/4} − 1)) − λ = 0.25/(100·0.2839933047017736) − 0.005
    # = 0.003803024432654476, α̂ = α₁/2 = 0.49994998169491195, ζ = α₁/4 = 0.24997499084745597,
    # and the Jacobian term 2 ln(1 + c/(s + NΦ)) = 2 ln e^{α₁/4} = α₁/2
    alpha_1 = objective_budget(1.0, 100, 5)
    assert alpha_1 == pytest.approx(0.9998999633898239, rel=1e-12)
    cal = _cal((100,), 1.0, iterations=1, regularization=0.005, perturbation="dual")
    (site,) = cal.details["sites"]
    assert site["alpha_bar"] == pytest.approx(0.8109302162163288, rel=1e-12)
    assert site["alpha_objective"] == alpha_1
    assert site["branch"] == "Phi"
    assert site["Phi"] == pytest.approx(0.003803024432654476, rel=1e-10)
    assert site["Phi"] == pytest.approx(0.25 / (100 * math.expm1(alpha_1 / 4)) - 0.005, rel=1e-10)
    assert site["alpha_hat"] == pytest.approx(0.49994998169491195, rel=1e-12)
    assert site["alpha_hat"] == alpha_1 / 2
    assert site["zeta"] == alpha_1 / 4
    assert site["jacobian_epsilon"] == pytest.approx(alpha_1 / 2, rel=1e-12)


def test_dvp_reproduces_the_seed_004_illustration() -> None:
    # note §2.3: c1 = 1/4, C^R = 1750, ρ = 10^-2.5, B_p = 48842, α = 0.5, ηN_p = 0:
    # κ ≈ 2.83, Φ branch, Φ ≈ 0.064 (in the paper's ρ units, i.e. ×C^R here), α̂ = 0.25, ζ = 0.125.
    # κ = c/(λB_p) = 2.832595873 and the branch do not depend on α. The rest runs at α₁ (d = 5):
    # τ₀ = 1e-10 + 8·(4096 + 5)u = 1.0364241970e-10, √(48842τ₀) = 2.2499117900e-3,
    # κ_p = 2.2448610507e-3, α_r = 0.5κ_p = 1.1224305253e-3, α₁ = 0.4988775694746539:
    # e^{α₁/4} − 1 = 0.1328305275717048, Φ·C^R = 1750·(0.25/(48842·0.1328305275717048) − λ)
    # = 0.06427293 (0.06411191 at α: the paper's 0.064 still holds to its digits),
    # α̂ = α₁/2 = 0.24943878473732695, ζ = α₁/4 = 0.12471939236866347 (the paper's 0.25 and
    # 0.125 less the release's 0.22 %)
    lam = 10**-2.5 / 1750  # ρ/C^R
    alpha_1 = objective_budget(0.5, 48842, 5)
    assert alpha_1 == pytest.approx(0.4988775694746539, rel=1e-12)
    cal = _cal((48842,), 0.5, iterations=1, regularization=lam, perturbation="dual")
    (site,) = cal.details["sites"]
    assert site["kappa"] == pytest.approx(2.83, abs=0.005)
    assert site["branch"] == "Phi"
    assert site["Phi"] * 1750 == pytest.approx(0.064, abs=0.0005)
    assert site["Phi"] * 1750 == pytest.approx(0.06427293330706442, rel=1e-10)
    assert site["alpha_objective"] == alpha_1
    assert site["release_epsilon"] == pytest.approx(1.1224305253460653e-3, rel=1e-10)
    assert site["alpha_hat"] == pytest.approx(0.25, rel=2.3e-3)
    assert site["alpha_hat"] == pytest.approx(0.24943878473732695, rel=1e-12)
    assert site["alpha_hat"] == alpha_1 / 2
    assert site["zeta"] == pytest.approx(0.125, rel=2.3e-3)
    assert site["zeta"] == alpha_1 / 4


def test_pvp_sensitivity_includes_the_penalty() -> None:
    # Δ_p = 2/(λB_p + 2NηN_p): 2/(10 + 8) = 1/9 and 2/(30 + 8) = 1/19; α = 0.5/5 = 0.1;
    # the solver's slack S = 10⁻⁴ widens it to Δ_p(1 + S), so ζ_p = 0.1/(Δ_p·1.0001)
    cal = _cal((1000, 3000), 0.5, iterations=5, penalty=0.001, perturbation="primal")
    s0, s1 = cal.details["sites"]
    assert s0["sensitivity_exact_minimiser"] == pytest.approx(1 / 9, rel=1e-12)
    assert s1["sensitivity_exact_minimiser"] == pytest.approx(1 / 19, rel=1e-12)
    assert s0["sensitivity"] == pytest.approx(1.0001 / 9, rel=1e-12)
    assert s1["sensitivity"] == pytest.approx(1.0001 / 19, rel=1e-12)
    assert s0["gradient_bound"] == pytest.approx(1e-4 / 1000, rel=1e-12)
    assert s0["zeta"] == pytest.approx(0.9 / 1.0001, rel=1e-12)
    assert s1["zeta"] == pytest.approx(1.9 / 1.0001, rel=1e-12)
    assert s0["expected_noise_norm"] == pytest.approx(5 / (0.9 / 1.0001), rel=1e-12)


def test_default_penalty_formula() -> None:
    # η = 0.3·√(λ(c + λ))/(2K·N̄): λ = 0.01, c = 1/4, K = 4, ring (N̄ = 2): 0.3·√0.0026/16
    cal = _cal((100,) * 4, 1.0, topology="ring")
    assert cal.details["penalty"] == pytest.approx(0.3 * math.sqrt(0.0026) / 16, rel=1e-12)
    assert cal.details["penalty_default"] is True
    assert cal.details["neighbours"] == [[1, 3], [0, 2], [1, 3], [0, 2]]


def test_none_is_not_private_and_charges_nothing() -> None:
    cal = _cal((100, 200), float("inf"), perturbation="none")
    assert not cal.private
    assert [(c.epsilon, c.delta) for c in cal.site_costs] == [(0.0, 0.0), (0.0, 0.0)]
    assert "not differentially private" in cal.notes[0]


@pytest.mark.parametrize(
    ("params", "rule"),
    [
        ({"perturbation": "both"}, "perturbation must be one of"),
        ({"topology": "star"}, "topology must be one of"),
        ({"adjacency": [[1], []]}, "symmetric"),
        ({"adjacency": [[1], [0], []]}, "exactly|neighbours of each"),
        ({"adjacency": [[0, 1], [1, 1]]}, "its own neighbour"),
        ({"adjacency": [[1], [0]], "topology": "ring"}, "either topology or adjacency"),
        ({"penalty": 0.0}, "penalty must be a finite number > 0"),
        ({"delta_prime": 1e-3}, "must not exceed the delta offered"),
        ({"iterations": 0}, "iterations must be an integer between 1"),
        ({"rho": 1.0}, "unknown parameter"),
    ],
)
def test_bad_params(params: dict[str, Any], rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        _cal((100, 200), 1.0, delta=1e-5, **params)


def test_graph_must_be_connected() -> None:
    with pytest.raises(ValueError, match="connected"):
        _cal((100,) * 4, 1.0, adjacency=[[1], [0], [3], [2]])


def test_adjacency_matrix_and_lists_agree() -> None:
    lists = _cal((100,) * 3, 1.0, adjacency=[[1], [0, 2], [1]])
    matrix = _cal((100,) * 3, 1.0, adjacency=[[0, 1, 0], [1, 0, 1], [0, 1, 0]])
    assert lists.details["neighbours"] == matrix.details["neighbours"] == [[1], [0, 2], [1]]
    assert lists.details["sites"][1]["degree"] == 2


@pytest.mark.parametrize(
    "graph",
    [
        {"topology": "complete"},
        {"topology": "ring"},
        {"adjacency": [[1], [0, 2], [1, 3], [2]]},  # a path
    ],
)
def test_non_private_admm_reaches_the_centralised_minimiser(graph: dict[str, Any]) -> None:
    sites = make_sites((150, 250, 300, 200), 4, seed=7)
    lam = 0.05
    X, y = pooled(sites)
    w_star = minimize_erm(X, y, LogisticLoss(), regularization=lam)
    result = federated_fit(
        sites,
        "admm",
        epsilon=float("inf"),
        regularization=lam,
        perturbation="none",
        iterations=150,
        **graph,
    )
    assert np.linalg.norm(result.coef - w_star) < 1e-4
    assert not result.calibration.private
    assert result.rounds_run == 150


@pytest.mark.parametrize("perturbation", ["dual", "primal"])
def test_private_admm_with_a_huge_budget_approaches_the_minimiser(perturbation: str) -> None:
    sites = make_sites((150, 250, 300), 3, seed=8)
    lam = 0.05
    X, y = pooled(sites)
    w_star = minimize_erm(X, y, LogisticLoss(), regularization=lam)
    result = federated_fit(
        sites,
        "admm",
        epsilon=1e7,
        regularization=lam,
        perturbation=perturbation,
        iterations=60,
        rng=np.random.default_rng(1),
    )
    assert np.linalg.norm(result.coef - w_star) < 1e-3


# One site of 400 rows (degree 0), d = 3, T = 1, ε = 1 so α = 1; logistic c = 1/4. DVP's
# step objective runs at α₁: τ₀ = 1e-10 + 8·403u = 1.0035793590e-10, √(400τ₀) = 2.0035761618e-4,
# κ_p = 2.0031748105e-4, α_r = 2.0031748105e-4, α₁ = 0.9997996825189531. By hand:
# * DVP, λ = 0.2: s = λB = 80, ᾱ = 2 ln(1 + 0.25/80) = 0.0062402547 ≤ α₁/2, so Φ = 0 and
#   ζ = (α₁ − ᾱ)/2 = 0.4967797139;
# * DVP, λ = 0.001: s = 0.4, ᾱ = 2 ln(1 + 0.25/0.4) = 0.971 > α₁/2, so
#   Φ = c/(N(e^{α₁/4} − 1)) − λB/N = 0.25/(400·0.2839611151) − 0.001 = 0.0012010056 and
#   ζ = α₁/4 = 0.2499499206;
# * PVP, λ = 0.2: Δ = 2/(λB) = 0.025 with the solver slack 1 + 10⁻⁴, ζ = α/(Δ(1 + S))
#   = 39.9960004.
ONE_STEP_LAWS = {
    ("dual", 0.2): ("no_Phi", 0.0, 0.4967797139),
    ("dual", 0.001): ("Phi", 0.0012010056, 0.2499499206),
    ("primal", 0.2): (None, 0.0, 39.99600040),
}
ALPHA_1_ONE_STEP = objective_budget(1.0, 400, 3)
# DVP's broadcast is the certified release γ·round((f̂ + Z)/γ), Z ∝ exp(−β_r‖z‖),
# β_r = α_r/(2r), r = τ/μ, τ = (1 + L)(1e-10 + 8·403u + …) with L = (d + 10√d + 10)/(ζB) the
# public bound on the noise term (no neighbours, so no other linear term): for λ = 0.2
# (μ = 0.2, L = 0.153) τ = 1.157e-10, r = 5.8e-10, β_r = 1.7e5, E‖Z‖ = d/β_r = 1.7e-5; for
# λ = 0.001 (μ = λ + Φ = 0.0022, L = 0.303) τ = 1.31e-10, r = 6.0e-8, β_r = 1.7e3,
# E‖Z‖ = 1.8e-3. The noise recovered from the gradient at the release moves by at most
# B(c + λ + Φ)‖Z‖: on average 3.1e-3 and 0.18 against E‖ε‖ = d/ζ = 6.0 and 12.0 (0.05 % and
# 1.5 %), well inside the Kolmogorov–Smirnov test's resolution at 300 draws (≈ 0.13 in the
# statistic at p = 10⁻⁴), which still rejects half and twice the noise.


@pytest.mark.statistical
@pytest.mark.parametrize(("perturbation", "regularization"), sorted(ONE_STEP_LAWS))
def test_one_step_noise_follows_the_hand_derived_law(
    perturbation: str, regularization: float
) -> None:
    """One iteration on one site: DVP is objective perturbation, so the noise is recovered from
    the release as ε = −n∇[(1/n)Σl + ((λ + Φ)/2)‖·‖²](f) (up to the certified release's tiny
    Z, bounded above); PVP's is V − f*. Either way
    ‖noise‖ ~ Gamma(d, 1/ζ) with ζ (and Φ) derived by hand above, not read from the
    calibration; half and twice the noise are rejected by the same test."""
    branch, phi, zeta = ONE_STEP_LAWS[(perturbation, regularization)]
    sites = make_sites((400,), 3, seed=9)
    X, y = sites[0]
    loss = LogisticLoss()
    w_star = minimize_erm(X, y, loss, regularization=regularization)
    rng = np.random.default_rng(5)
    norms = []
    for _ in range(300):
        result = federated_fit(
            sites,
            "admm",
            epsilon=1.0,
            regularization=regularization,
            iterations=1,
            perturbation=perturbation,
            rng=rng,
        )
        if perturbation == "dual":
            grad = erm_gradient(
                X,
                y,
                loss,
                result.coef,
                regularization=regularization,
                extra_regularization=phi,
            )
            noise = -400 * grad
        else:
            noise = result.coef - w_star
        norms.append(float(np.linalg.norm(noise)))
    (site,) = result.calibration.details["sites"]
    assert site["zeta"] == pytest.approx(zeta, rel=1e-8)
    if perturbation == "dual":
        assert site["alpha_objective"] == ALPHA_1_ONE_STEP
        assert site["alpha_objective"] == pytest.approx(0.9997996825189531, rel=1e-12)
    assert site["Phi"] == pytest.approx(phi, rel=1e-7, abs=1e-15)
    if branch is not None:
        assert site["branch"] == branch
    # the test has the power to notice half and twice the noise
    gamma_norms_fit_only_at_the_right_scale(norms, 3, zeta)


@pytest.mark.parametrize(("eps", "advanced"), [(10.0, True), (1e4, False)])
def test_large_per_iteration_alpha_keeps_basic(eps: float, advanced: bool) -> None:
    # α = ε/T ≥ ln 2: the advanced bound Tα(e^α − 1) + … exceeds Tα, so basic is kept; at
    # α = 1000 e^α overflows and the advanced bound is not even reported
    cal = _cal((100,), eps, iterations=10, delta=1e-5, delta_prime=1e-5)
    assert cal.details["composition_method"] == "basic"
    assert cal.details["alpha"] == pytest.approx(eps / 10, rel=1e-12)
    assert (cal.details["advanced_total"] is not None) is advanced
    assert cal.site_costs[0].delta == 0.0


def test_dvp_round_release_noise_is_hand_derived(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan of a DVP round's certified release, by hand, at the first round (duals and
    broadcasts 0, so the public linear term is 0): one site of B = 100 rows, d = 5, λ = 0.005,
    α = 1 (T = 1): α₁ from tests/unit/dp/_budget, the Φ branch (ᾱ = 2 ln 1.5 > α₁/2):
    Φ = c/(N(e^{α₁/4} − 1)) − λ, ζ = α₁/4; the step's ridge is (N/B)Φ = Φ, so μ = λ + Φ;
    L = (d + 10√d + 10)/ζ/B; τ = (1 + L)(1e-10 + 8(100 + 5)u + γ₅/μ₋); β_r = α_r/(2τ/μ₋)."""
    from service.dp.optimize import certified

    plans: list[certified.CertifiedRelease] = []
    original = certified.release_minimiser

    def spy(*args: Any, **kwargs: Any) -> Any:
        plans.append(kwargs["release"])
        return original(*args, **kwargs)

    monkeypatch.setattr(certified, "release_minimiser", spy)
    sites = make_sites((100,), 5, seed=3)
    federated_fit(
        sites,
        "admm",
        epsilon=1.0,
        regularization=0.005,
        perturbation="dual",
        iterations=1,
        rng=np.random.default_rng(4),
    )
    (plan,) = plans
    u = 2.0**-53
    alpha_1 = objective_budget(1.0, 100, 5)
    alpha_r = release_budget(1.0, 100, 5)
    phi = 0.25 / (100 * math.expm1(alpha_1 / 4.0)) - 0.005
    zeta = alpha_1 / 4.0
    mu = (0.005 + phi) * (1 - 4 * u)
    bound = (5 + 10 * math.sqrt(5) + 10) / zeta / 100
    gamma5 = 5 * u / (1 - 5 * u) * (1 + 2.0**-20)
    tau = (1 + bound) * (1e-10 + 8 * 105 * u + 4 * 0.25 * gamma5 / mu)
    assert plan.epsilon == alpha_r
    assert plan.linear_bound == pytest.approx(bound, rel=1e-12)
    assert plan.tolerance == pytest.approx(tau, rel=1e-9)
    assert plan.beta == pytest.approx(alpha_r / (2 * tau / mu), rel=1e-9)
