"""A public projection dimension for objective perturbation (issue 28): calibrate k = f(n·ε)
on public synthetic data and Adult, evaluate it on held-out data.

**The mechanism.** Rows x ∈ R^d (‖x‖ ≤ 1, the intercept a column) are mapped by a public
Gaussian matrix R ∈ R^{k×d}, R_ij ~ N(0, 1/k), drawn independently of the data, and re-clipped
to ‖z‖ ≤ 1 (:func:`service.dp.data.projection.clip_rows`). Both maps act on each record alone
and depend on nothing private, so the projected data set is a neighbour-preserving function of
the original (replacing one row replaces one projected row): objective perturbation (OP) on the
k projected columns at ε is ε-DP for the original rows, exactly as OP on the raw columns is. λ
is the public rule's (:func:`service.dp.analysis.regularization.auto_regularization`) with
d = k, and the rule below reads only public n, d and ε: the choice of k costs nothing.

**Why k ∝ (nε)^{2/3}.** Let w° be a comparator with ‖w°‖ ≤ B and margin losses ℓ 1-Lipschitz.
(i) *Projection.* For fixed w°, x, the JL inner-product bound gives
|⟨Rw°, Rx⟩ − ⟨w°, x⟩| ≲ ‖w°‖‖x‖/√k with high probability, so the best k-dimensional predictor
Rw° loses at most a·B/√k in expected loss (a an absolute constant; re-clipping only shrinks
rows that grew, by a factor 1 + O(1/√k)). (ii) *Privacy.* OP on k columns adds b/n to the
gradient with ‖b‖ ~ Gamma(k, 2/ε), E‖b‖² ≈ 4k²/ε²; at λ the minimiser moves by ‖b‖/(nλ), which
costs ≈ ‖b‖²/(n²λ) ≈ 4k²/(n²ε²λ) in loss, against the bias λB²/2. Balancing (the rule's λ does
this) gives an excess of order b·Bk/(nε). The sum a·B/√k + b·Bk/(nε) is minimal where
a/(2k^{3/2}) = b/(nε), i.e. **k* = (a/(2b))^{2/3}·(nε)^{2/3}**. The linear form k = nε/c is the
probe's empirical fit; a √(nε) form is scored too as a third shape. Every form is clamped below
at k_min and the projection is switched off when the rule's k reaches θ·d. θ = 1 is the plain
rule (projecting to k ≥ d only adds distortion); θ ∈ {1/2, 1/3} is scored too because the same
balance says a k near d is a bad trade: the noise term shrinks only by the factor k/d while the
distortion a/√k is paid in full, so projecting pays only when k is well below d.

**Calibration** (``--calibrate``; never on the held-out sets): the synthetic logistic families of
:func:`benchmarks.calibrate_lambda.family` (d ∈ {10, 31, 64, 106}, n ∈ {400, 1300, 4000},
signal ∈ {2, 4}; fresh training rows every repetition, 5000 test rows from the family's law)
and Adult (its training split every time, its test split). In every repetition and for every k
of :data:`K_GRID` below d, a fresh R and fresh noise; the same rows serve every k and ε of a
repetition (paired differences). Per cell (data, ε) the curve is the mean paired gain
acc(k) − acc(no projection) with its standard error; k = d stands for no projection (gain 0).
A rule (form, c, k_min, θ) is read off each curve by linear interpolation in log k; its score is
the mean gain over all cells, reported with the worst cell and the number of cells losing more
than noise (gain < −2 s.e., the s.e. interpolated likewise). The chosen rule is the best mean
gain among rules with no such cell (the best mean gain overall if none qualifies).

**Evaluation** (``--evaluate``, 60 repetitions): breast cancer, digits 5–9 (bench_utility) and
Fashion 5–9 on 3000 rows (:func:`benchmarks.calibrate_norm_rule.fashion_binary`), test accuracy
mean ± s.e. of: OP at the rule's λ without projection; OP with the chosen projection (fresh R
every repetition; at the whole ε: the service's ~5 % majority count is not charged here);
PrivFit's best λ in hindsight without projection and diffprivlib's best λ in hindsight
(:data:`EVAL_GRID`); and, as a diagnostic never used to choose anything, the best k of
:data:`K_GRID` in hindsight (at the rule's λ for d = k), to show how far the rule's k is from
it. Adult is not re-run here (its curves are in the calibration file).

Run: ``python -m benchmarks.calibrate_projection --calibrate`` (writes
``benchmarks/calibration/projection_rule.json``), ``--rescore`` (choose again from the saved
curves), ``--evaluate`` (writes ``benchmarks/out/projection_eval.json``), ``--quick`` (a smoke
run of a few seconds; give ``--calibration-json`` and ``--json`` to keep it off the real files).
Figures and verdict: benchmarks/RESULTS.md, "A public projection dimension for objective
perturbation (issue 28)".
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from benchmarks._common import accuracy, environment, fit_diffprivlib, limit_threads
from benchmarks.bench_utility import Split, adult, breast_cancer, digits, mean_se
from benchmarks.calibrate_lambda import family
from benchmarks.calibrate_norm_rule import fashion_binary
from service.dp import fit, prepare_design
from service.dp.analysis.regularization import auto_regularization
from service.dp.data.projection import clip_rows

FloatArray = NDArray[np.float64]
T = TypeVar("T")
R = TypeVar("R")
MECHANISM = "objective_perturbation"
HERE = Path(__file__).resolve().parent
OUT = HERE / "calibration" / "projection_rule.json"
EVAL_OUT = HERE / "out" / "projection_eval.json"
EPSILONS: tuple[float, ...] = (0.05, 0.1, 0.5, 1.0)
K_GRID: tuple[int, ...] = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96)
SYNTH_D: tuple[int, ...] = (10, 31, 64, 106)
SYNTH_N: tuple[int, ...] = (400, 1300, 4000)
SYNTH_SIGNAL: tuple[float, ...] = (2.0, 4.0)
SYNTH_TEST_ROWS = 5000
K_MINS: tuple[int, ...] = (2, 3, 4, 6, 8)
#: No projection when the rule's k ≥ cutoff·d (1: the plain rule; < 1 also spares the k near
#: d, where the noise saved, a factor k/d, is small and the JL distortion is paid in full).
CUTOFFS: tuple[float, ...] = (1.0, 0.5, 1.0 / 3.0)
#: k = ⌈c·(nε)^p⌉ for the exponent p of each form (the linear form is k = ⌈nε/c⌉, c = 1/c').
FORMS: dict[str, float] = {"linear": 1.0, "two_thirds": 2.0 / 3.0, "sqrt": 0.5}
#: c' grids per form, wide enough that the optimum is inside (nε spans 20 … 30,000).
C_GRIDS: dict[str, tuple[float, ...]] = {
    "linear": tuple(float(v) for v in np.geomspace(1 / 400, 1 / 5, 41)),
    "two_thirds": tuple(float(v) for v in np.geomspace(0.01, 2.0, 41)),
    "sqrt": tuple(float(v) for v in np.geomspace(0.05, 8.0, 41)),
}
NOISE_SE = 2.0
EVAL_GRID: tuple[float, ...] = (1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
EVAL_SETS: dict[str, Callable[[], Split]] = {
    "breast_cancer": breast_cancer,
    "digits_5to9": digits,
    "fashion_5to9_3000": fashion_binary,
}


# --------------------------------------------------------------------------- the rule


def rule_dimension(n: int, d: int, epsilon: float, rule: dict[str, Any]) -> int | None:
    """The rule's k = max(k_min, ⌈c·(nε)^p⌉) (linear form: p = 1, c = 1/c_lin), or None (no
    projection) when k ≥ cutoff·d (cutoff 1 unless the rule says otherwise). A public function
    of (n, d, ε): it costs no privacy."""
    if n < 1 or d < 1 or not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("n and d must be ≥ 1 and ε finite and > 0")
    k = max(int(rule["k_min"]), math.ceil(rule["c"] * (n * epsilon) ** FORMS[rule["form"]]))
    return None if k >= rule.get("cutoff", 1.0) * d else k


def describe(rule: dict[str, Any]) -> str:
    """The rule in words, e.g. ``k = ⌈nε/50⌉ ; k_min = 4 ; no projection when k ≥ d``."""
    c = rule["c"]
    if rule["form"] == "linear":
        head = f"k = ⌈nε/{1 / c:.3g}⌉"
    elif rule["form"] == "two_thirds":
        head = f"k = ⌈{c:.3g}·(nε)^(2/3)⌉"
    else:
        head = f"k = ⌈{c:.3g}·(nε)^(1/2)⌉"
    cut = {1.0: "d", 0.5: "d/2", 1.0 / 3.0: "d/3"}.get(rule.get("cutoff", 1.0), "?")
    return f"{head} ; k_min = {rule['k_min']} ; no projection when k ≥ {cut}"


def project(X: FloatArray, k: int, rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    """(clip_rows(X Rᵀ), R) with a fresh public R ∈ R^{k×d}, R_ij ~ N(0, 1/k)."""
    proj = rng.normal(0.0, 1.0 / math.sqrt(k), (k, X.shape[1]))
    return clip_rows(X @ proj.T, copy=False), proj


def op_accuracy(
    X: FloatArray,
    y: FloatArray,
    test: tuple[FloatArray, FloatArray],
    eps: float,
    rng: np.random.Generator,
    *,
    k: int | None = None,
    lam: float | None = None,
) -> float:
    """Test accuracy of one OP fit at the rule's λ (for the fitted width) or at ``lam``, on the
    rows projected to k columns by a fresh R (k None: the raw rows)."""
    Xte = test[0]
    if k is not None:
        X, proj = project(X, k, rng)
        Xte = Xte @ proj.T  # a positive rescaling of a row never changes the predicted sign
    n, width = X.shape
    if lam is None:
        lam = auto_regularization(MECHANISM, n=n, d=width, epsilon=eps).regularization
    res = fit(prepare_design(X, y), None, MECHANISM, epsilon=eps, regularization=lam, rng=rng)
    return accuracy(res.model.decision_function(Xte), test[1])


# --------------------------------------------------------------------------- calibration


@functools.lru_cache(maxsize=1)
def _adult() -> Split:
    return adult()


def _cell(
    args: tuple[str, tuple[Any, ...], tuple[float, ...], int, tuple[int, ...], int],
) -> list[dict[str, Any]]:
    """Paired gain curves of one data source at every ε: per repetition one training set, and
    per (k, ε) a fresh R and fresh noise."""
    name, spec, epsilons, reps, k_grid, seed = args
    limit_threads(1)
    rng = np.random.default_rng(seed)
    if spec[0] == "adult":
        X0, y0, Xte, yte = _adult()
        draw = None
    else:
        _, d, signal, n = spec
        draw, _ = family(d, signal, seed=1000 * d + int(10 * signal))
        Xte, yte = draw(SYNTH_TEST_ROWS, np.random.default_rng(1000 * d + int(10 * signal) + 2))
    test = (Xte, yte)
    d = Xte.shape[1]
    ks = [k for k in k_grid if k < d]
    gains = {eps: np.zeros((reps, len(ks))) for eps in epsilons}
    base = {eps: np.zeros(reps) for eps in epsilons}
    n = 0
    for r in range(reps):
        X, y = (X0, y0) if draw is None else draw(spec[3], rng)
        n = X.shape[0]
        for eps in epsilons:
            base[eps][r] = op_accuracy(X, y, test, eps, rng)
            for j, k in enumerate(ks):
                gains[eps][r, j] = op_accuracy(X, y, test, eps, rng, k=k) - base[eps][r]
    out = []
    for eps in epsilons:
        g = gains[eps]
        se = g.std(axis=0, ddof=1) / math.sqrt(reps) if reps > 1 else np.zeros(len(ks))
        out.append(
            {
                "name": name,
                "n": n,
                "d": d,
                "epsilon": eps,
                "reps": reps,
                "no_projection": mean_se(base[eps].tolist()),
                "k": [*ks, d],
                "gain": [*(float(v) for v in g.mean(axis=0)), 0.0],
                "gain_se": [*(float(v) for v in se), 0.0],
            }
        )
    return out


def _pool_map(fn: Callable[[T], R], jobs: Sequence[T], workers: int) -> list[R]:
    if workers <= 1:
        return [fn(job) for job in jobs]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(fn, jobs))


def calibrate(reps: int, adult_reps: int, workers: int, *, quick: bool = False) -> dict[str, Any]:
    """Curves of every calibration cell (module docstring)."""
    jobs: list[tuple[str, tuple[Any, ...], tuple[float, ...], int, tuple[int, ...], int]] = []
    if quick:
        jobs.append(
            (
                "synthetic d=10 n=400 s=2",
                ("synthetic", 10, 2.0, 400),
                (0.5, 1.0),
                reps,
                (2, 4, 8),
                1,
            )
        )
    else:
        seed = 100
        for eps in EPSILONS:  # the slowest jobs first
            seed += 1
            jobs.append(("adult", ("adult",), (eps,), adult_reps, K_GRID, seed))
        for d, n, s in itertools.product(reversed(SYNTH_D), reversed(SYNTH_N), SYNTH_SIGNAL):
            seed += 1
            name = f"synthetic d={d} n={n} s={s:g}"
            jobs.append((name, ("synthetic", d, s, n), EPSILONS, reps, K_GRID, seed))
    t0 = time.time()
    cells = [cell for group in _pool_map(_cell, jobs, workers) for cell in group]
    print(f"{len(cells)} cells in {time.time() - t0:.0f} s", flush=True)
    return {"cells": cells, "reps": reps, "adult_reps": adult_reps, "seconds": time.time() - t0}


def _read(cell: dict[str, Any], k: int | None) -> tuple[float, float]:
    """(gain, s.e.) of a cell at k, linear in log k between grid points (None or k ≥ d: 0)."""
    if k is None or k >= cell["d"]:
        return 0.0, 0.0
    logk = np.log(np.asarray(cell["k"], dtype=np.float64))
    x = math.log(k)
    return float(np.interp(x, logk, cell["gain"])), float(np.interp(x, logk, cell["gain_se"]))


def score(cells: Sequence[dict[str, Any]], rule: dict[str, Any]) -> dict[str, Any]:
    """Mean gain over the cells, the worst cell and the cells losing beyond noise."""
    gains, losing = [], []
    for cell in cells:
        g, se = _read(cell, rule_dimension(cell["n"], cell["d"], cell["epsilon"], rule))
        gains.append(g)
        if g < -NOISE_SE * se:
            losing.append(f"{cell['name']} ε={cell['epsilon']:g}")
    worst = int(np.argmin(gains))
    return {
        **rule,
        "rule": describe(rule),
        "gain": float(np.mean(gains)),
        "worst": float(gains[worst]),
        "worst_cell": f"{cells[worst]['name']} ε={cells[worst]['epsilon']:g}",
        "losing_beyond_noise": losing,
    }


def _better(a: dict[str, Any], b: dict[str, Any] | None) -> bool:
    """Prefer no cell losing beyond noise, then the larger mean gain."""
    if b is None:
        return True
    ka = (not a["losing_beyond_noise"], a["gain"])
    kb = (not b["losing_beyond_noise"], b["gain"])
    return ka > kb


def choose(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Score every (form, c, k_min); per form and k_min keep the preferred constant (no cell
    losing beyond noise, then the mean gain: "safe") and the largest mean gain regardless
    ("max"). The chosen rule is the preferred one overall; the oracle (best grid k per cell in
    hindsight) is the ceiling."""
    best_by: dict[str, dict[str, dict[str, Any]]] = {}
    chosen: dict[str, Any] | None = None
    for form, cutoff, k_min in itertools.product(FORMS, CUTOFFS, K_MINS):
        safe: dict[str, Any] | None = None
        top: dict[str, Any] | None = None
        for c in C_GRIDS[form]:
            s = score(cells, {"form": form, "c": c, "k_min": k_min, "cutoff": cutoff})
            if _better(s, safe):
                safe = s
            if top is None or s["gain"] > top["gain"]:
                top = s
        assert safe is not None
        assert top is not None
        best_by[f"{form} cutoff={cutoff:.3g} k_min={k_min}"] = {"safe": safe, "max": top}
        if _better(safe, chosen):
            chosen = safe
    assert chosen is not None
    oracle = [max(cell["gain"]) for cell in cells]
    per_cell = []
    for cell in cells:
        k = rule_dimension(cell["n"], cell["d"], cell["epsilon"], chosen)
        g, se = _read(cell, k)
        j = int(np.argmax(cell["gain"]))
        per_cell.append(
            {
                "cell": f"{cell['name']} ε={cell['epsilon']:g}",
                "k": k,
                "gain": g,
                "se": se,
                "best_k": cell["k"][j],
                "best_gain": cell["gain"][j],
            }
        )
    return {
        "chosen": chosen,
        "forms": best_by,
        "oracle_gain": float(np.mean(oracle)),
        "chosen_per_cell": per_cell,
    }


def summary(result: dict[str, Any]) -> str:
    """Markdown: per form and k_min the preferred ("safe") and the largest-mean-gain constant."""
    lines = [
        "| form | off when k ≥ | k_min | safe: rule | mean gain | worst cell | max: rule "
        "| mean gain | worst cell | cells losing > 2 s.e. |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for pair in result["forms"].values():
        s, t = pair["safe"], pair["max"]
        lines.append(
            f"| {s['form']} | {s['rule'].split('when k ≥ ')[1]} | {s['k_min']} | "
            f"{s['rule'].split(' ; ')[0]} | "
            f"{s['gain'] * 100:+.2f} | {s['worst'] * 100:+.2f} ({s['worst_cell']}) | "
            f"{t['rule'].split(' ; ')[0]} | {t['gain'] * 100:+.2f} | "
            f"{t['worst'] * 100:+.2f} ({t['worst_cell']}) | {len(t['losing_beyond_noise'])} |"
        )
    lines.append("")
    lines.append(
        f"chosen: {result['chosen']['rule']} (mean gain "
        f"{result['chosen']['gain'] * 100:+.2f} points, worst cell "
        f"{result['chosen']['worst'] * 100:+.2f}; oracle k per cell "
        f"{result['oracle_gain'] * 100:+.2f})"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- evaluation


def _eval_cell(
    args: tuple[str, float, int, dict[str, Any], tuple[float, ...], tuple[int, ...], int],
) -> dict[str, Any]:
    """One held-out (data set, ε) cell, ``reps`` repetitions of every contender; the best grid
    k in hindsight (at the rule's λ for d = k) is a diagnostic, never used to choose."""
    name, eps, reps, rule, grid, k_grid, seed = args
    limit_threads(1)
    t0 = time.time()
    X, y, Xte, yte = EVAL_SETS[name]()
    test = (Xte, yte)
    n, d = X.shape
    k = rule_dimension(n, d, eps, rule)
    rng = np.random.default_rng(seed)
    cols: dict[str, list[float]] = {"rule": [], "projected": []}
    diff: list[float] = []
    privfit: dict[float, list[float]] = {lam: [] for lam in grid}
    by_k: dict[int, list[float]] = {kk: [] for kk in k_grid if kk < d}
    dpl: dict[float, list[float]] = {lam: [] for lam in grid}
    for _ in range(reps):
        base = op_accuracy(X, y, test, eps, rng)
        proj = op_accuracy(X, y, test, eps, rng, k=k) if k is not None else base
        cols["rule"].append(base)
        cols["projected"].append(proj)
        diff.append(proj - base)
        for kk, vals in by_k.items():
            vals.append(op_accuracy(X, y, test, eps, rng, k=kk))
        for lam in grid:
            privfit[lam].append(op_accuracy(X, y, test, eps, rng, lam=lam))
            peer = fit_diffprivlib(X, y, epsilon=eps, lam=lam, seed=int(rng.integers(2**31)))
            dpl[lam].append(accuracy(peer.decision_function(Xte), yte))
    best = max(grid, key=lambda lam: float(np.mean(privfit[lam])))
    dbest = max(grid, key=lambda lam: float(np.mean(dpl[lam])))
    kbest = max(by_k, key=lambda kk: float(np.mean(by_k[kk])))
    return {
        "dataset": name,
        "n": n,
        "d": d,
        "epsilon": eps,
        "k": k,
        "lambda_rule": auto_regularization(MECHANISM, n=n, d=d, epsilon=eps).regularization,
        "lambda_rule_projected": (
            auto_regularization(MECHANISM, n=n, d=k, epsilon=eps).regularization
            if k is not None
            else None
        ),
        "best_lambda": best,
        "diffprivlib_best_lambda": dbest,
        "best_k": kbest,
        "by_k": {str(kk): mean_se(vals) for kk, vals in by_k.items()},
        "results": {
            "rule": mean_se(cols["rule"]),
            "projected": mean_se(cols["projected"]),
            "gain (paired)": mean_se(diff),
            "best k (hindsight)": mean_se(by_k[kbest]),
            "best λ (hindsight)": mean_se(privfit[best]),
            "diffprivlib best λ": mean_se(dpl[dbest]),
        },
        "seconds": time.time() - t0,
    }


def evaluate(
    rule: dict[str, Any],
    names: Sequence[str],
    epsilons: Sequence[float],
    reps: int,
    workers: int,
    grid: tuple[float, ...] = EVAL_GRID,
    k_grid: tuple[int, ...] = K_GRID,
) -> list[dict[str, Any]]:
    jobs = [
        (name, eps, reps, rule, grid, k_grid, zlib.crc32(f"{name} {eps}".encode()))
        for name in names
        for eps in epsilons
    ]
    return _pool_map(_eval_cell, jobs, workers)


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| data (n, d) | ε | rule, no projection (λ) | rule, projected (k) | gain (paired) "
        "| best k hindsight (k) | best λ hindsight | diffprivlib best λ |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        r = {key: "{:.3f} ± {:.3f}".format(*v) for key, v in row["results"].items()}
        g = row["results"]["gain (paired)"]
        k = "none" if row["k"] is None else str(row["k"])
        lines.append(
            f"| {row['dataset']} ({row['n']}, {row['d']}) | {row['epsilon']:g} | "
            f"{r['rule']} ({row['lambda_rule']:.2g}) | {r['projected']} ({k}) | "
            f"{g[0] * 100:+.1f} ± {g[1] * 100:.1f} | {r['best k (hindsight)']} "
            f"({row['best_k']}) | {r['best λ (hindsight)']} "
            f"({row['best_lambda']:g}) | {r['diffprivlib best λ']} "
            f"({row['diffprivlib_best_lambda']:g}) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--rescore", action="store_true", help="choose again from saved cells")
    parser.add_argument("--evaluate", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a smoke run of every step")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--adult-reps", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--datasets", nargs="*", default=list(EVAL_SETS))
    parser.add_argument("--calibration-json", type=Path, default=OUT)
    parser.add_argument("--json", type=Path, default=EVAL_OUT)
    parser.add_argument(
        "--rule-key",
        default=None,
        help="evaluate another scored rule instead of the chosen one, e.g. 'linear cutoff=1 "
        "k_min=2' (a comparison after the choice, never a choice)",
    )
    parser.add_argument("--which", choices=("safe", "max"), default="safe")
    args = parser.parse_args(argv)
    limit_threads(1)
    if args.quick:
        args.calibrate = args.evaluate = True
        args.workers = 1
    if args.calibrate or args.rescore:
        if args.calibrate:
            data = calibrate(
                args.reps or (2 if args.quick else 240),
                args.adult_reps,
                args.workers,
                quick=args.quick,
            )
        else:
            data = json.loads(args.calibration_json.read_text())
        data.update(choose(data["cells"]))
        data["environment"] = environment()
        args.calibration_json.parent.mkdir(parents=True, exist_ok=True)
        args.calibration_json.write_text(json.dumps(data, indent=1))
        print(summary(data))
    if args.evaluate:
        saved = json.loads(args.calibration_json.read_text())
        rule = (
            saved["chosen"] if args.rule_key is None else saved["forms"][args.rule_key][args.which]
        )
        print("rule (calibrated on synthetic data and Adult):", rule["rule"])
        if args.quick:
            rows = evaluate(
                rule, ["breast_cancer"], (1.0,), args.reps or 2, 1, grid=(1e-2, 0.1), k_grid=(4, 8)
            )
        else:
            rows = evaluate(rule, args.datasets, EPSILONS, args.reps or 60, args.workers)
        print(table(rows))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"rule": rule, "rows": rows, "environment": environment()}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
