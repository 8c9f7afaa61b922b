"""``dp_sgd``: mini-batch SGD with differentially private updates (Song, Chaudhuri & Sarwate
2013, via seed 001 §2.8 and docs/design.md §3).

Objective: J(w) = (1/n) Σ_i l(y_i wᵀx_i) + (λ/2)‖w‖², l convex with |l′| ≤ 1 (logistic or
Huber), y_i ∈ {−1, +1}. Starting from w_0 = 0, each pass (epoch) over the data draws a fresh
uniformly random permutation of the rows, cuts it into m = ⌊n/b⌋ consecutive disjoint
mini-batches B_t of sizes ⌊n/m⌋ or ⌈n/m⌉ (every row is used exactly once per pass), and
updates

    w_t = Π_R( w_{t−1} − η_t (λ w_{t−1} + o_t) ),   o_t = γ·round((ḡ_t + z_t)/γ),
    ḡ_t = (1/|B_t|) Σ_{i∈B_t} clip(∇_w l(y_i wᵀ_{t−1}x_i)),   clip(g) = g / max(1, ‖g‖),

with fresh noise z_t of density ν(z) ∝ exp(−β‖z‖) (‖z‖ ~ Gamma(shape d, scale 1/β),
direction uniform on the sphere; E‖z‖ = d/β), o_t the noisy mini-batch gradient released on
the grid γ = 2⁻³² *exactly* (:class:`service.dp.noise.lattice.NormExponentialBlock`, "Floating
point" below) and Π_R the optional projection onto the ball of radius R. Step sizes, t counting
updates from 1 across passes: ``constant`` η_t = η, ``inverse_sqrt`` η_t = η/√t (SCS13 and
seed 001 use η = 1), ``inverse`` η_t = 1/(λt).
The released model is the last iterate, rounded to the public grid.

Sensitivity of one update (replace-one neighbours D, D′ that differ in record i). The
per-example gradient ∇_w l(y wᵀx) = l′(y wᵀx)·y·x has norm |l′|·‖x‖ ≤ 1 when ‖x‖ ≤ 1; the
explicit clip makes ‖clip(g)‖ ≤ 1 hold for any row, so the guarantee does not rest on the
preprocessing. Given the same w_{t−1}, ḡ_t(D) and ḡ_t(D′) differ only in the term of record i,
hence ‖ḡ_t(D) − ḡ_t(D′)‖ = ‖g_i − g_i′‖/|B_t| ≤ 2/|B_t| ≤ 2/b_min, b_min = ⌊n/m⌋ ≥ b. The
regulariser term λw_{t−1} does not depend on the data. In floating point the computed mean
moves by at most Δ = max over the batch sizes |B| ∈ {b_min, b_max} of Δ_mean(|B|) ≥ 2/b_min
(below); the noise is calibrated with Δ.

Privacy of one update. Given w_{t−1}, the released o_t is the grid cell of ḡ_t + z_t: for
every set O of grid points, P_D[o_t ∈ O] = P[ḡ_t(D) + z ∈ C(O)] with C(O) a union of cells
that does not depend on the data, and ν(x − ḡ_t(D))/ν(x − ḡ_t(D′)) ≤ exp(β‖ḡ_t(D) − ḡ_t(D′)‖)
≤ exp(βΔ) pointwise (triangle inequality), so P_D[o_t ∈ O] ≤ e^{βΔ}·P_D′[o_t ∈ O]. With

    β = ε_pass / Δ   (the largest double with β·Δ ≤ ε_pass exactly; in exact arithmetic
                      Δ = 2/b_min and β = ε_pass · b_min / 2)

each update is ε_pass-DP (SCS13 write the same noise as Z_t/b with Z_t ∝ exp(−(ε/2)‖Z‖);
seed 001 states it as sensitivity 2η_t/b of the step). The step w_t = Π_R(w_{t−1} −
η_t(λw_{t−1} + o_t)), computed in doubles, is a deterministic function of o_t and the past
releases: post-processing, whatever its rounding.

Composition. The permutation is drawn independently of the data, so conditionally on it
record i lies in exactly one mini-batch per pass. The density of the whole iterate sequence
factorises into the conditional densities of the updates given the past; under D and D′ only
the factor of the update that touches record i differs, so one pass is ε_pass-DP (parallel
composition over disjoint batches, valid for adaptively chosen updates), and this holds for
every permutation, hence also for the mixture over permutations. E passes use record i E
times, adaptively: basic composition gives (E·ε_pass, 0) and, for any δ′ > 0, advanced
composition (Dwork, Rothblum & Vadhan 2010) gives (ε_pass√(2E ln(1/δ′)) + E·ε_pass(e^{ε_pass}
− 1), δ′). The caller passes the **total** (ε, δ) of the fit. With δ = 0, ε_pass = ε/E
(rounded down so that E·ε_pass ≤ ε exactly) and no δ is spent. With δ > 0, δ′ = δ and ε_pass
is the largest value for which the tighter of the two bounds is ≤ ε in real arithmetic
(``per_step_epsilon``; the advanced bound through its proved upper bound ``advanced_upper``,
as doubles alone can land a few ulps above ε); the calibration reports and charges the bound
actually used, rounded up: (E·ε_pass, 0) when basic is tighter (always for E = 1, and
whenever ε_pass is large, so an offered δ is then not spent), (advanced ε, δ′) otherwise.
The released last iterate is post-processing of the sequence.

Floating point (issue 19 §1). The guarantee above is for the doubles the service computes,
not only for the real-valued mechanism:

* the released o_t is sampled exactly (:mod:`service.dp.noise.lattice`: the cell of the real
  ḡ_t + z_t, z_t's law evaluated with rigorous error bounds), so the density argument applies
  to the output as computed;
* the centre ḡ_t is what the code computes (:mod:`service.dp.data.clipping`): each per-example
  multiplier is clipped against a rigorous upper bound of ‖x_i‖ to slightly less than 1, so
  every exact clipped term has norm < 1; the matrix–vector sum (any BLAS order, FMA or not) is
  within E(|B|) = γ_|B|·|B| + √d·|B|·2⁻¹⁰⁷⁴ of the exact sum (γ_k = ku/(1 − ku), u = 2⁻⁵³),
  and the division by |B| adds ≤ u‖Ŝ‖/|B| + √d·2⁻¹⁰⁷⁵; so

      ‖ḡ_t(D) − ḡ_t(D′)‖ ≤ Δ_mean(|B|) = 2/|B| + 2[(E(|B|) + u(|B| + E(|B|)))/|B| + √d·2⁻¹⁰⁷⁵]

  in the computed values (each dataset's computed mean within the bracket of its exact mean);
* the iterate w_{t−1} and the permutation are the same in both worlds (post-processing of the
  releases; data-independent), and an unchanged record's clipped gradient is the same double
  in both (:mod:`service.dp.data.clipping`, "Assumption").

The margin Δ/(2/b_min) − 1 is ≈ 3·10⁻¹³ for b = 50, d = 106 (reported as ``float_margin``);
the charged (ε, δ) is unchanged — the margin only lowers β.

Random projection (optional ``projection_dim`` k, seed 001 §2.4). Rows are mapped to Px by
a public Gaussian (or Achlioptas) matrix P ∈ R^{k×d} generated from a seed that is chosen
independently of the data (``projection_seed``, or drawn from the CSPRNG / the test rng);
SGD runs in R^k (noise in k dimensions, ‖Px‖ may exceed 1 but the per-example clip keeps the
sensitivity), and the released coefficients are folded back, coef = Pᵀw, so the model scores
original rows: coefᵀx = wᵀ(Px). Folding is post-processing.

Defaults for K classes (issue 29; :func:`multiclass_defaults`). The binary defaults (one pass,
b = min(50, n), η = 1, ``inverse_sqrt``) are kept as they are. For K classes the noise lives in
ℝ^D, D = dK, while every clipped mean gradient still has norm ≤ 1, so the per-update
noise-to-gradient ratio E‖z‖/1 = D/β = 2D/(b·ε_pass) is K times the binary one (707·2/(50·0.1)
≈ 283 on Adult marital at ε = 0.1: the gradient is lost). When ``batch_size`` is omitted the
multi-class default is the smallest batch that keeps that ratio ≤ 2,

    b = min(n, max(50, ⌈D/ε_pass⌉))   (so 2D/(b·ε_pass) ≤ 2 unless b = n),

and, when ``eta`` is omitted as well with the ``inverse_sqrt`` schedule, η = √(b/50): over the
pass's T = n/b updates the steps add up to Σ η/√t ≈ 2η√T = 2√(n/50), the same total step length
as the binary default, so the larger batches (fewer, less noisy updates) do not stop short.
Why not more passes: with basic composition E passes cut ε_pass to ε/E, and the noise of the
average over all E·n/b updates, 2DE/(ε·√(bnE)) = (2D/ε)·√(E/(bn)), grows with E. Every input of
the rule (n, d, K, ε, δ, E) is public, and ε_pass is the same per-pass budget the accounting
uses, so the rule picks options only: the privacy analysis above holds for whatever b and η it
returns, exactly as for options the caller gives. Measured on Adult marital status (K = 7) in
``benchmarks/bench_dpsgd_classes.py`` (benchmarks/RESULTS.md, "DP-SGD defaults for K classes").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from service.dp.core.accounting import (
    CompositionChoice,
    PrivacyCost,
    advanced_upper,
    best_composition,
    largest_share,
)
from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions, option
from service.dp.core.plan import plan_kind
from service.dp.core.validation import (
    PrivacyParameterError,
    check_int_in,
    check_positive_number,
)
from service.dp.data import clipping
from service.dp.data.projection import (
    ProjectionKind,
    RandomProjection,
)
from service.dp.mechanisms import multiclass
from service.dp.mechanisms._common import (
    MAX_PROJECTION_DIM,
    PROJECTION_PARAMS,
    Inputs,
    MechanismPlan,
    check_common,
    projection_kind_option,
    projection_params,
    projection_seed_option,
    release,
    report,
    require_plan,
)
from service.dp.noise import draws as noise
from service.dp.noise import lattice
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "CAPABILITIES",
    "DEFAULT_BATCH_SIZE",
    "DPSGD",
    "MECHANISM",
    "SCHEDULES",
    "UPDATE_ROWS",
    "DPSGDPlan",
    "Options",
    "advanced_upper",
    "batch_sizes",
    "gradient_sensitivity",
    "multiclass_defaults",
    "per_step_epsilon",
    "split_epsilon",
    "work_estimate",
]

FloatArray = NDArray[np.float64]

SCHEDULES = ("constant", "inverse_sqrt", "inverse")
#: Default mini-batch size. The per-update noise-to-gradient ratio is E‖z‖/1 = 2d/(ε_pass·b),
#: so small batches drown the gradient (seed 001 §3.3: every noisy run pushed b to the top of
#: its tuning grid); 50 keeps that ratio at 2d/(50ε) while leaving n/50 updates per pass.
DEFAULT_BATCH_SIZE = 50
DEFAULT_EPOCHS = 1
DEFAULT_ETA = 1.0
#: K classes, ``batch_size`` omitted: the largest per-update noise-to-gradient ratio
#: E‖z‖/1 = 2D/(b·ε_pass) the default batch allows (module docstring, "Defaults for K classes").
MULTICLASS_NOISE_RATIO: Final[int] = 2
MULTICLASS_RULE = (
    "K classes with batch_size omitted: b = min(n, max(50, ⌈dK/ε_pass⌉)), the smallest batch "
    "whose expected noise norm per update 2dK/(b·ε_pass) is ≤ 2 (the clipped gradient has norm "
    "≤ 1); with eta omitted too (inverse_sqrt), η = √(b/50), so the pass's steps add up to "
    "2√(n/50) as with the binary default b = 50, η = 1. Public inputs only; options given are "
    "used as given"
)
#: Upper limits that keep a request from running for days.
MAX_EPOCHS = 10_000
#: Noise is drawn in chunks of at most this many floats (updates × dimension).
_NOISE_CHUNK_FLOATS = 4_000_000
#: The per-example clip bound C (gradients of losses with |l′| ≤ 1 on rows of norm ≤ 1).
CLIP = 1.0
#: What a calibration records about the released gradients (the ``release`` detail).
GRADIENT_RELEASE = (
    "each update's noisy mini-batch gradient is an exact grid release γ·round((ḡ + z)/γ), "
    "γ = 2^-32 (service.dp.noise.lattice), with β calibrated to the sensitivity of the mean as "
    "computed in floating point (service.dp.data.clipping); the optimiser's steps are "
    "post-processing, so the guarantee holds for the released doubles"
)

_PARAMS = ("epochs", "batch_size", "schedule", "eta", "radius", *PROJECTION_PARAMS)


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """DP-SGD's options. Also checked with the dataset: b ≤ n; `eta` only with a schedule that
    uses it, `projection_kind` and `projection_seed` only with `projection_dim`."""

    epochs: int = option(
        DEFAULT_EPOCHS, "Passes E over the data (each uses every row once).", ge=1, le=MAX_EPOCHS
    )
    batch_size: int | None = option(
        None,
        "Mini-batch size b (1 ≤ b ≤ n); each pass makes ⌊n/b⌋ noisy updates.",
        ge=1,
        computed_default=(
            f"min({DEFAULT_BATCH_SIZE}, n); for K classes min(n, max({DEFAULT_BATCH_SIZE}, "
            "⌈dK/ε_pass⌉)), ε_pass the budget of one pass"
        ),
    )
    schedule: Literal["constant", "inverse_sqrt", "inverse"] = option(
        "inverse_sqrt",
        "Step sizes: `constant` η_t = η, `inverse_sqrt` η_t = η/√t, `inverse` η_t = 1/(λt).",
    )
    eta: float | None = option(
        None,
        "Base step size η of the `constant` and `inverse_sqrt` schedules (leave it out for "
        "`inverse`).",
        gt=0.0,
        computed_default=(
            f"{DEFAULT_ETA:g}; for K classes with the default batch size and `inverse_sqrt`, "
            "√(b/50) (the `inverse` schedule has none)"
        ),
    )
    radius: float | None = option(
        None, "Radius R of the ball the iterates are projected onto (null: no projection).", gt=0.0
    )
    projection_dim: int | None = option(
        None,
        "Dimension k of a public random projection of the rows (null: none); SGD runs in "
        "dimension k and the released weights are folded back to d.",
        ge=1,
        le=MAX_PROJECTION_DIM,
    )
    projection_kind: Literal["gaussian", "achlioptas"] | None = projection_kind_option()
    projection_seed: int | None = projection_seed_option()


#: One update's fixed cost (noise draw, exact release, step), counted in rows
#: (:mod:`service.dp.analysis.work`).
UPDATE_ROWS: Final[int] = 64


def work_estimate(n: int, d: int, details: Mapping[str, Any]) -> float:
    """Row-feature passes of a fit (:mod:`service.dp.analysis.work`): E·(n + m·U)·d′ with m the
    calibration's ``batches_per_epoch``, U = :data:`UPDATE_ROWS` and d′ the dimension SGD runs
    in (``noise_dimension``: the projection's k, then plus n·d·k for projecting the rows once)."""
    epochs, batches = int(details["epochs"]), int(details["batches_per_epoch"])
    run_in = int(details.get("noise_dimension") or d)
    work = float(epochs) * (n + batches * UPDATE_ROWS) * run_in
    if run_in != d:
        work += float(n) * d * run_in
    return work


CAPABILITIES = Capabilities(
    tunable_options=("eta",), work=work_estimate, tasks=frozenset({"binary", "multiclass"})
)


def split_epsilon(epsilon: float, parts: int) -> float:
    """The largest float ε_p ≤ ε/parts with parts·ε_p ≤ ε in exact arithmetic."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    return largest_share(epsilon / parts, parts, epsilon)


def per_step_epsilon(
    epsilon: float, steps: int, delta_prime: float | None
) -> tuple[float, CompositionChoice | None]:
    """The largest per-step ε_s whose k-fold composition (the tighter of basic and, when δ′ is
    given, advanced: ε_s√(2k ln(1/δ′)) + kε_s(e^{ε_s} − 1), δ′) is ≤ ε; with both bounds at
    that ε_s. Basic is k·ε_s (``split_epsilon``); the advanced bound is increasing in ε_s, so
    its largest admissible ε_s is found by root finding, then stepped down until the proved
    upper bound :func:`advanced_upper` is ≤ ε; the choice reports both totals rounded up (so a
    charged total is never below the real bound)."""
    basic_step = split_epsilon(epsilon, steps)
    if delta_prime is None:
        return basic_step, None
    ln2 = math.log(2.0)
    if basic_step >= ln2:
        # for ε_s ≥ ln 2 the advanced bound is ≥ kε_s(e^{ε_s} − 1) ≥ kε_s: never tighter
        try:
            return basic_step, best_composition(PrivacyCost(basic_step), steps, delta_prime)
        except (OverflowError, ValueError):  # e^ε overflows: advanced is astronomically loose
            return basic_step, None

    def advanced_eps(value: float) -> float:
        # a double estimate to search with; the proved bound decides below
        return value * math.sqrt(2.0 * steps * math.log(1.0 / delta_prime)) + (
            steps * value * math.expm1(value)
        )

    # the root lies below ln 2: there the advanced bound is ≥ k ln 2 > k·basic_step = ε
    from scipy import optimize  # here, not at the top: processes that never solve skip it

    adv_step = float(optimize.brentq(lambda a: advanced_eps(a) - epsilon, 0.0, ln2, xtol=1e-15))
    while adv_step > 0.0 and advanced_eps(adv_step) > epsilon:
        adv_step = math.nextafter(adv_step, 0.0)
    # the double evaluation can sit a few ulps below the real bound: finish with the proved one
    while adv_step > 0.0 and advanced_upper(adv_step, steps, delta_prime) > Fraction(epsilon):
        adv_step = math.nextafter(adv_step, 0.0)
    step = max(basic_step, adv_step)
    advanced = advanced_upper(step, steps, delta_prime)
    basic = Fraction(step) * steps
    return step, CompositionChoice(
        basic=PrivacyCost(clipping.round_up(basic)),
        advanced=PrivacyCost(clipping.round_up(advanced), delta_prime),
        method="advanced" if advanced < basic else "basic",
    )


def multiclass_defaults(n: int, dim: int, epsilon_pass: float) -> tuple[int, float]:
    """(b, η): the multi-class defaults of the module docstring for n rows, noise dimension
    D = dK and per-pass budget ε_pass: b = min(n, max(50, ⌈D/ε_pass⌉)) (⌈·⌉ of the exact
    quotient of the doubles, so 2D/(b·ε_pass) ≤ 2 holds exactly unless b = n) and η = √(b/50)."""
    if n < 1 or dim < 1 or not epsilon_pass > 0.0:
        raise ValueError("n, the dimension and ε_pass must be positive")
    quotient = Fraction(2 * dim, MULTICLASS_NOISE_RATIO) / Fraction(epsilon_pass)
    b = min(n, max(DEFAULT_BATCH_SIZE, math.ceil(quotient)))
    return b, math.sqrt(b / DEFAULT_BATCH_SIZE)


def _outputs(problem: Problem) -> int:
    """Rows of the iterate: K for a multiclass fit (:mod:`service.dp.mechanisms.multiclass`),
    else 1."""
    return int(problem.n_classes) if problem.task == "multiclass" else 1


def batch_sizes(n: int, batch_size: int) -> NDArray[np.int64]:
    """Sizes of the m = max(1, ⌊n/b⌋) mini-batches of one pass: ⌈n/m⌉ for the first n mod m,
    ⌊n/m⌋ for the rest (so every batch has at least min(b, n) rows and they cover all n)."""
    m = max(1, n // batch_size)
    q, r = divmod(n, m)
    sizes = np.full(m, q, dtype=np.int64)
    sizes[:r] += 1
    return sizes


#: The expected noise norm, in units of the release grid's scale s, that the grid is chosen for.
_NOISE_NORM_PER_SCALE: Final[float] = 16.0
#: s ≤ 2^200 (far beyond any calibration PrivFit accepts).
_MAX_SCALE_EXPONENT: Final[int] = 200


def release_scale(dim: int, beta: float) -> int:
    """s = 2^k ≥ 1, the smallest power of two with E‖z‖/s = (d/β)/s ≤ 16: noisy gradients
    are released on the grid s·2⁻³², which depends only on public numbers (d, β).

    Why: the exact sampler decides each coordinate's cell from a floating-point evaluation
    with a rigorous error bound, which grows with the coordinate's magnitude; at a tiny ε per
    pass the noise is so large (E‖z‖ ≈ 10⁵ at ε_pass = 10⁻⁴, b = 1) that the cells of
    2⁻³² are too fine for doubles and most coordinates fall back to decimal arithmetic
    (~30× slower). A grid scaled to the noise keeps a noise-to-grid ratio of at most 2⁴⁰·16.

    How, exactly: o = s·γ·round((ḡ/s + z/s)/γ) with z/s ∝ exp(−βs‖·‖) is the cell of ḡ + z on
    the grid sγ (s a power of two: ḡ/s and s·(·) are exact unless ḡ/s is subnormal, which
    moves the centre by at most s·2⁻¹⁰⁷⁵ per coordinate; :func:`release_sensitivity` adds
    that to Δ). Post-processing of ḡ + z with a public grid: the guarantee is unchanged."""
    expected = dim / beta
    if not math.isfinite(expected) or expected <= _NOISE_NORM_PER_SCALE:
        return 1
    exponent = min(_MAX_SCALE_EXPONENT, math.ceil(math.log2(expected / _NOISE_NORM_PER_SCALE)))
    return 1 << exponent


def release_sensitivity(sizes: NDArray[np.int64], dim: int, scale: int) -> Fraction:
    """Δ of the released centre s·fl(ḡ/s): :func:`gradient_sensitivity` plus 2·s·⌈√d⌉·2⁻¹⁰⁷⁵
    (each coordinate of s·fl(ḡ/s) is within s·2⁻¹⁰⁷⁵ of ḡ's; nothing when s = 1)."""
    base = gradient_sensitivity(sizes, dim)
    if scale == 1:
        return base
    root = clipping.ceil_sqrt(dim)
    return base + Fraction(scale * root, 2**1074)


def gradient_sensitivity(sizes: NDArray[np.int64], dim: int) -> Fraction:
    """Δ: the largest L2 change of a computed clipped mini-batch mean under replace-one, over
    the batch sizes of a pass (:func:`service.dp.data.clipping.mean_sensitivity`, exact)."""
    return max(clipping.mean_sensitivity(int(b), dim, CLIP) for b in np.unique(sizes))


def _multiclass_defaults(problem: Problem, epochs: int) -> tuple[int, float]:
    """:func:`multiclass_defaults` for a problem: D = d·K and the ε_pass its accounting uses."""
    delta_prime = float(problem.delta) if problem.delta > 0.0 else None
    eps_pass, _ = per_step_epsilon(problem.epsilon, epochs, delta_prime)
    return multiclass_defaults(problem.n, problem.d * _outputs(problem), eps_pass)


def _int_param(params: dict[str, Any], name: str, default: int | None, low: int, high: int) -> Any:
    value = params.get(name, default)
    return None if value is None else check_int_in(value, name, low, high)


def _positive_float(params: dict[str, Any], name: str, default: float | None) -> float | None:
    value = params.get(name, default)
    return None if value is None else check_positive_number(value, name)


@plan_kind("dp_sgd")
@dataclass(frozen=True, slots=True)
class DPSGDPlan(MechanismPlan):
    """DP-SGD's plan (module docstring): the passes and mini-batches, ε per pass and the
    composition that gives the total (basic, or advanced with δ′ = δ), the noise rate
    β = ε_pass/Δ for the sensitivity Δ of the mean as computed, the release grid's scale, the
    step sizes, the radius and the optional projection."""

    mechanism = "dp_sgd"

    epochs: int
    batch_size: int
    batches_per_epoch: int
    min_batch_size: int
    max_batch_size: int
    epsilon_per_epoch: float
    spent_epsilon: float
    spent_delta: float
    composition_method: str
    basic_epsilon: float
    advanced_epsilon: float | None
    advanced_delta: float | None
    noise_dimension: int
    release_scale: int
    beta: float
    gradient_sensitivity: float
    gradient_sensitivity_exact_arithmetic: float
    float_margin: float
    schedule: str
    eta: float | None
    radius: float | None
    projection_dim: int | None
    projection_kind: ProjectionKind | None
    projection_seed: int | None

    @property
    def expected_noise_norm(self) -> float:
        return self.noise_dimension / self.beta

    def details(self) -> dict[str, Any]:
        dim, beta = self.noise_dimension, self.beta
        details = self.inputs.details()
        details.update(
            delta=self.spent_delta,
            epsilon=self.spent_epsilon,
            epsilon_requested=self.inputs.epsilon,
            delta_offered=self.inputs.delta,
            composition_method=self.composition_method,
            basic_total={"epsilon": self.basic_epsilon, "delta": 0.0},
            advanced_total=(
                None
                if self.advanced_epsilon is None
                else {"epsilon": self.advanced_epsilon, "delta": self.advanced_delta}
            ),
            epochs=self.epochs,
            epsilon_per_epoch=self.epsilon_per_epoch,
            batch_size=self.batch_size,
            batches_per_epoch=self.batches_per_epoch,
            min_batch_size=self.min_batch_size,
            max_batch_size=self.max_batch_size,
            updates=self.epochs * self.batches_per_epoch,
            clip=CLIP,
            clip_applied=math.nextafter(CLIP, 0.0),
            gradient_sensitivity=self.gradient_sensitivity,
            gradient_sensitivity_exact_arithmetic=self.gradient_sensitivity_exact_arithmetic,
            float_margin=self.float_margin,
            float_margin_note=(
                "the mean of clipped gradients is computed in doubles: the sensitivity of the "
                "computed mean is at most 2/b_min·(1 + float_margin) (clip to slightly less "
                "than 1 against rigorous row-norm bounds, plus the worst-case rounding of the "
                "sum and the division; service.dp.data.clipping), and β = ε_pass/that"
            ),
            release=GRADIENT_RELEASE,
            release_grid=self.release_scale * lattice.GRID,
            release_scale=self.release_scale,
            beta=beta,
            noise="norm_exponential",
            noise_dimension=dim,
            noise_norm_distribution=f"Gamma(shape={dim}, scale={1.0 / beta!r})",
            expected_noise_norm_per_update=self.expected_noise_norm,
            schedule=self.schedule,
            eta=self.eta,
            radius=self.radius,
            projection_dim=self.projection_dim,
            projection_kind=self.projection_kind,
        )
        if self.inputs.task == "multiclass":
            b, eta = multiclass_defaults(self.inputs.n, dim, self.epsilon_per_epoch)
            details.update(defaults_rule=MULTICLASS_RULE, default_batch_size=b, default_eta=eta)
        return details

    def calibration(self) -> Calibration:
        epochs, eps_pass = self.epochs, self.epsilon_per_epoch
        spent, spent_delta = self.spent_epsilon, self.spent_delta
        delta_prime = self.inputs.delta if self.inputs.delta > 0.0 else None
        if self.composition_method == "advanced":
            over = (
                f"{epochs} passes of ε_pass = {eps_pass:.6g} by advanced composition with "
                f"δ′ = {spent_delta:g} (Dwork, Rothblum & Vadhan 2010) = ({spent:.6g}, "
                f"{spent_delta:g}); basic composition would give {epochs * eps_pass:.6g}"
            )
        else:
            over = f"{epochs} pass(es) × ε_pass = {eps_pass:.6g} (basic composition) = {spent:.6g}"
            if delta_prime is not None:
                over += (
                    f"; advanced composition with δ′ = {delta_prime:g} would not be tighter, so "
                    "the δ offered is not spent"
                )
        return Calibration(
            epsilon=spent,
            delta=spent_delta,
            details=self.details(),
            expected_noise_norm=self.expected_noise_norm,
            composition=(
                f"{over}; within a pass the {self.batches_per_epoch} updates use disjoint "
                f"mini-batches of ≥ {self.min_batch_size} rows (parallel composition), each "
                f"update ε_pass-DP with noise ∝ exp(−β‖z‖), β = ε_pass/Δ = {self.beta:.6g} with "
                f"Δ = 2/b_min·(1 + {self.float_margin:.2g}) the sensitivity of the mean as "
                "computed in floating point (Song, Chaudhuri & Sarwate 2013); each noisy "
                "gradient is released exactly on the 2^-32 grid"
                + ("" if spent_delta > 0.0 else "; no δ is spent")
            ),
            plan=self,
        )


class DPSGD:
    """ε-DP mini-batch SGD with noisy updates (Song, Chaudhuri & Sarwate 2013)."""

    name = "dp_sgd"
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        check_common(problem, _PARAMS)
        raw = dict(problem.params)
        params: dict[str, Any] = {}
        params["epochs"] = _int_param(raw, "epochs", DEFAULT_EPOCHS, 1, MAX_EPOCHS)
        default_b, default_eta = min(DEFAULT_BATCH_SIZE, problem.n), DEFAULT_ETA
        schedule = raw.get("schedule", "inverse_sqrt")
        if schedule not in SCHEDULES:
            raise PrivacyParameterError(
                f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}"
            )
        if problem.task == "multiclass" and raw.get("batch_size") is None:
            default_b, rule_eta = _multiclass_defaults(problem, params["epochs"])
            if schedule == "inverse_sqrt":
                default_eta = rule_eta
        params["batch_size"] = _int_param(raw, "batch_size", default_b, 1, problem.n)
        params["schedule"] = schedule
        if schedule == "inverse":
            if "eta" in raw:
                raise PrivacyParameterError(
                    "eta is not used by the 'inverse' schedule (η_t = 1/(λt)); leave it out"
                )
        else:
            params["eta"] = _positive_float(raw, "eta", default_eta)
        params["radius"] = _positive_float(raw, "radius", None)
        # the projection's options and refusals are objective_perturbation's too
        params.update(projection_params(raw, task=problem.task, refused={"multiclass": ""}))
        return replace(problem, params=params)

    def calibrate(self, problem: Problem) -> Calibration:
        return self.plan(problem).calibration()

    def plan(self, problem: Problem) -> DPSGDPlan:
        """The plan of a validated problem (:meth:`validate_params` normalised its options),
        from public numbers."""
        p = problem.params
        n, epochs, b = problem.n, int(p["epochs"]), int(p["batch_size"])
        sizes = batch_sizes(n, b)
        b_min = int(sizes.min())
        delta_prime = float(problem.delta) if problem.delta > 0.0 else None
        eps_pass, choice = per_step_epsilon(problem.epsilon, epochs, delta_prime)
        if choice is not None and choice.method == "advanced":
            spent, spent_delta, method = choice.advanced.epsilon, choice.advanced.delta, "advanced"
        else:
            spent, spent_delta, method = (
                clipping.round_up(Fraction(eps_pass) * epochs),
                0.0,
                "basic",
            )
        k = p["projection_dim"]
        # the noise lives where the iterate does: ℝ^d, ℝ^k, or ℝ^{dK} for K classes
        dim = (int(k) if k is not None else problem.d) * _outputs(problem)
        scale = release_scale(dim, clipping.scale_for(eps_pass, gradient_sensitivity(sizes, dim)))
        sensitivity = release_sensitivity(sizes, dim, scale)
        exact_sensitivity = Fraction(2 * CLIP) / b_min
        eta = p.get("eta")
        return DPSGDPlan(
            inputs=Inputs.of(problem),
            epochs=epochs,
            batch_size=b,
            batches_per_epoch=int(sizes.size),
            min_batch_size=b_min,
            max_batch_size=int(sizes.max()),
            epsilon_per_epoch=eps_pass,
            spent_epsilon=float(spent),
            spent_delta=float(spent_delta),
            composition_method=method,
            basic_epsilon=clipping.round_up(Fraction(eps_pass) * epochs),
            advanced_epsilon=None if choice is None else float(choice.advanced.epsilon),
            advanced_delta=None if choice is None else float(choice.advanced.delta),
            noise_dimension=dim,
            release_scale=scale,
            beta=clipping.scale_for(eps_pass, sensitivity),
            gradient_sensitivity=clipping.round_up(sensitivity),
            gradient_sensitivity_exact_arithmetic=float(exact_sensitivity),
            float_margin=float(sensitivity / exact_sensitivity - 1),
            schedule=str(p["schedule"]),
            eta=None if eta is None else float(eta),
            radius=p["radius"],
            projection_dim=k,
            projection_kind=p.get("projection_kind"),
            projection_seed=p.get("projection_seed"),
        )

    def run(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        problem: Problem,
        calibration: Calibration,
        *,
        rng: np.random.Generator | None,
        progress: ProgressCallback | None,
    ) -> FittedModel:
        del problem  # the plan holds the objective and every option
        plan = require_plan(calibration, DPSGDPlan)
        n, d = plan.inputs.n, plan.inputs.d
        loss = plan.inputs.loss_function()
        sizes = batch_sizes(n, plan.batch_size)
        X = np.ascontiguousarray(X, dtype=np.float64)
        y = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
        if X.shape != (n, d) or y.shape[0] != n:
            raise ValueError("X and y do not match the problem's n and d")
        report(progress, 0.0)

        projection: RandomProjection | None = None
        if plan.projection_dim is not None:
            kind: ProjectionKind = plan.projection_kind or "gaussian"
            if plan.projection_seed is None:
                projection = RandomProjection.create(d, plan.projection_dim, kind=kind, rng=rng)
            else:
                projection = RandomProjection(d, plan.projection_dim, plan.projection_seed, kind)
            Z = np.ascontiguousarray(projection.project(X))
        else:
            Z = X

        if plan.inputs.task == "multiclass":
            K, labels = plan.inputs.n_classes, np.asarray(y).astype(np.intp)

            def multinomial(rows: NDArray[np.intp], caps: FloatArray, W: FloatArray) -> FloatArray:
                return multiclass.clipped_minibatch_gradient(Z[rows], labels[rows], W, caps)

            shape: tuple[int, ...] = (K, Z.shape[1])
            gradient: Gradient = multinomial
        else:

            def margin(rows: NDArray[np.intp], caps: FloatArray, w: FloatArray) -> FloatArray:
                Xb, yb = Z[rows], y[rows]
                lp = loss.derivative(yb * (Xb @ w))
                # the per-example gradient l′·y·x clipped to norm < 1 (service.dp.data.clipping)
                return clipping.clipped_mean(lp * yb, Xb, caps)

            shape, gradient = (Z.shape[1],), margin
        # A diverging run (step size far too large) ends in non-finite weights, which
        # _check_finite turns into an error; the overflow warnings on the way are noise.
        with np.errstate(over="ignore", invalid="ignore"):
            w = _sgd(
                Z,
                gradient,
                shape,
                lam=plan.inputs.regularization,
                epochs=plan.epochs,
                sizes=sizes,
                beta=plan.beta,
                scale=plan.release_scale,
                schedule=plan.schedule,
                eta=plan.eta if plan.eta is not None else 0.0,
                radius=plan.radius,
                rng=rng,
                progress=progress,
            )
        if plan.inputs.task == "multiclass":
            mc_model = multiclass.release(w)
            report(progress, 1.0)
            return mc_model
        coef = projection.fold(w) if projection is not None else w
        model = release(coef)
        report(progress, 1.0)
        return model


#: The clipped mean gradient of a batch: (rows, their clip caps, iterate) ↦ an array shaped
#: like the iterate, each row's gradient of Frobenius norm < C = 1.
Gradient = Callable[[NDArray[np.intp], FloatArray, FloatArray], FloatArray]


def _sgd(
    Z: FloatArray,
    gradient: Gradient,
    shape: tuple[int, ...],
    *,
    lam: float,
    epochs: int,
    sizes: NDArray[np.int64],
    beta: float,
    scale: int,
    schedule: str,
    eta: float,
    radius: float | None,
    rng: np.random.Generator | None,
    progress: ProgressCallback | None,
) -> FloatArray:
    """The noisy SGD loop of the module docstring; returns the last iterate. The iterate has
    ``shape`` ((d,) for a margin loss, (K, d) for the multinomial one, :mod:`multiclass`);
    each update releases ``gradient``'s clipped mean plus noise ∝ exp(−β‖z‖) in ℝ^{size}
    exactly on the grid s·2⁻³² and steps w ← Π_R(w − η_t(λw + o_t)) (Frobenius norm)."""
    n = Z.shape[0]
    dim = math.prod(shape)
    s = float(scale)  # the release grid is s·2⁻³² (release_scale)
    m = int(sizes.size)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    caps = clipping.clip_caps(clipping.row_norm_bounds(Z), CLIP)
    total = epochs * m
    every = max(1, total // 100)
    chunk = max(1, min(m, _NOISE_CHUNK_FLOATS // dim))
    w = np.zeros(shape)
    t = 0
    for _ in range(epochs):
        # A uniformly random permutation, independent of the data (ties have probability ~0
        # and a stable sort still returns a permutation).
        perm = np.argsort(noise.uniforms(n, rng), kind="stable")
        for start in range(0, m, chunk):
            stop = min(m, start + chunk)
            # z/s ∝ exp(−βs‖·‖): the cells of ḡ/s + z/s on γ are those of ḡ + z on sγ
            block = lattice.NormExponentialBlock(stop - start, dim, beta=beta * s, rng=rng)
            for j in range(start, stop):
                t += 1
                idx = perm[bounds[j] : bounds[j + 1]]
                grad = gradient(idx, caps[idx], w)
                # the exact point of the grid sγ for grad + z (s a power of two: exact)
                released = (s * block.release(j - start, grad.ravel() / s)).reshape(shape)
                if schedule == "constant":
                    step = eta
                elif schedule == "inverse_sqrt":
                    step = eta / math.sqrt(t)
                else:
                    step = 1.0 / (lam * t)
                w = w - step * (lam * w + released)
                if radius is not None:
                    norm = math.sqrt(_squared_norm(w))
                    if norm > radius:
                        w *= radius / norm
                if t % every == 0:
                    _check_finite(w)
                    report(progress, min(0.99, t / total))
    _check_finite(w)
    return w


def _squared_norm(w: FloatArray) -> float:
    """‖w‖² (Frobenius for a K × d iterate)."""
    return float(w @ w) if w.ndim == 1 else float(np.sum(w * w))


def _check_finite(w: FloatArray) -> None:
    if not np.all(np.isfinite(w)):
        raise ConvergenceError(
            "DP-SGD iterates diverged (non-finite weights); lower eta, use the "
            "'inverse_sqrt' schedule or set a radius. No model was released"
        )


MECHANISM = DPSGD()
