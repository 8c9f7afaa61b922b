"""How well the ``"auto"`` λ rule does on multi-class and regression labels
(service/dp/analysis/regularization_tasks.py), with the binary calibration's R and A.

Public reference data only: synthetic families drawn from a fixed public law (below; no real
data set, in particular none of the benchmark datasets). For each family and ε the mechanism is
fitted at every λ of a log grid, and the test score (on 20,000 fresh rows of the same law) is
averaged over the repetitions; the rule's score at a comparator norm R is read off the curve by
linear interpolation in log λ (A = 0.01 throughout). The table gives, per task and mechanism,
the mean gap between the best λ in hindsight and the rule at R = 10 (the binary constant, the
one the service uses), and the R of the grid that would have minimised the gap.

The law (seeded). Rows: d − 1 Gaussian columns with a random correlation, an intercept 1, every
row scaled to norm 1. Multi-class: class scores s·(Uᵀx̃) + Gumbel noise (a softmax model),
U ~ N(0, I/d) per class, s ∈ {2, 4}, y = argmax. Regression: y = clip(uᵀx̃/2 + σ·N(0, 1), −1, 1)
with u ~ N(0, I/d), σ ∈ {0.1, 0.3} (x̃ the standardised columns), so labels fill [−1, 1] as
bounds mapped by the service do. Scores: multi-class accuracy; regression RMSE of the clipped
prediction in [−1, 1] units (smaller is better; reported as negative RMSE in the gaps).

Run: ``.venv/bin/python -m benchmarks.calibrate_lambda_tasks [--quick]``; writes
``benchmarks/calibration/lambda_rule_tasks.json`` and prints a Markdown summary.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks._common import limit_threads
from service.dp import fit, prepare_design
from service.dp.analysis.regularization_tasks import auto_regularization_task
from service.dp.core.tasks import Task

FloatArray = NDArray[np.float64]
OUT = Path(__file__).resolve().parent / "calibration" / "lambda_rule_tasks.json"
LAMBDAS = tuple(float(v) for v in np.logspace(-5, 1, 13))
NORMS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0)
TEST_ROWS = 20_000


def _rows(d: int, m: int, A: FloatArray, rng: np.random.Generator) -> FloatArray:
    z = rng.normal(size=(m, d - 1)) @ A.T
    X = np.hstack([z, np.ones((m, 1))])
    out: FloatArray = X / np.linalg.norm(X, axis=1, keepdims=True)
    return out


def _standardised(X: FloatArray) -> FloatArray:
    Z = X[:, :-1]
    out: FloatArray = (Z - Z.mean(axis=0)) / np.maximum(Z.std(axis=0), 1e-12)
    return out


def sample(
    task: str, d: int, k: int, level: float, seed: int, m: int, draw: int, offset: float = 0.0
) -> Any:
    """(X, y) of the family (task, d, K, signal or σ; regression labels centred at
    ``offset``) from its public seed."""
    law = np.random.default_rng(seed)
    A = law.normal(0.0, 1.0 / math.sqrt(d - 1), (d - 1, d - 1)) + np.eye(d - 1)
    if task == "multiclass":
        U = law.normal(0.0, 1.0 / math.sqrt(d - 1), (k, d - 1))
    else:
        u = law.normal(0.0, 1.0 / math.sqrt(d - 1), d - 1)
    rng = np.random.default_rng([seed, draw])
    X = _rows(d, m, A, rng)
    Z = _standardised(X)
    if task == "multiclass":
        # offset > 0: imbalanced classes, log-prior −offset·j for class j (offset 0.7: the
        # first class about half the rows at K ≥ 5)
        scores = level * Z @ U.T - offset * np.arange(k) + rng.gumbel(size=(m, k))
        return X, np.argmax(scores, axis=1).astype(np.float64)
    y = np.clip(offset + Z @ u / 2.0 + level * rng.normal(size=m), -1.0, 1.0)
    return X, y


#: The sparse one-hot family (``--sparse``): categorical columns per row, as tabular data
#: one-hot encodes them.
SPARSE_NUMERIC = 5
SPARSE_LEVELS = (2, 3, 5, 6, 8, 12, 16, 40)


def sample_sparse(
    d: int, k: int, level: float, seed: int, m: int, draw: int, offset: float = 0.0
) -> Any:
    """(X, y) of the sparse one-hot family from its public seed: rows of non-negative,
    non-centred columns as encoded tabular data has — categorical variables one-hot encoded
    (cardinalities :data:`SPARSE_LEVELS` scaled to fill d − 1 − 5 columns, level frequencies
    ∝ 1/rank: one common level per variable), 5 numeric columns uniform in [0, 1], an
    intercept 1, the row clipped to norm ≤ 1 (about 14 active entries: every row is scaled by
    its norm ≈ 3). Labels: class scores level·(a few variables' level effects, each N(0, 1)
    per level and class, scaled by 1, ½, ¼, …) − offset·k + Gumbel noise."""
    law = np.random.default_rng([seed, 17])
    cats = SPARSE_LEVELS
    total = d - 1 - SPARSE_NUMERIC
    sizes = np.maximum(2, np.round(np.asarray(cats) * total / sum(cats))).astype(int)
    sizes[-1] = total - int(sizes[:-1].sum())
    weights = [law.normal(size=(int(s), k)) * 0.5**j for j, s in enumerate(sizes)]
    freqs = [1.0 / np.arange(1, int(s) + 1) for s in sizes]
    w_num = law.normal(size=(SPARSE_NUMERIC, k))
    rng = np.random.default_rng([seed, draw])
    X = np.zeros((m, d))
    scores = np.zeros((m, k))
    col = 0
    for s, p, w in zip(sizes, freqs, weights, strict=True):
        idx = rng.choice(int(s), size=m, p=p / p.sum())
        X[np.arange(m), col + idx] = 1.0
        scores += w[idx]
        col += int(s)
    num = rng.uniform(size=(m, SPARSE_NUMERIC))
    X[:, col : col + SPARSE_NUMERIC] = num
    X[:, -1] = 1.0
    scores += (num - 0.5) @ w_num
    scores = level * scores - offset * np.arange(k) + rng.gumbel(size=(m, k))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    return X, np.argmax(scores, axis=1).astype(np.float64)


def score(model: Any, X: FloatArray, y: FloatArray, task: str) -> float:
    s = model.decision_function(X)
    if task == "multiclass":
        return float(np.mean(np.argmax(s, axis=1) == y))
    return -float(np.sqrt(np.mean((y - np.clip(s, -1.0, 1.0)) ** 2)))


def curve(
    task: Task,
    mechanism: str,
    loss: str,
    d: int,
    k: int,
    level: float,
    n: int,
    eps: float,
    repeats: int,
    seed: int,
    offset: float = 0.0,
    sparse: bool = False,
) -> list[float]:
    def draw(m: int, r: int) -> Any:
        if sparse:
            return sample_sparse(d, k, level, seed, m, r, offset)
        return sample(task, d, k, level, seed, m, r, offset)

    Xt, yt = draw(TEST_ROWS, 10_000)
    out = []
    for lam in LAMBDAS:
        vals = []
        for r in range(repeats):
            X, y = draw(n, r)
            design = prepare_design(X, y, task, k if task == "multiclass" else 1)
            result = fit(
                design,
                None,
                mechanism,
                epsilon=eps,
                delta=1e-6 if mechanism == "adassp" else 0.0,
                loss=loss,
                regularization=lam,
                task=task,
                n_classes=k if task == "multiclass" else 1,
                rng=np.random.default_rng([seed, r, int(lam * 1e9)]),
            )
            vals.append(score(result.model, Xt, yt, task))
        out.append(float(np.mean(vals)))
    return out


def at(values: list[float], lam: float) -> float:
    """The curve at λ by linear interpolation in log λ (clamped to the grid)."""
    x = np.log(np.asarray(LAMBDAS))
    return float(np.interp(math.log(lam), x, np.asarray(values)))


def rule(
    mechanism: str, task: str, loss: str, n: int, d: int, k: int, eps: float, R: float
) -> float:
    return auto_regularization_task(
        mechanism,
        task=task,
        n_classes=k if task == "multiclass" else 1,
        n=n,
        d=d,
        epsilon=eps,
        delta=1e-6,
        loss=loss,
        norm=R,
    ).regularization


#: The Huber study (``--huber``): widths, label offsets, noise levels, sizes and ε.
HUBER_WIDTHS = (0.1, 0.25, 0.5)
HUBER_OFFSETS = (0.0, -0.4)
HUBER_DIMS = (10, 30, 100)
HUBER_NS = (2000, 10_000)
HUBER_EPSILONS = (0.1, 0.5, 1.0)
HUBER_OUT = OUT.with_name("huber_rule_regression.json")


def huber_curve(
    mechanism: str, d: int, h: float, offset: float, n: int, eps: float, repeats: int, seed: int
) -> tuple[list[float], float]:
    """Test RMSE ([−1, 1] units) at every λ of the grid, and the training mean's RMSE."""
    Xt, yt = sample("regression", d, 1, 0.2, seed, TEST_ROWS, 10_000, offset)
    out: list[float] = []
    trivial: list[float] = []
    for lam in LAMBDAS:
        vals = []
        for r in range(repeats):
            X, y = sample("regression", d, 1, 0.2, seed, n, r, offset)
            if lam == LAMBDAS[0]:
                trivial.append(float(np.sqrt(np.mean((yt - float(np.mean(y))) ** 2))))
            result = fit(
                prepare_design(X, y, "regression", 1),
                None,
                mechanism,
                epsilon=eps,
                delta=0.0,
                loss="huber",
                regularization=lam,
                task="regression",
                n_classes=1,
                rng=np.random.default_rng([seed, r, int(lam * 1e9), int(h * 100)]),
                h=h,
            )
            vals.append(-score(result.model, Xt, yt, "regression"))
        out.append(float(np.mean(vals)))
    return out, float(np.mean(trivial))


def huber_rule(mechanism: str, n: int, d: int, eps: float, h: float, R: float) -> float:
    return auto_regularization_task(
        mechanism,
        task="regression",
        n_classes=1,
        n=n,
        d=d,
        epsilon=eps,
        loss="huber",
        params={"h": h},
        norm=R,
    ).regularization


def huber_study(repeats: int) -> None:
    """Regression with the Huber loss: per mechanism, width h and comparator norm R, the mean
    RMSE gap to the best λ in hindsight and the cells where the rule does worse than the
    training mean (labels centred at 0 or off-centre, as bounded labels usually are)."""
    cells: list[dict[str, Any]] = []
    start = time.time()
    for mechanism in ("objective_perturbation", "output_perturbation"):
        for d in HUBER_DIMS:
            for offset in HUBER_OFFSETS:
                for n in HUBER_NS:
                    for eps in HUBER_EPSILONS:
                        for h in HUBER_WIDTHS:
                            seed = int(1000 * d + 7 + 100 * abs(offset))
                            values, trivial = huber_curve(
                                mechanism, d, h, offset, n, eps, repeats, seed
                            )
                            cells.append(
                                {
                                    "mechanism": mechanism,
                                    "d": d,
                                    "offset": offset,
                                    "n": n,
                                    "epsilon": eps,
                                    "h": h,
                                    "curve": values,
                                    "trivial": trivial,
                                    "best": min(values),
                                    "rule": {
                                        str(R): at(values, huber_rule(mechanism, n, d, eps, h, R))
                                        for R in NORMS
                                    },
                                }
                            )
        print(f"{mechanism}: {len(cells)} cells, {time.time() - start:.0f} s", flush=True)
    HUBER_OUT.parent.mkdir(exist_ok=True)
    HUBER_OUT.write_text(json.dumps({"lambdas": LAMBDAS, "cells": cells}, indent=1))
    print(huber_summary(cells))


def huber_summary(cells: list[dict[str, Any]]) -> str:
    """Per mechanism and h: the R minimising the mean gap, that gap, and how many cells are
    worse than the training mean at that R (and at the best λ in hindsight)."""
    lines = [
        "| mechanism | h | cells | best R | mean RMSE gap at best R | worse than the mean at "
        "best R | worse than the mean at the best λ |",
        "|---|---|---|---|---|---|---|",
    ]
    for mechanism in ("objective_perturbation", "output_perturbation"):
        for h in HUBER_WIDTHS:
            mine = [c for c in cells if c["mechanism"] == mechanism and c["h"] == h]
            if not mine:
                continue
            gaps = {R: float(np.mean([c["rule"][str(R)] - c["best"] for c in mine])) for R in NORMS}
            best_R = min(gaps, key=lambda R: gaps[R])
            worse = sum(c["rule"][str(best_R)] > c["trivial"] for c in mine)
            worse_best = sum(c["best"] > c["trivial"] for c in mine)
            lines.append(
                f"| {mechanism} | {h:g} | {len(mine)} | {best_R:g} | {gaps[best_R]:.4f} | "
                f"{worse} | {worse_best} |"
            )
    return "\n".join(lines)


#: The wide multi-class output study (``--multiclass-output``): noise dimensions dK up to
#: 1000, as real multi-class fits have.
WIDE_DIMS = (30, 100)
WIDE_CLASSES = (5, 10)
WIDE_NS = (10_000, 30_000)
WIDE_EPSILONS = (0.1, 0.5, 1.0)
WIDE_OUT = OUT.with_name("lambda_rule_multiclass_output_wide.json")
#: class imbalance of the wide study's second half (``--imbalanced``)
WIDE_OFFSET = 0.7


def _output_cell(values: list[float], n: int, d: int, k: int, eps: float) -> dict[str, Any]:
    """One multi-class output-perturbation cell's accuracy curve, its best, and the rule's
    accuracy per R (interpolated on the curve)."""
    return {
        "curve": values,
        "best": max(values),
        "rule": {
            str(R): at(
                values, rule("output_perturbation", "multiclass", "logistic", n, d, k, eps, R)
            )
            for R in NORMS
        },
    }


def wide_output_study(repeats: int, offset: float = 0.0) -> None:
    """Multi-class output perturbation on wide softmax families (signal 4): per R, the mean
    accuracy gap to the best λ in hindsight (the first study's cells have dK ≤ 150); with an
    ``offset``, imbalanced classes at n = 10⁴ only."""
    cells: list[dict[str, Any]] = []
    start = time.time()
    for d in WIDE_DIMS:
        for k in WIDE_CLASSES:
            for n in WIDE_NS if offset == 0.0 else WIDE_NS[:1]:
                for eps in WIDE_EPSILONS:
                    seed = int(1000 * d + 10 * k + 400)
                    values = curve(
                        "multiclass",
                        "output_perturbation",
                        "logistic",
                        d,
                        k,
                        4.0,
                        n,
                        eps,
                        repeats,
                        seed,
                        offset,
                    )
                    cells.append(
                        {
                            "d": d,
                            "K": k,
                            "n": n,
                            "epsilon": eps,
                            **_output_cell(values, n, d, k, eps),
                        }
                    )
                    print(f"{len(cells)} cells, {time.time() - start:.0f} s", flush=True)
    out = WIDE_OUT if offset == 0.0 else WIDE_OUT.with_name(WIDE_OUT.stem + "_imbalanced.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"lambdas": LAMBDAS, "cells": cells}, indent=1))
    gaps = {R: float(np.mean([c["best"] - c["rule"][str(R)] for c in cells])) for R in NORMS}
    for R in NORMS:
        print(f"R = {R:g}: mean accuracy gap {gaps[R]:.4f}")


#: The sparse one-hot study (``--sparse``): Adult-like encoded tabular rows.
SPARSE_DIMS = (50, 100)
SPARSE_CLASSES = (5, 10)
SPARSE_NS = (10_000, 30_000)
SPARSE_EPSILONS = (0.1, 0.5, 1.0)
SPARSE_LEVEL = 2.0
#: class imbalance of the sparse study (``--balanced``: none): the largest class about a
#: third of the rows
SPARSE_OFFSET = 0.5
SPARSE_OUT = OUT.with_name("lambda_rule_multiclass_output_sparse.json")


def sparse_output_study(
    repeats: int,
    dims: tuple[int, ...],
    offset: float,
    ns: tuple[int, ...] = SPARSE_NS,
    level: float = SPARSE_LEVEL,
) -> None:
    """Multi-class output perturbation on the sparse one-hot family (:func:`sample_sparse`):
    the accuracy curve over the λ grid per cell, and the rule's accuracy per R."""
    cells: list[dict[str, Any]] = []
    start = time.time()
    for d in dims:
        for k in SPARSE_CLASSES:
            for n in ns:
                for eps in SPARSE_EPSILONS:
                    seed = int(1000 * d + 10 * k + 500)
                    values = curve(
                        "multiclass",
                        "output_perturbation",
                        "logistic",
                        d,
                        k,
                        level,
                        n,
                        eps,
                        repeats,
                        seed,
                        offset,
                        sparse=True,
                    )
                    cells.append(
                        {
                            "d": d,
                            "K": k,
                            "n": n,
                            "epsilon": eps,
                            "offset": offset,
                            "level": level,
                            **_output_cell(values, n, d, k, eps),
                        }
                    )
                    print(f"{len(cells)} cells, {time.time() - start:.0f} s", flush=True)
    tag = "_".join(str(d) for d in dims) + ("_balanced" if offset == 0.0 else "")
    if level != SPARSE_LEVEL:
        tag += f"_signal{level:g}"
    if offset not in (0.0, SPARSE_OFFSET):
        tag += f"_offset{offset:g}"
    out = SPARSE_OUT.with_name(f"{SPARSE_OUT.stem}_d{tag}.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"lambdas": LAMBDAS, "cells": cells}, indent=1))
    print(f"wrote {out}")


#: R grid of the combined summary (``--combine``): the calibration grid and beyond.
COMBINED_NORMS = (0.5, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0)


def output_families() -> dict[str, list[dict[str, Any]]]:
    """Every stored multi-class output-perturbation cell, per family (the saved curves of the
    first study, the wide studies and the sparse studies)."""
    families: dict[str, list[dict[str, Any]]] = {}
    first = json.loads(OUT.read_text())["cells"]
    families["softmax, first study"] = [
        c for c in first if c["task"] == "multiclass" and c["mechanism"] == "output_perturbation"
    ]
    for path, name in (
        (WIDE_OUT, "softmax, wide"),
        (WIDE_OUT.with_name(WIDE_OUT.stem + "_imbalanced.json"), "softmax, wide, imbalanced"),
    ):
        if path.exists():
            families[name] = json.loads(path.read_text())["cells"]
    for path in sorted(SPARSE_OUT.parent.glob(SPARSE_OUT.stem + "_d*.json")):
        tag = path.stem.removeprefix(SPARSE_OUT.stem + "_")
        families[f"sparse one-hot, {tag.replace('_', ' ')}"] = json.loads(path.read_text())["cells"]
    return families


def adopted_output_lambda(n: int, d: int, k: int, eps: float) -> float:
    """The service's multi-class output-perturbation λ (its own R, here R = 5ε)."""
    return auto_regularization_task(
        "output_perturbation",
        task="multiclass",
        n_classes=k,
        n=n,
        d=d,
        epsilon=eps,
        loss="logistic",
    ).regularization


def combined_summary() -> str:
    """Per output family and R: the mean accuracy gap to the best λ in hindsight (the rule's
    λ recomputed from each cell's n, d, K, ε and read off its saved curve), and at the
    service's rule (R = 5ε)."""
    families = output_families()
    gaps: dict[str, dict[float, float]] = {}
    adopted: dict[str, float] = {}
    for name, cells in families.items():
        adopted[name] = float(
            np.mean(
                [
                    c["best"]
                    - at(c["curve"], adopted_output_lambda(c["n"], c["d"], c["K"], c["epsilon"]))
                    for c in cells
                ]
            )
        )
        gaps[name] = {
            R: float(
                np.mean(
                    [
                        c["best"]
                        - at(
                            c["curve"],
                            rule(
                                "output_perturbation",
                                "multiclass",
                                "logistic",
                                c["n"],
                                c["d"],
                                c["K"],
                                c["epsilon"],
                                R,
                            ),
                        )
                        for c in cells
                    ]
                )
            )
            for R in COMBINED_NORMS
        }
    lines = [
        "| family | cells | "
        + " | ".join(f"R = {R:g}" for R in COMBINED_NORMS)
        + " | R = 5ε (adopted) |",
        "|---|---|" + "---|" * (len(COMBINED_NORMS) + 1),
    ]
    for name, cells in families.items():
        row = " | ".join(f"{gaps[name][R]:.3f}" for R in COMBINED_NORMS)
        lines.append(f"| {name} | {len(cells)} | {row} | {adopted[name]:.3f} |")
    old = [n for n in families if n.startswith("softmax")]
    new = [n for n in families if n.startswith("sparse")]
    for label, names in (
        ("mean over the softmax families", old),
        ("mean over the sparse families", new),
        ("mean over all families", old + new),
    ):
        if names:
            row = " | ".join(
                f"{float(np.mean([gaps[n][R] for n in names])):.3f}" for R in COMBINED_NORMS
            )
            mine = float(np.mean([adopted[n] for n in names]))
            lines.append(f"| **{label}** | | {row} | {mine:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--multiclass-output", action="store_true", help="the wide multi-class output study"
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--huber", action="store_true", help="the Huber width study only")
    parser.add_argument(
        "--imbalanced", action="store_true", help="with --multiclass-output: imbalanced classes"
    )
    parser.add_argument(
        "--sparse", action="store_true", help="the sparse one-hot multi-class output study"
    )
    parser.add_argument(
        "--balanced", action="store_true", help="with --sparse: balanced classes (n = 10⁴ only)"
    )
    parser.add_argument("--dims", type=int, nargs="*", default=list(SPARSE_DIMS))
    parser.add_argument(
        "--offset",
        type=float,
        default=SPARSE_OFFSET,
        help="with --sparse: the class imbalance (log-prior −offset·k)",
    )
    parser.add_argument(
        "--signal", type=float, default=SPARSE_LEVEL, help="with --sparse: the signal level"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--combine",
        action="store_true",
        help="print the multi-class output gaps per family and R from the saved studies",
    )
    args = parser.parse_args()
    _keep = limit_threads(args.threads)
    if args.combine:
        print(combined_summary())
        return
    if args.sparse:
        if args.balanced:
            sparse_output_study(1, tuple(args.dims), 0.0, SPARSE_NS[:1], args.signal)
        else:
            sparse_output_study(1, tuple(args.dims), args.offset, level=args.signal)
        return
    if args.huber:
        huber_study(2)
        return
    if args.multiclass_output:
        wide_output_study(1, WIDE_OFFSET if args.imbalanced else 0.0)
        return
    repeats = 2 if args.quick else 3
    ns = (2000,) if args.quick else (2000, 10000)
    setups: list[tuple[Task, str, str, tuple[int, ...], tuple[float, ...]]] = [
        ("multiclass", "objective_perturbation", "logistic", (3, 5), (2.0, 4.0)),
        ("multiclass", "output_perturbation", "logistic", (3, 5), (4.0,)),
        ("regression", "objective_perturbation", "huber", (1,), (0.1, 0.3)),
        ("regression", "output_perturbation", "huber", (1,), (0.1,)),
    ]
    cells: list[dict[str, Any]] = []
    start = time.time()
    for task, mechanism, loss, ks, levels in setups:
        for d in (10, 30):
            for k in ks:
                for level in levels:
                    for n in ns:
                        for eps in (0.5, 1.0):
                            seed = int(1000 * d + 10 * k + 100 * level)
                            values = curve(
                                task, mechanism, loss, d, k, level, n, eps, repeats, seed
                            )
                            cells.append(
                                {
                                    "task": task,
                                    "mechanism": mechanism,
                                    "d": d,
                                    "K": k,
                                    "level": level,
                                    "n": n,
                                    "epsilon": eps,
                                    "curve": values,
                                    "best": max(values),
                                    "best_lambda": LAMBDAS[int(np.argmax(values))],
                                    "rule": {
                                        str(R): at(
                                            values, rule(mechanism, task, loss, n, d, k, eps, R)
                                        )
                                        for R in NORMS
                                    },
                                }
                            )
    summary = []
    for task, mechanism, *_ in setups:
        mine = [c for c in cells if c["task"] == task and c["mechanism"] == mechanism]
        gaps = {R: float(np.mean([c["best"] - c["rule"][str(R)] for c in mine])) for R in NORMS}
        fixed = float(np.mean([c["best"] - at(c["curve"], 1e-3) for c in mine]))
        best_R = min(gaps, key=lambda R: gaps[R])
        summary.append(
            {
                "task": task,
                "mechanism": mechanism,
                "cells": len(mine),
                "gap_at_R10": gaps[10.0],
                "gap_fixed_1e-3": fixed,
                "best_R": best_R,
                "gap_at_best_R": gaps[best_R],
            }
        )
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"lambdas": LAMBDAS, "summary": summary, "cells": cells}, indent=1))
    print(f"{len(cells)} cells in {time.time() - start:.0f} s\n")
    print(
        "| task | mechanism | cells | gap, rule at R = 10 | gap, fixed λ = 1e-3 | best R "
        "| gap at best R |"
    )
    print("|---|---|---|---|---|---|---|")
    for s in summary:
        unit = "accuracy" if s["task"] == "multiclass" else "RMSE"
        print(
            f"| {s['task']} | {s['mechanism']} | {s['cells']} | {s['gap_at_R10']:.4f} {unit} | "
            f"{s['gap_fixed_1e-3']:.4f} | {s['best_R']:g} | {s['gap_at_best_R']:.4f} |"
        )


if __name__ == "__main__":
    main()
