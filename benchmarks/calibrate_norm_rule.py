"""A private norm for the λ rule (issue 28, brief H28): does ‖ŵ(λ₀)‖, bought with a slice of ε,
predict the best λ well enough to pay for itself?

The public rule (:mod:`service.dp.analysis.regularization`) is λ* = √(4A·n + 2m₂)/(n·R) with R a
constant (10) standing for the comparator's norm ‖w°‖. Here R is replaced by R̂ = f(Ñ), Ñ a
private release of the norm of the non-private regularised minimiser at a reference λ₀:

* **Release.** ŵ(λ₀) = argmin J₀(w), J₀(w) = (1/n) Σᵢ ℓ(yᵢ wᵀxᵢ) + (λ₀/2)‖w‖², |ℓ′| ≤ 1,
  ‖xᵢ‖ ≤ 1. For neighbours D, D′ (one row replaced) J₀′ = J₀ + g/n with
  g(w) = ℓ(y′wᵀx′) − ℓ(y wᵀx), ‖∇g‖ ≤ 2. λ₀-strong convexity of J₀ and ∇J₀(ŵ) = 0,
  ∇J₀(ŵ′) = −∇g(ŵ′)/n give λ₀‖ŵ′ − ŵ‖² ≤ (∇J₀(ŵ′) − ∇J₀(ŵ))ᵀ(ŵ′ − ŵ) ≤ 2‖ŵ′ − ŵ‖/n, so
  ‖ŵ − ŵ′‖ ≤ 2/(nλ₀) and, the norm being 1-Lipschitz, |‖ŵ‖ − ‖ŵ′‖| ≤ Δ_N = 2/(nλ₀).
  Ñ = ‖ŵ‖ + Lap(Δ_N/ε₀) is ε₀-DP (pure); clipping Ñ to [0, N_max], N_max = √(2ℓ(0)/λ₀)
  (J₀(ŵ) ≤ J₀(0) = ℓ(0) bounds (λ₀/2)‖ŵ‖²), is post-processing. (The bound is for the exact
  minimiser; a service implementation must certify the solver's error as the mechanisms do.)
* **Budget.** ε₀ = ρε, the fit runs objective perturbation at (1 − ρ)ε with λ chosen from Ñ and
  public n, d: basic sequential composition charges exactly ε.
* **Rule.** R̂ = clip(K·Ñ^b, R/c, R·c) (R = 10, the public constant; c bounds how far the
  data may move it), λ = √(4A·n + 2m₂((1 − ρ)ε))/(n·R̂). b = 0 is the public rule paying
  a slice for nothing (a control).
* **Reference λ₀.** Either fixed (λ₀ ∈ :data:`FIXED_LAMBDA0`) or κ × the public rule's λ at ε
  (κ ∈ :data:`KAPPAS`): then nλ₀ ≈ 0.28κ·d/ε in the noise-dominated regime and the release's
  relative noise Δ_N/(ε₀‖ŵ‖) does not shrink with n.

Calibration (``--calibrate``): synthetic logistic families of
:func:`benchmarks.calibrate_lambda.family` (d ∈ {10, 31, 64}, n ∈ {400, 1300, 4000}, signal
∈ {1, 3, 10}: from noisy to nearly separable) and Adult, nothing else. Per cell and ε, the mean
test-accuracy curve of objective perturbation over :data:`LAMBDAS` at (1 − ρ)ε for each ρ, and
per repetition the exact ‖ŵ(λ₀)‖ for each reference. A configuration (λ₀ reference, ρ, K, b,
c) is scored by simulating the Laplace release (:data:`NOISE_DRAWS` draws per repetition) and
reading the curve at the chosen λ (linear in log λ); the score is the mean gain over the public
rule at the whole ε, over all cells. The best configuration is written to
``benchmarks/calibration/norm_rule.json``.

Evaluation (``--evaluate``, never calibrated on): breast cancer and digits (bench_utility's
loaders and binary task) and Fashion-MNIST projected to 64 columns (bench_multiclass's public
preprocessing), a fixed subsample of 3000 training / 2000 test images, label +1 for classes 5–9;
Adult is listed too as a calibration set. Test accuracy, mean ± s.e. over the repetitions, of
the public rule at ε, the norm rule paying its slice, the norm rule with the exact (non-private,
free) norm as a ceiling on what the statistic can predict, PrivFit's best λ in hindsight and
diffprivlib's best λ in hindsight over :data:`EVAL_GRID`.

Run: ``python -m benchmarks.calibrate_norm_rule --calibrate`` then ``--evaluate [--reps 60]
[--json PATH]``; ``--diagnose PATH …`` prints, from evaluation JSON files, the comparator norm
the public rule would have needed against every reference's exact norm. Figures and verdict:
benchmarks/RESULTS.md, "A private norm for the λ rule" (the candidate loses).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks._common import accuracy, environment, fit_diffprivlib, limit_threads
from benchmarks.bench_utility import Split, adult, breast_cancer, digits, mean_se
from benchmarks.calibrate_lambda import family
from service.dp import PreparedDesign, fit, prepare_design
from service.dp.analysis.regularization import (
    ESTIMATION_WEIGHT,
    NORM_CONSTANT,
    auto_regularization,
    noise_second_moment,
    objective_lambda,
)
from service.dp.core.base import LinearModel

FloatArray = NDArray[np.float64]
MECHANISM = "objective_perturbation"
OUT = Path(__file__).resolve().parent / "calibration" / "norm_rule.json"
EPSILONS: tuple[float, ...] = (0.05, 0.1, 0.5, 1.0)
LAMBDAS: tuple[float, ...] = tuple(float(v) for v in np.logspace(-4, 0, 13))
SLICES: tuple[float, ...] = (0.05, 0.1)
FIXED_LAMBDA0: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3)
KAPPAS: tuple[float, ...] = (1.0, 3.0, 10.0, 30.0)
K_GRID: tuple[float, ...] = tuple(float(v) for v in np.logspace(-1, 2.5, 15))
B_GRID: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5)
C_GRID: tuple[float, ...] = (2.0, 4.0)
NOISE_DRAWS = 20
SYNTH_D = (10, 31, 64)
SYNTH_N = (400, 1300, 4000)
SYNTH_SIGNAL = (1.0, 3.0, 10.0)
EVAL_GRID: tuple[float, ...] = (1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
LOSS_AT_ZERO = math.log(2.0)


# --------------------------------------------------------------------------- the mechanism


def norm_sensitivity(n: int, lam0: float) -> float:
    """Δ_N = 2/(nλ₀): replace-one sensitivity of ‖ŵ(λ₀)‖ (module docstring)."""
    return 2.0 / (n * lam0)


def norm_cap(lam0: float) -> float:
    """N_max = √(2ℓ(0)/λ₀) ≥ ‖ŵ(λ₀)‖ (logistic loss: ℓ(0) = ln 2)."""
    return math.sqrt(2.0 * LOSS_AT_ZERO / lam0)


def exact_norm(design: PreparedDesign, lam0: float) -> float:
    """‖ŵ(λ₀)‖ of the non-private regularised minimiser."""
    model = fit(design, None, "non_private", epsilon=math.inf, regularization=lam0).model
    assert isinstance(model, LinearModel)
    return float(np.linalg.norm(model.coef))


def release_norm(norm: float, n: int, lam0: float, eps0: float, rng: np.random.Generator) -> float:
    """Ñ = clip(‖ŵ‖ + Lap(2/(nλ₀ε₀)), 0, N_max): ε₀-DP."""
    noisy = norm + rng.laplace(0.0, norm_sensitivity(n, lam0) / eps0)
    return float(min(max(noisy, 0.0), norm_cap(lam0)))


def rule_lambda(n: int, d: int, eps: float, norm_constant: float) -> float:
    """The public rule's λ for objective perturbation at ε with comparator norm R."""
    m2 = noise_second_moment(MECHANISM, d=d, epsilon=eps, delta=0.0)
    return objective_lambda(n, m2, norm_constant, ESTIMATION_WEIGHT)


def reference_lambda(ref: tuple[str, float], n: int, d: int, eps: float) -> float:
    """λ₀: fixed, or κ × the public rule's λ at the whole ε."""
    kind, value = ref
    return value if kind == "fixed" else value * rule_lambda(n, d, eps, NORM_CONSTANT)


def estimated_norm_constant(released: float, k: float, b: float, c: float) -> float:
    """R̂ = clip(K·Ñ^b, R/c, R·c)."""
    raw = k * released**b if released > 0 or b == 0 else 0.0
    return min(max(raw, NORM_CONSTANT / c), NORM_CONSTANT * c)


REFERENCES: tuple[tuple[str, float], ...] = tuple(("fixed", v) for v in FIXED_LAMBDA0) + tuple(
    ("kappa", v) for v in KAPPAS
)


# --------------------------------------------------------------------------- calibration


def _interp(lam: float, curve: Sequence[float]) -> float:
    return float(np.interp(math.log(lam), [math.log(v) for v in LAMBDAS], curve))


def _maker(spec: tuple[Any, ...]) -> tuple[Any, tuple[FloatArray, FloatArray], Any]:
    """(sampler, test set, fixed training set): a synthetic family (fresh rows per repetition)
    or Adult (its training split every time, its test split)."""
    if spec[0] == "adult":
        X, y, Xte, yte = adult()
        return None, (Xte, yte), (X, y)
    _, d, signal, seed = spec
    draw, _ = family(d, signal, seed)
    return draw, draw(5000, np.random.default_rng(seed + 2)), None


def _cell(args: tuple[str, tuple[Any, ...], int, float, int, int]) -> dict[str, Any]:
    """One calibration cell: curves at (1 − ρ)ε for ρ ∈ {0} ∪ SLICES and the exact norms."""
    name, spec, n_train, eps, reps, seed = args
    limit_threads(1)
    rng = np.random.default_rng(seed)
    draw, test, fixed = _maker(spec)
    epsilons = {0.0: eps, **{rho: (1.0 - rho) * eps for rho in SLICES}}
    curves = {rho: np.zeros(len(LAMBDAS)) for rho in epsilons}
    norms: list[dict[str, float]] = []
    Xte, yte = test
    d = Xte.shape[1]
    n = n_train
    for _ in range(reps):
        X, y = fixed if fixed is not None else draw(n_train, rng)
        n = X.shape[0]
        design = prepare_design(X, y)
        for rho, e in epsilons.items():
            for j, lam in enumerate(LAMBDAS):
                res = fit(design, None, MECHANISM, epsilon=e, regularization=lam, rng=rng)
                curves[rho][j] += accuracy(res.model.decision_function(Xte), yte) / reps
        norms.append(
            {
                f"{kind}:{v:g}": exact_norm(design, reference_lambda((kind, v), n, d, eps))
                for kind, v in REFERENCES
            }
        )
    return {
        "name": name,
        "n": n,
        "d": d,
        "epsilon": eps,
        "curves": {f"{rho:g}": [float(a) for a in c] for rho, c in curves.items()},
        "norms": norms,
    }


def calibrate(reps: int, workers: int) -> dict[str, Any]:
    jobs: list[tuple[str, tuple[Any, ...], int, float, int, int]] = []
    seed = 1000
    for d, n, s in itertools.product(SYNTH_D, SYNTH_N, SYNTH_SIGNAL):
        for eps in EPSILONS:
            seed += 1
            spec = ("synthetic", d, s, 77 + d + int(10 * s))
            jobs.append((f"synthetic d={d} n={n} s={s:g}", spec, n, eps, reps, seed))
    for eps in EPSILONS:
        seed += 1
        jobs.append(("adult", ("adult",), 0, eps, max(2, reps // 2), seed))
    t0 = time.time()
    with ProcessPoolExecutor(workers) as pool:
        cells = []
        for cell in pool.map(_cell, jobs):
            cells.append(cell)
            if len(cells) % 12 == 0:
                print(f"{len(cells)}/{len(jobs)} cells, {time.time() - t0:.0f} s", flush=True)
    return {"cells": cells, "reps": reps}


class Scorer:
    """Vectorised scoring of configurations: per (cell, reference, ρ) the simulated releases
    Ñ (fixed draws) and the rule's numerator √(4A·n + 2m₂((1 − ρ)ε))/n, so λ = numerator/R̂."""

    def __init__(self, cells: Sequence[dict[str, Any]], seed: int = 5) -> None:
        rng = np.random.default_rng(seed)
        self.cells = cells
        self.loglam = np.log(np.asarray(LAMBDAS))
        self.base = []
        self.released: dict[tuple[int, str, float], FloatArray] = {}
        self.exact: dict[tuple[int, str], FloatArray] = {}
        self.numerator: dict[tuple[int, float], float] = {}
        for i, cell in enumerate(cells):
            n, d, eps = cell["n"], cell["d"], cell["epsilon"]
            self.base.append(_interp(rule_lambda(n, d, eps, NORM_CONSTANT), cell["curves"]["0"]))
            for rho in (0.0, *SLICES):
                self.numerator[i, rho] = rule_lambda(n, d, (1.0 - rho) * eps, 1.0)
            for kind, v in REFERENCES:
                ref = f"{kind}:{v:g}"
                lam0 = reference_lambda((kind, v), n, d, eps)
                norms = np.asarray([rep[ref] for rep in cell["norms"]])
                self.exact[i, ref] = norms
                for rho in SLICES:
                    scale = norm_sensitivity(n, lam0) / (rho * eps)
                    noisy = norms[:, None] + rng.laplace(0.0, scale, (norms.size, NOISE_DRAWS))
                    self.released[i, ref, rho] = np.clip(noisy, 0.0, norm_cap(lam0)).ravel()

    def gains(
        self, ref: str, rho: float, k: float, b: float, c: float, *, noise: bool = True
    ) -> FloatArray:
        out = np.empty(len(self.cells))
        for i, cell in enumerate(self.cells):
            nt = self.released[i, ref, rho] if noise else self.exact[i, ref]
            r_hat = np.clip(k * nt**b, NORM_CONSTANT / c, NORM_CONSTANT * c)
            lam = self.numerator[i, rho] / r_hat
            acc = np.interp(np.log(lam), self.loglam, cell["curves"][f"{rho:g}"])
            out[i] = float(acc.mean()) - self.base[i]
        return out


def choose(data: dict[str, Any]) -> dict[str, Any]:
    """The configuration with the largest mean simulated gain over the public rule (module
    docstring), the exact-norm ceiling per reference, and the gains by group."""
    cells = data["cells"]
    scorer = Scorer(cells)
    refs = [f"{kind}:{v:g}" for kind, v in REFERENCES]
    shapes = list(itertools.product(K_GRID, B_GRID[1:], C_GRID))
    ceiling = []
    for ref in refs:
        g, k, b, c = max(
            (float(scorer.gains(ref, 0.0, *kbc, noise=False).mean()), *kbc) for kbc in shapes
        )
        ceiling.append({"reference": ref, "gain": g, "K": k, "b": b, "c": c})
        print(
            f"exact norm, no slice, {ref}: {g * 100:+.2f} points (K {k:.3g}, b {b}, c {c})",
            flush=True,
        )
    results: list[dict[str, Any]] = []
    for ref, rho in itertools.product(refs, SLICES):
        best: tuple[float, float, float, float, float] | None = None
        for k, b, c in shapes:
            gains = scorer.gains(ref, rho, k, b, c)
            cand = (float(gains.mean()), float(gains.min()), k, b, c)
            if best is None or cand[0] > best[0]:
                best = cand
        assert best is not None
        results.append(
            {
                "reference": ref,
                "slice": rho,
                "gain": best[0],
                "worst": best[1],
                "K": best[2],
                "b": best[3],
                "c": best[4],
            }
        )
        print(
            f"{ref} ρ={rho:g}: {best[0] * 100:+.2f} points, worst cell {best[1] * 100:+.2f} "
            f"(K {best[2]:.3g}, b {best[3]}, c {best[4]})",
            flush=True,
        )
    chosen = max(results, key=lambda r: r["gain"])
    control = {
        f"{rho:g}": float(scorer.gains(refs[0], rho, NORM_CONSTANT, 0.0, 2.0).mean())
        for rho in SLICES
    }
    gains = scorer.gains(
        chosen["reference"], chosen["slice"], chosen["K"], chosen["b"], chosen["c"]
    )
    # the public rule with R re-fitted on these cells (ρ = 0, b = 0): how much of the gain a
    # different constant would buy without any release
    constant = max(
        (float(scorer.gains(refs[0], 0.0, k, 0.0, 100.0, noise=False).mean()), k)
        for k in (*K_GRID, NORM_CONSTANT)
        if NORM_CONSTANT / 100.0 <= k <= NORM_CONSTANT * 100.0
    )
    print(f"public rule, R re-fitted here: R = {constant[1]:.3g}, {constant[0] * 100:+.2f} points")
    by_group: dict[str, list[float]] = {}
    for cell, g in zip(cells, gains, strict=True):
        key = "adult" if cell["name"] == "adult" else "synthetic s=" + cell["name"].split("s=")[1]
        by_group.setdefault(f"{key} ε={cell['epsilon']:g}", []).append(float(g))
    return {
        "chosen": chosen,
        "ceiling": ceiling,
        "all": results,
        "control_public_rule_paying_slice": control,
        "control_public_rule_refitted_R": {"R": constant[1], "gain": constant[0]},
        "chosen_gain_by_group": {k: float(np.mean(v)) for k, v in sorted(by_group.items())},
    }


# --------------------------------------------------------------------------- evaluation


def fashion_binary() -> Split:
    """Fashion-MNIST under bench_multiclass's public preprocessing (random projection to 64,
    rows in the unit ball), 3000 / 2000 images of a fixed permutation, +1 for classes 5–9."""
    from benchmarks import datasets29

    data = datasets29.fashion_mnist(max_rows=(3000, 2000))
    return (
        data.X,
        np.where(data.y >= 5, 1.0, -1.0),
        data.X_test,
        np.where(data.y_test >= 5, 1.0, -1.0),
    )


EVAL_SETS: dict[str, Callable[[], Split]] = {
    "breast_cancer": breast_cancer,
    "digits_5to9": digits,
    "fashion_5to9_3000": fashion_binary,
    "adult (calibration set)": adult,
}


def _op_accuracy(
    design: PreparedDesign,
    test: tuple[FloatArray, FloatArray],
    eps: float,
    lam: float,
    rng: np.random.Generator,
) -> float:
    """Test accuracy of one objective-perturbation fit."""
    res = fit(design, None, MECHANISM, epsilon=eps, regularization=lam, rng=rng)
    return accuracy(res.model.decision_function(test[0]), test[1])


def evaluate(config: dict[str, Any], names: Sequence[str], reps: int) -> list[dict[str, Any]]:
    kind, v = config["reference"].split(":")
    rho, k, b, c = config["slice"], config["K"], config["b"], config["c"]
    rows = []
    for name in names:
        X, y, Xte, yte = EVAL_SETS[name]()
        test = (Xte, yte)
        n, d = X.shape
        design = prepare_design(X, y)
        rng = np.random.default_rng(abs(hash(name)) % 2**32)
        for eps in EPSILONS:
            t0 = time.time()
            lam_rule = auto_regularization(MECHANISM, n=n, d=d, epsilon=eps).regularization
            lam0 = reference_lambda((kind, float(v)), n, d, eps)
            norm = exact_norm(design, lam0)
            lam_exact = rule_lambda(n, d, (1 - rho) * eps, estimated_norm_constant(norm, k, b, c))
            cols: dict[str, list[float]] = {"rule": [], "norm rule": [], "exact-norm rule": []}
            grid: dict[float, list[float]] = {lam: [] for lam in EVAL_GRID}
            dpl: dict[float, list[float]] = {lam: [] for lam in EVAL_GRID}
            released, chosen = [], []

            for _ in range(reps):
                seed = int(rng.integers(2**31))
                cols["rule"].append(_op_accuracy(design, test, eps, lam_rule, rng))
                nt = release_norm(norm, n, lam0, rho * eps, rng)
                lam = rule_lambda(n, d, (1 - rho) * eps, estimated_norm_constant(nt, k, b, c))
                released.append(nt)
                chosen.append(lam)
                cols["norm rule"].append(_op_accuracy(design, test, (1 - rho) * eps, lam, rng))
                cols["exact-norm rule"].append(
                    _op_accuracy(design, test, (1 - rho) * eps, lam_exact, rng)
                )
                for lam_g in EVAL_GRID:
                    grid[lam_g].append(_op_accuracy(design, test, eps, lam_g, rng))
                    peer = fit_diffprivlib(X, y, epsilon=eps, lam=lam_g, seed=seed)
                    dpl[lam_g].append(accuracy(peer.decision_function(Xte), yte))
            best = max(EVAL_GRID, key=lambda lam_g: float(np.mean(grid[lam_g])))
            dbest = max(EVAL_GRID, key=lambda lam_g: float(np.mean(dpl[lam_g])))
            row = {
                "dataset": name,
                "n": n,
                "d": d,
                "epsilon": eps,
                "lambda_rule": lam_rule,
                "lambda0": lam0,
                "exact_norm": norm,
                "noise_scale": norm_sensitivity(n, lam0) / (rho * eps),
                "released_norm": mean_se(released),
                "lambda_norm_rule_median": float(np.median(chosen)),
                "lambda_exact_norm_rule": lam_exact,
                "best_lambda": best,
                "diffprivlib_best_lambda": dbest,
                "results": {
                    **{key: mean_se(vals) for key, vals in cols.items()},
                    "best λ (hindsight)": mean_se(grid[best]),
                    "diffprivlib best λ": mean_se(dpl[dbest]),
                },
                "seconds": time.time() - t0,
            }
            rows.append(row)
            r = row["results"]
            print(
                f"{name} ε={eps:g}: rule {r['rule'][0]:.4f} ± {r['rule'][1]:.4f} "
                f"(λ {lam_rule:.3g}) | "
                f"norm rule {r['norm rule'][0]:.4f} ± {r['norm rule'][1]:.4f} (median λ "
                f"{row['lambda_norm_rule_median']:.3g}; ‖ŵ‖ {norm:.3g}, noise scale "
                f"{row['noise_scale']:.3g}) | exact-norm {r['exact-norm rule'][0]:.4f} "
                f"(λ {lam_exact:.3g}) | "
                f"best {r['best λ (hindsight)'][0]:.4f} (λ {best:g}) | dpl best "
                f"{r['diffprivlib best λ'][0]:.4f} (λ {dbest:g}) [{row['seconds']:.0f} s]",
                flush=True,
            )
    return rows


def diagnose(rows: Sequence[dict[str, Any]]) -> str:
    """For each evaluated (data set, ε): the comparator norm the public rule would have needed
    to pick the best λ in hindsight, R_need = R·λ_rule/λ_best, next to the exact ‖ŵ(λ₀)‖ of
    every reference (no noise): does any reference order the data sets as R_need does? A
    diagnostic read after the evaluation, never used to choose the configuration."""
    refs = [f"{kind}:{v:g}" for kind, v in REFERENCES]
    lines = [
        "| data | ε | R_need | " + " | ".join(f"‖ŵ‖ {r}" for r in refs) + " |",
        "|" + "---|" * (len(refs) + 3),
    ]
    cache: dict[str, tuple[PreparedDesign, int, int]] = {}
    for row in rows:
        name, eps = row["dataset"], row["epsilon"]
        if name not in cache:
            X, y, _, _ = EVAL_SETS[name]()
            cache[name] = (prepare_design(X, y), X.shape[0], X.shape[1])
        design, n, d = cache[name]
        need = NORM_CONSTANT * row["lambda_rule"] / row["best_lambda"]
        norms = [
            exact_norm(design, reference_lambda((kind, v), n, d, eps)) for kind, v in REFERENCES
        ]
        lines.append(
            f"| {name} | {eps:g} | {need:.3g} | " + " | ".join(f"{v:.3g}" for v in norms) + " |"
        )
    return "\n".join(lines)


def table(rows: Sequence[dict[str, Any]]) -> str:
    cols = ("rule", "norm rule", "exact-norm rule", "best λ (hindsight)", "diffprivlib best λ")
    lines = [
        "| data (n, d) | ε | public rule (λ) | norm rule, pays ρε (median λ) "
        "| exact norm (free, λ) | best λ hindsight | diffprivlib best λ | ‖ŵ(λ₀)‖ (λ₀) "
        "| Laplace scale |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        r = row["results"]
        cell = {c: "{:.3f} ± {:.3f}".format(*r[c]) for c in cols}
        lines.append(
            f"| {row['dataset']} ({row['n']}, {row['d']}) | {row['epsilon']:g} | "
            f"{cell['rule']} ({row['lambda_rule']:.2g}) | {cell['norm rule']} "
            f"({row['lambda_norm_rule_median']:.2g}) | {cell['exact-norm rule']} "
            f"({row['lambda_exact_norm_rule']:.2g}) | {cell['best λ (hindsight)']} "
            f"({row['best_lambda']:g}) | {cell['diffprivlib best λ']} "
            f"({row['diffprivlib_best_lambda']:g}) | {row['exact_norm']:.3g} "
            f"({row['lambda0']:.2g}) | {row['noise_scale']:.3g} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--rescore", action="store_true", help="choose again from saved cells")
    parser.add_argument("--evaluate", action="store_true")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--datasets", nargs="*", default=list(EVAL_SETS))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--diagnose",
        type=Path,
        nargs="*",
        default=None,
        help="evaluation JSON files: print R_need against each reference's exact norm",
    )
    args = parser.parse_args(argv)
    limit_threads(1)
    if args.calibrate or args.rescore:
        data = (
            calibrate(args.reps or 8, args.workers)
            if args.calibrate
            else json.loads(OUT.read_text())
        )
        if args.calibrate:
            OUT.parent.mkdir(parents=True, exist_ok=True)
            OUT.write_text(json.dumps(data, indent=1))
        data.update(choose(data))
        data["environment"] = environment()
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(json.dumps(data, indent=1))
        print(
            json.dumps(
                {
                    k: data[k]
                    for k in (
                        "chosen",
                        "control_public_rule_paying_slice",
                        "control_public_rule_refitted_R",
                        "chosen_gain_by_group",
                    )
                },
                indent=1,
            )
        )
    if args.diagnose:
        rows = [row for path in args.diagnose for row in json.loads(path.read_text())["rows"]]
        print(diagnose(rows))
    if args.evaluate:
        config = json.loads(OUT.read_text())["chosen"]
        print("configuration (calibrated on synthetic data and Adult):", config)
        rows = evaluate(config, args.datasets, args.reps or 60)
        print(table(rows))
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"config": config, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
