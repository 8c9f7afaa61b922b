"""The floating-point attack of issue 19 §1 against the old sampler, and the exact grid release.

Old sampler (kept here, as it was in ``service.dp.noise.draws`` and used by output perturbation):
b = θ·gammaincinv(d, U)·g/‖g‖ with U = (k + ½)·2⁻⁵² from a 52-bit CSPRNG word k, released as
round((ŵ + b)/γ)·γ, γ = 2⁻³². In the upper tail consecutive reachable norms are θ·ln((j+½)/(j−½))
≈ θ/j apart (j = 2⁵² − k), far more than γ, so the released set under a centre w and the set
under w′ = w + Δ barely overlap there: an output reachable under one is impossible under the
other, and the mechanism is at best (ε, δ)-DP with δ ≥ the probability of those outputs.

New release (:mod:`service.dp.noise.lattice`): the cell round((w + X)/γ) of the *real* X is sampled
exactly; its law is P_w(o) = ∫_{cell o} p(x − w) dx, positive everywhere, and
P_w(o)/P_w′(o) ≤ e^{β‖w − w′‖} cell by cell. The tests check that pmf, derived by hand, at the
very outputs of the attack, and check by chi-square that the sampler follows it.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from service.dp.mechanisms.output_perturbation import MECHANISM as OUTPUT_PERTURBATION
from service.dp.noise import draws as noise
from service.dp.noise import lattice
from service.dp.noise.lattice import exact

GAMMA = 2.0**-32
EPS = 1.0
THETA = 20.0  # 1/β, as in the measurements
BETA = 1.0 / THETA
DELTA_W = EPS / BETA  # ‖w − w′‖ = Δ: the neighbours sit at exactly the sensitivity
TOP = 2**15  # the 2^15 largest CSPRNG words: every norm ≥ θ·ln(2^52/2^15) ≈ 513


def _old_uniform(k: np.ndarray) -> np.ndarray:
    """The old ``noise.uniforms``: (k + ½)·2⁻⁵² for the 52-bit word k."""
    return (k.astype(np.float64) + 0.5) * 2.0**-52


def _old_cells(w: float, k: np.ndarray, sign: float) -> np.ndarray:
    """Grid index of the old d = 1 release round((w + θ·P⁻¹(1, U_k)·sign)/γ)."""
    r = THETA * special.gammaincinv(1.0, _old_uniform(k))
    return np.round((w + r * sign) / GAMMA).astype(np.int64)


def _word_bytes(k: int) -> bytes:
    """The 8 CSPRNG bytes whose top 52 bits are k (``noise.uniforms`` keeps raw >> 12)."""
    return np.array([k << 12], dtype=np.uint64).tobytes()


def _old_release_from_words(w: float, words: list[int], monkeypatch: pytest.MonkeyPatch) -> float:
    """The old d = 1 release drawn through ``noise.uniforms`` with chosen CSPRNG words."""
    stream = b"".join(_word_bytes(k) for k in words)
    position = [0]

    def urandom(count: int) -> bytes:
        out = stream[position[0] : position[0] + count]
        position[0] += count
        return out

    monkeypatch.setattr("os.urandom", urandom)
    r = THETA * float(special.gammaincinv(1.0, noise.uniforms(1)[0]))
    g = float(special.ndtri(noise.uniforms(1)[0]))
    return float(noise.round_to_grid(np.array([w + r * g / abs(g)]))[0])


@functools.cache
def _attack() -> tuple[np.ndarray, np.ndarray, int]:
    """Grid outputs of the old release under w = 0 and w′ = Δ (positive direction) for the
    top words, and the smallest index both enumerations cover completely."""
    k = np.arange(2**52 - TOP, 2**52, dtype=np.int64)
    under_d = _old_cells(0.0, k, 1.0)
    under_d_prime = _old_cells(DELTA_W, k, 1.0)
    # the old inverse CDF is monotone in the word (checked on the enumerated range), so every
    # word below the range gives a smaller output: above this index, D′'s reachable set is
    # exactly what is enumerated (its negative direction stays below w′ = Δ)
    assert np.all(np.diff(under_d_prime) >= 0)
    covered = int(under_d_prime[0])
    return under_d, under_d_prime, covered


def test_the_old_sampler_releases_outputs_impossible_under_the_neighbour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    under_d, under_d_prime, covered = _attack()
    tail = under_d[under_d > covered]
    impossible = np.setdiff1d(tail, under_d_prime)
    assert impossible.size > 0.99 * np.unique(tail).size  # almost no tail output is shared
    # δ ≥ P_D[output in the impossible set] (its probability under D′ is 0): each word has
    # probability 2^-52 and the positive direction 1/2
    words = np.isin(under_d, impossible).sum()
    delta_lower = words * 2.0**-52 / 2.0
    assert delta_lower > 0.0
    # the witness: chosen CSPRNG words make the real sampler code emit it under D
    k_witness = int(2**52 - TOP + np.flatnonzero(under_d == impossible[-1])[0])
    released = _old_release_from_words(0.0, [k_witness, 2**51 + 1], monkeypatch)
    assert round(released / GAMMA) == impossible[-1]
    # and D′ jumps over it: the neighbouring words land on both sides
    i = np.searchsorted(under_d_prime, impossible[-1])
    assert under_d_prime[i - 1] < impossible[-1] < under_d_prime[i]


def _log_cell_pmf(o: np.ndarray, w: float, beta: float, gamma: float) -> np.ndarray:
    """ln P_w(o) for the 1-d exact release: ∫ over [(o−½)γ, (o+½)γ] of (β/2)e^{−β|x − w|}.

    For a cell above w: ½e^{−β(lo − w)}(1 − e^{−βγ}); below w: the mirror image; a cell that
    contains w: 1 − ½e^{−β(w − lo)} − ½e^{−β(hi − w)}."""
    lo, hi = (o - 0.5) * gamma, (o + 0.5) * gamma
    above = math.log(0.5) - beta * (lo - w) + math.log(-math.expm1(-beta * gamma))
    below = math.log(0.5) - beta * (w - hi) + math.log(-math.expm1(-beta * gamma))
    # only used where lo < w < hi; clipping keeps the other cells' (discarded) values finite
    near_lo, near_hi = np.clip(w - lo, 0.0, gamma), np.clip(hi - w, 0.0, gamma)
    inside = np.log(-0.5 * np.expm1(-beta * near_lo) - 0.5 * np.expm1(-beta * near_hi))
    return np.where(lo >= w, above, np.where(hi <= w, below, inside))


def test_the_exact_release_keeps_every_attack_output_within_e_eps() -> None:
    under_d, under_d_prime, _ = _attack()
    outputs = np.unique(np.concatenate([under_d, under_d_prime])).astype(np.float64)
    # and cells everywhere else: around both centres, between them, far on either side
    centre_prime = DELTA_W / GAMMA
    around = np.arange(-5.0, 6.0)
    span = np.round(np.linspace(-50 * centre_prime, 50 * centre_prime, 2001))
    o = np.concatenate([outputs, span, around, centre_prime + around])
    log_d = _log_cell_pmf(o, 0.0, BETA, GAMMA)
    log_d_prime = _log_cell_pmf(o, DELTA_W, BETA, GAMMA)
    assert np.all(np.isfinite(log_d))  # every output is reachable under both
    assert np.all(np.isfinite(log_d_prime))
    assert np.max(np.abs(log_d - log_d_prime)) <= EPS * (1.0 + 1e-9)
    # in the tail the bound is attained: the ratio is exactly e^{βΔ} = e^ε there
    tail = o > DELTA_W / GAMMA + 1.0
    assert np.allclose(log_d[tail] - log_d_prime[tail], -EPS, rtol=0.0, atol=1e-9)


def test_output_perturbation_releases_through_the_exact_grid_sampler() -> None:
    from service.dp.core.base import Problem

    problem = Problem("output_perturbation", 50, 1, EPS, 0.0, "logistic", 0.1)
    cal = OUTPUT_PERTURBATION.calibrate(problem)
    assert cal.details["release"] == lattice.RELEASE_NOTE
    X = np.array([[0.5]] * 25 + [[-0.5]] * 25)
    y = np.array([1.0] * 25 + [-1.0] * 25)
    rng = np.random.default_rng(7)
    coef = OUTPUT_PERTURBATION.run(X, y, problem, cal, rng=rng, progress=None).coef  # type: ignore[attr-defined]
    assert coef is not None
    assert coef[0] / GAMMA == round(coef[0] / GAMMA)


# --- the law of the new sampler: chi-square against the hand-derived cell pmf ----------------

#: βγ: noise of a few cells, so each cell's probability is large enough to test
BETA_CELLS = 0.35


def _exact_releases(centre: np.ndarray, beta: float, n: int, rng: int | None) -> np.ndarray:
    """n exact releases at ``centre`` (rows): one :class:`lattice.NormExponentialBlock` of n
    vectors, its noise drawn at once (vectorised), when ``rng`` is a seed; n calls of
    :func:`lattice.norm_exponential_release` (a block of one vector each, as the mechanisms
    call it) on the CSPRNG when it is None. Both are the same law, n independent draws; the
    block is some twenty times cheaper per release."""
    if rng is None:
        return np.array([lattice.norm_exponential_release(centre, beta=beta) for _ in range(n)])
    block = lattice.NormExponentialBlock(n, centre.size, beta=beta, rng=np.random.default_rng(rng))
    return np.array([block.release(j, centre) for j in range(n)])


@pytest.mark.statistical
@pytest.mark.parametrize("rng_seed", [11, None], ids=["seeded", "csprng"])
def test_exact_release_follows_the_cell_pmf_in_one_dimension(rng_seed: int | None) -> None:
    beta = BETA_CELLS / GAMMA
    w = 0.3 * GAMMA + 2.0**-40  # a centre between grid points
    n = 6000
    cells = np.round(_exact_releases(np.array([w]), beta, n, rng_seed)[:, 0] / GAMMA)
    support = np.arange(-12, 13)
    probs = np.exp(_log_cell_pmf(support.astype(np.float64), w, beta, GAMMA))
    observed = np.array([(cells == c).sum() for c in support] + [(np.abs(cells) > 12).sum()])
    expected = n * np.append(probs, 1.0 - probs.sum())
    assert stats.chisquare(observed, expected).pvalue > 1e-4


def _cell_mass_2d(i: int, j: int, centre: tuple[float, float], beta_cells: float) -> float:
    """∫ over the cell (i, j) (grid units) of β²/(2π)·e^{−β‖x − c‖}: the 2-d law's density,
    normalised by ∫ e^{−βr} 2πr dr = 2π/β²."""

    def density(y: float, x: float) -> float:
        return (
            beta_cells**2
            / (2 * math.pi)
            * math.exp(-beta_cells * math.hypot(x - centre[0], y - centre[1]))
        )

    value, _ = integrate.dblquad(density, i - 0.5, i + 0.5, j - 0.5, j + 0.5, epsabs=1e-12)
    return float(value)


@pytest.mark.statistical
def test_exact_release_follows_the_cell_pmf_in_two_dimensions() -> None:
    beta_cells = 0.6
    centre = (0.25, -0.4)  # grid units
    w = np.array(centre) * GAMMA
    n = 6000
    cells = [
        tuple(int(v) for v in row)
        for row in np.round(_exact_releases(w, beta_cells / GAMMA, n, 5) / GAMMA)
    ]
    box = range(-3, 4)
    keys = [(i, j) for i in box for j in box]
    probs = np.array([_cell_mass_2d(i, j, centre, beta_cells) for i, j in keys])
    counts = dict.fromkeys(keys, 0)
    rest = 0
    for c in cells:
        if c in counts:
            counts[c] += 1
        else:
            rest += 1
    observed = np.array([counts[k] for k in keys] + [rest])
    expected = n * np.append(probs, 1.0 - probs.sum())
    assert expected.min() > 5
    assert stats.chisquare(observed, expected).pvalue > 1e-4


@pytest.mark.statistical
def test_refinement_keeps_the_law(monkeypatch: pytest.MonkeyPatch) -> None:
    """With noise of ~2³² cells and 32-bit first draws, nearly every coordinate needs more bits;
    the norm must still be Gamma(d, 1/β) (KS, law derived in the module docstring)."""
    monkeypatch.setattr(exact, "_FIRST_WORDS", 1)
    refinements = [0]
    original = exact._Sampler.refine_all

    def counting(self: exact._Sampler) -> None:
        refinements[0] += 1
        original(self)

    monkeypatch.setattr(exact._Sampler, "refine_all", counting)
    d, beta = 3, 0.5
    norms = np.linalg.norm(_exact_releases(np.zeros(d), beta, 2000, 3), axis=1)
    assert refinements[0] > 500
    assert stats.kstest(norms, stats.gamma(d, scale=1.0 / beta).cdf).pvalue > 1e-4


@pytest.mark.statistical
@pytest.mark.parametrize("law", ["gaussian", "laplace"])
def test_gaussian_and_laplace_releases_follow_their_laws(law: str) -> None:
    rng = np.random.default_rng(9)
    if law == "gaussian":
        draws = [lattice.gaussian_release(np.zeros(2), sigma=1.5, rng=rng) for _ in range(2000)]
        reference = stats.norm(scale=1.5).cdf
    else:
        draws = [lattice.laplace_release(np.zeros(2), scale=0.7, rng=rng) for _ in range(2000)]
        reference = stats.laplace(scale=0.7).cdf
    values = np.concatenate(draws)
    assert stats.kstest(values, reference).pvalue > 1e-4


def test_release_clamps_to_the_public_bound_and_checks_its_inputs() -> None:
    out = lattice.gaussian_release(np.array([1e30, -1e30]), sigma=1.0)
    assert list(out) == [2.0**20, -(2.0**20)]
    with pytest.raises(ValueError, match="finite"):
        lattice.norm_exponential_release(np.array([math.nan]), beta=1.0)
    with pytest.raises(ValueError, match="beta"):
        lattice.norm_exponential_release(np.zeros(2), beta=0.0)
    with pytest.raises(ValueError, match="sigma"):
        lattice.gaussian_release(np.zeros(2), sigma=-1.0)
    with pytest.raises(ValueError, match="scale"):
        lattice.laplace_release(np.zeros(2), scale=math.inf)
