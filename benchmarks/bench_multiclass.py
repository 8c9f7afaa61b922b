"""Multi-class classification (issue 29): PrivFit next to diffprivlib, side by side in one process.

Data (:mod:`benchmarks.datasets29`): Adult re-targeted to marital status (7 classes, 30,162
train / 15,060 test rows, 101 columns) and Fashion-MNIST (10 classes, 60,000 / 10,000 images,
a public random projection to 64 columns). Every row of the design matrix is in the unit ball
and holds the intercept.

Contenders, at ε ∈ {0.1, 0.5, 1, 5}, every private one pure ε-DP (δ = 0), on the same matrix:

* PrivFit ``objective_perturbation``, ``output_perturbation`` and ``dp_sgd`` with
  ``task="multiclass"``, each as a user gets it: objective and output perturbation at the
  service's task-aware automatic λ (:func:`benchmarks._tasks29.privfit_lambda`, R per task and
  mechanism), DP-SGD at its K-class defaults (one pass, b = min(n, max(50, ⌈dK/ε⌉)), η =
  √(b/50)) with a fixed public λ = 10⁻³ (it has no rule); and **PrivFit auto**, the mechanism,
  loss and λ that ``mechanism: "auto"`` resolves to (:func:`benchmarks._tasks29.privfit_auto`,
  the service's own ranking), fitted with its own draws and full ε. For each, the service's
  expected band on a public reference (the published test split, as a site that uploaded it
  with ``allow_non_private`` would have) says whether the fit would carry the
  ``below_majority_baseline`` warning. A mechanism that does not fit multi-class labels is
  "not available".
* diffprivlib 0.6.6 ``LogisticRegression`` (objective perturbation, one-vs-rest with ε/K per
  class), ``data_norm=1``, ``fit_intercept=False``: with the λ of PrivFit's objective
  perturbation (C = 1/(nλ)) and with its default C = 1.
* scikit-learn's multinomial ``LogisticRegression`` (C = 1, non-private) and the majority class
  of the training labels (non-private yardsticks, computed once).

Test accuracy, mean ± standard error over the repetitions, and fit times (median seconds; the
ratios are medians of per-run ratios to diffprivlib with the same λ, one native thread each).

Run: ``.venv/bin/python -m benchmarks.bench_multiclass [--quick] [--reps N] [--datasets ...]
[--contenders NAME ...] [--json PATH]`` (``--contenders``: a subset, e.g. ``"PrivFit output"
"diffprivlib (same λ)"``; the non-private yardsticks always run).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks import datasets29
from benchmarks._common import OUT_DIR, environment, limit_threads, load_average, timed
from benchmarks._tasks29 import (
    EPSILONS,
    LambdaChoice,
    Tally,
    dp_source,
    privfit_auto,
    privfit_lambda,
    privfit_refusal,
    service_band,
    timed_privfit,
    write_json,
)

FloatArray = NDArray[np.float64]

PRIVFIT = {
    "PrivFit OP": "objective_perturbation",
    "PrivFit output": "output_perturbation",
    "PrivFit DP-SGD": "dp_sgd",
    "PrivFit auto": "auto",
}
DPL_SAME = "diffprivlib (same λ)"
DPL_DEFAULT = "diffprivlib (C = 1)"
SKLEARN = "scikit-learn (non-private)"
MAJORITY = "majority class"
CONTENDERS = (*PRIVFIT, DPL_SAME, DPL_DEFAULT, SKLEARN, MAJORITY)
DATASETS = ("adult-marital", "fashion-mnist")
#: --quick: training and test rows kept, repetitions.
QUICK_ROWS = (3000, 1500)
QUICK_REPS = 3


def predict(scores: FloatArray) -> NDArray[np.intp]:
    """The class with the highest score (n × K scores)."""
    return np.asarray(np.argmax(np.asarray(scores), axis=1), dtype=np.intp)


def accuracy(pred: NDArray[Any], y: FloatArray) -> float:
    return float(np.mean(pred == y.astype(np.intp)))


def fit_diffprivlib(
    X: FloatArray, y: FloatArray, *, epsilon: float, C: float, seed: int
) -> tuple[Any, float]:
    """diffprivlib's ε-DP logistic regression on the same unit-ball rows; the classes it saw
    and its (K_seen × d) weights, and its fit seconds."""
    from diffprivlib.models import LogisticRegression
    from sklearn.exceptions import ConvergenceWarning

    model = LogisticRegression(
        epsilon=epsilon, data_norm=1.0, C=C, fit_intercept=False, random_state=seed
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        _, seconds, _ = timed(lambda: model.fit(X, y))
    return model, seconds


def diffprivlib_predict(model: Any, X: FloatArray) -> NDArray[np.intp]:
    coef = np.asarray(model.coef_, dtype=np.float64)
    classes = np.asarray(model.classes_).astype(np.intp)
    return np.asarray(classes[np.argmax(X @ coef.T, axis=1)], dtype=np.intp)


def privfit_run(
    data: datasets29.ClassificationData,
    mechanism: str,
    *,
    epsilon: float,
    lam: float,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """One PrivFit fit: test accuracy and fit seconds."""
    scores, seconds = timed_privfit(
        data,
        mechanism,
        epsilon=epsilon,
        delta=0.0,
        loss="logistic",
        regularization=lam,
        task="multiclass",
        n_classes=data.n_classes,
        rng=rng,
    )
    return accuracy(predict(scores), data.y_test), seconds


def diffprivlib_run(
    data: datasets29.ClassificationData, *, epsilon: float, C: float, seed: int
) -> tuple[float, float]:
    """One diffprivlib fit: test accuracy and fit seconds."""
    model, seconds = fit_diffprivlib(data.X, data.y, epsilon=epsilon, C=C, seed=seed)
    return accuracy(diffprivlib_predict(model, data.X_test), data.y_test), seconds


def run_dataset(
    data: datasets29.ClassificationData,
    epsilons: Sequence[float],
    reps: int,
    *,
    seed: int = 29,
    contenders: Sequence[str] = CONTENDERS,
) -> tuple[Tally, dict[str, Any]]:
    """Every contender of ``contenders`` (the yardsticks always) at every ε."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    X, y, Xte, yte = data.X, data.y, data.X_test, data.y_test
    n, d = X.shape
    K = data.n_classes
    chosen = [c for c in CONTENDERS if c in contenders or c in (SKLEARN, MAJORITY)]
    ours = {name: mech for name, mech in PRIVFIT.items() if name in chosen}
    tally = Tally(tuple(chosen), "accuracy", higher_is_better=True)
    rng = np.random.default_rng(seed)
    # the public reference of the service's expected band: the published test split, as a
    # site that uploaded it with allow_non_private would have it
    reference = (Xte, yte)

    counts = np.bincount(y.astype(np.intp), minlength=K)
    majority = int(np.argmax(counts))
    sk = LogisticRegression(C=1.0, fit_intercept=False, max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _, sk_seconds, _ = timed(lambda: sk.fit(X, y))
    sk_acc = accuracy(np.asarray(sk.predict(Xte)).astype(np.intp), yte)

    for eps in epsilons:
        t0 = time.perf_counter()
        lam: dict[str, LambdaChoice] = {}
        mech_of: dict[str, str] = {}
        for name, mech in PRIVFIT.items():
            if mech == "auto":
                auto = privfit_auto(
                    task="multiclass", n_classes=K, n=n, d=d, epsilon=eps, delta=0.0
                )
                mech_of[name] = auto.mechanism
                lam[name] = LambdaChoice(auto.regularization, f"auto → {auto.mechanism}")
                continue
            mech_of[name] = mech
            lam[name] = privfit_lambda(
                mech,
                n=n,
                d=d,
                epsilon=eps,
                delta=0.0,
                loss="logistic",
                task="multiclass",
                n_classes=K,
            )
        tally.lambdas[eps] = {
            name: f"{c.value:.3g} ({c.source})" for name, c in lam.items() if name in ours
        }
        for name in ours:
            reason = privfit_refusal(
                mech_of[name],
                n=n,
                d=d,
                epsilon=eps,
                delta=0.0,
                loss="logistic",
                regularization=lam[name].value,
                task="multiclass",
                n_classes=K,
            )
            if reason is not None:
                tally.unavailable[name] = reason
                continue
            band = service_band(
                mech_of[name],
                reference_X=reference[0],
                reference_y=reference[1],
                task="multiclass",
                n_classes=K,
                n=n,
                epsilon=eps,
                delta=0.0,
                loss="logistic",
                regularization=lam[name].value,
            )
            tally.add_band(eps, name, band)
        C_same = 1.0 / (n * lam["PrivFit OP"].value)
        for _ in range(reps):
            run_seed = int(rng.integers(2**31))
            for name in ours:
                if name not in tally.unavailable:
                    run = partial(
                        privfit_run, data, mech_of[name], epsilon=eps, lam=lam[name].value, rng=rng
                    )
                    tally.run(eps, name, run)
            for name, C, offset in ((DPL_SAME, C_same, 0), (DPL_DEFAULT, 1.0, 1)):
                if name not in chosen:
                    continue
                run = partial(diffprivlib_run, data, epsilon=eps, C=C, seed=run_seed + offset)
                tally.run(eps, name, run)
        tally.add(eps, SKLEARN, sk_acc, sk_seconds)
        tally.add(eps, MAJORITY, float(np.mean(yte == majority)), None)
        print(
            f"{data.name} ε={eps:g}: "
            + ", ".join(f"{c} {tally.cell(eps, c, 3)}" for c in chosen)
            + f" ({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
    info = {"n": n, "d": d, "classes": K, "n_test": int(Xte.shape[0]), "prep": data.preprocessing}
    return tally, info


def load(name: str, quick: bool) -> datasets29.ClassificationData:
    if name == "adult-marital":
        data = datasets29.adult_marital()
        return datasets29.subsample(data, *QUICK_ROWS) if quick else data
    if name == "fashion-mnist":
        return datasets29.fashion_mnist(max_rows=QUICK_ROWS if quick else None)
    raise ValueError(f"unknown data set {name!r}")


def report(name: str, tally: Tally, info: dict[str, Any], reps: int) -> list[str]:
    run = tally.contenders
    timed_names = [
        c for c in (*PRIVFIT, DPL_SAME, DPL_DEFAULT) if c in run and c not in tally.unavailable
    ]
    lines = [
        f"### {name}: n = {info['n']:,}, d = {info['d']}, K = {info['classes']}, "
        f"{info['n_test']:,} test rows, {reps} repetitions",
        "",
        f"Preprocessing: {info['prep']}.",
        "",
        "Test accuracy (mean ± standard error):",
        "",
        tally.metric_table(),
        "",
        "Fit time (median seconds) and ratio to diffprivlib with the same λ:",
        "",
        tally.time_table(timed_names, DPL_SAME if DPL_SAME in run else timed_names[0]),
        "",
        "PrivFit's λ:",
        "",
        tally.lambda_table(),
        "",
        "The service's expected accuracy (band mean, 4 simulated fits on the public reference) "
        "and its warning (**warns**: the fit would carry `below_majority_baseline`):",
        "",
        tally.band_table(),
        "",
        *tally.verdict(
            [c for c in PRIVFIT if c in run],
            [c for c in (DPL_SAME, DPL_DEFAULT) if c in run],
            MAJORITY,
        ),
        *tally.failure_lines(),
        "",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_REPS} repetitions, {QUICK_ROWS[0]} training and "
        f"{QUICK_ROWS[1]} test rows",
    )
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--datasets", nargs="*", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--epsilons", type=float, nargs="*", default=list(EPSILONS))
    parser.add_argument(
        "--contenders",
        nargs="*",
        default=list(CONTENDERS),
        choices=CONTENDERS,
        help="run only these (the non-private yardsticks always run)",
    )
    parser.add_argument("--threads", type=int, default=1, help="native threads (0: default)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        import diffprivlib  # noqa: F401
    except ImportError:
        print("diffprivlib is not installed: install the bench extra (pip install -e '.[bench]')")
        return 2
    limits = limit_threads(args.threads or None)  # kept alive until the end
    reps = QUICK_REPS if args.quick else args.reps
    started, load_before = time.perf_counter(), load_average()
    lines = ["## Multi-class classification (issue 29)", ""]
    raw: dict[str, Any] = {"reps": reps, "quick": args.quick, "datasets": {}}
    for name in args.datasets:
        try:
            data = load(name, args.quick)
        except datasets29.DataUnavailable as exc:
            print(f"skipping {name}: {exc}", flush=True)
            lines += [f"### {name}: skipped ({exc})", ""]
            raw["datasets"][name] = {"skipped": str(exc)}
            continue
        tally, info = run_dataset(data, args.epsilons, reps, contenders=args.contenders)
        lines += report(name, tally, info, reps)
        raw["datasets"][name] = {**info, **tally.raw()}
    lines.append(
        f"{environment(args.threads or None)}; {dp_source()}. Total run time "
        f"{time.perf_counter() - started:.0f} s; load average before {load_before}, after "
        f"{load_average()}."
    )
    text = "\n".join(lines)
    print()
    print(text)
    raw["environment"] = environment(args.threads or None)
    raw["dp_source"] = dp_source()
    json_path = args.json or OUT_DIR / f"bench_multiclass{'_quick' if args.quick else ''}.json"
    write_json(json_path, raw)
    del limits
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
