"""Helpers shared by the benchmark scripts: peers, timing, synthetic data, tables, environment."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BENCH_DIR",
    "FIGURES_DIR",
    "OUT_DIR",
    "Peer",
    "accuracy",
    "dp_core_fingerprint",
    "environment",
    "fit_diffprivlib",
    "fit_sklearn",
    "limit_threads",
    "load_average",
    "markdown_table",
    "mean_sd",
    "median",
    "synthetic_classification",
    "timed",
]

FloatArray = NDArray[np.float64]

BENCH_DIR = Path(__file__).resolve().parent
OUT_DIR = BENCH_DIR / "out"
FIGURES_DIR = BENCH_DIR / "figures"


@dataclass(frozen=True, slots=True)
class Peer:
    """A fitted peer model: its weights and how long ``fit`` took (wall-clock and process CPU
    seconds)."""

    coef: FloatArray
    seconds: float
    cpu_seconds: float

    def decision_function(self, X: FloatArray) -> FloatArray:
        return X @ self.coef


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Run ``fn`` once; return its result, the wall-clock seconds and the CPU seconds of this
    process it took (with single-threaded native code, CPU time is what other processes on
    the machine disturb least)."""
    c0 = time.process_time()
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def accuracy(scores: FloatArray, y: FloatArray) -> float:
    """Share of rows with sign(score) == y (a score of exactly 0 predicts −1)."""
    pred = np.where(scores > 0.0, 1.0, -1.0)
    return float(np.mean(pred == y))


def fit_sklearn(
    X: FloatArray, y: FloatArray, *, lam: float, tol: float = 1e-4, max_iter: int = 1000
) -> Peer:
    """Non-private L2 logistic regression with sklearn (lbfgs); C = 1/(nλ) matches J(w) of
    PrivFit. ``tol`` is sklearn's default unless asked otherwise."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(
        C=1.0 / (X.shape[0] * lam), fit_intercept=False, tol=tol, max_iter=max_iter
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _, seconds, cpu = timed(lambda: model.fit(X, y))
    return Peer(np.asarray(model.coef_, dtype=np.float64).ravel(), seconds, cpu)


def fit_diffprivlib(
    X: FloatArray,
    y: FloatArray,
    *,
    epsilon: float,
    lam: float,
    seed: int | None,
    tol: float = 1e-4,
    max_iter: int = 100,
) -> Peer:
    """diffprivlib's objective-perturbed logistic regression (lbfgs; tol and max_iter default
    to diffprivlib's own defaults), on the same X (rows of norm ≤ 1, intercept a column)."""
    from diffprivlib.models import LogisticRegression
    from sklearn.exceptions import ConvergenceWarning

    model = LogisticRegression(
        epsilon=epsilon,
        data_norm=1.0,
        C=1.0 / (X.shape[0] * lam),
        fit_intercept=False,
        tol=tol,
        max_iter=max_iter,
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        _, seconds, cpu = timed(lambda: model.fit(X, y))
    return Peer(np.asarray(model.coef_, dtype=np.float64).ravel(), seconds, cpu)


def synthetic_classification(
    n: int, d: int, *, seed: int = 0, intercept: bool = True
) -> tuple[FloatArray, FloatArray]:
    """n rows in the unit ball, d columns (the last a constant intercept column when asked),
    labels from a logistic model with a fixed true direction: a stand-in for a large table."""
    rng = np.random.default_rng(seed)
    d_free = d - 1 if intercept else d
    X = rng.standard_normal((n, d), dtype=np.float64)
    X[:, :d_free] /= np.sqrt(d_free)
    if intercept:
        X[:, d_free] = 1.0
    norms = np.linalg.norm(X, axis=1)
    X /= np.maximum(norms, 1.0)[:, None] * 1.0000001
    w = rng.standard_normal(d)
    w *= 4.0 / np.linalg.norm(w)
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    return X, y


def limit_threads(threads: int | None) -> object | None:
    """Pin every native thread pool (numpy's and scipy's OpenBLAS, scikit-learn's OpenMP) to
    ``threads`` for the rest of the process; None leaves them alone. Returns the threadpoolctl
    controller (keep a reference to it).

    Why the benchmarks default to 1: on this 2-core machine, while another process keeps one
    core busy, a 2-thread OpenBLAS call waits for its second thread to be scheduled. A 6 ms
    float32 ``XᵀX`` on Adult took 750 ms that way. scikit-learn's loss and gradient run in
    OpenMP threads and suffer in the same way. Single-threaded native code gives repeatable
    timings, and the same conditions for every contender.
    """
    if threads is None:
        return None
    # threadpoolctl only limits libraries that are already loaded: load them all first.
    import importlib

    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped, unused-ignore]

    for module in ("scipy.linalg", "scipy.optimize", "sklearn.linear_model", "diffprivlib"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    controller: object = threadpool_limits(limits=threads)
    return controller


def load_average() -> str:
    """The 1/5/15-minute load averages (other work on the machine skews timings)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:  # pragma: no cover - not available on every platform
        return "n/a"
    return f"{one:.2f}/{five:.2f}/{fifteen:.2f}"


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    arr = np.asarray(values, dtype=np.float64)
    sd = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return float(arr.mean()), sd


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table (numbers are expected to be pre-formatted strings)."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines.extend("| " + " | ".join(str(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)


def dp_core_fingerprint() -> str:
    """A short hash of the DP core's source (service/dp/**/*.py), naming what was measured
    while service/dp is still changing between commits."""
    import hashlib

    root = BENCH_DIR.parent / "service" / "dp"
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def environment(threads: int | None = None) -> str:
    """One line naming the machine and the library versions the numbers were measured with."""
    import scipy
    import sklearn

    try:
        import diffprivlib

        dpl = diffprivlib.__version__
    except ImportError:  # pragma: no cover - bench extra not installed
        dpl = "n/a"
    cpu = platform.processor() or platform.machine()
    return (
        f"Python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
        f"scikit-learn {sklearn.__version__}, diffprivlib {dpl}; {os.cpu_count()} CPU cores "
        f"({cpu}, {platform.system()}); native threads (BLAS/OpenMP): "
        f"{'library default' if threads is None else threads}; service/dp source hash "
        f"{dp_core_fingerprint()}"
    )


def save_report(
    stem: str,
    lines: Sequence[str],
    raw: dict[str, Any],
    figures: Sequence[str],
    *,
    started: float,
    load_before: str,
    quick: bool,
    copy_figures: bool,
) -> None:
    """Finish a reproduction script: append the run time and load, print the markdown, write
    ``out/<stem>[_quick].md`` and ``.json``, and copy the PNGs (already in ``OUT_DIR``) to
    ``benchmarks/figures/`` for a full run."""
    text = "\n".join(
        [
            *lines,
            f"Total run time {time.perf_counter() - started:.0f} s; load average before "
            f"{load_before}, after {load_average()}.",
        ]
    )
    print(text)
    suffix = "_quick" if quick else ""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / f"{stem}{suffix}.md").write_text(text + "\n", encoding="utf-8")
    (OUT_DIR / f"{stem}{suffix}.json").write_text(
        json.dumps(raw, indent=1, default=str) + "\n", encoding="utf-8"
    )
    if copy_figures and not quick:
        FIGURES_DIR.mkdir(parents=True, exist_ok=True)
        for name in figures:
            shutil.copy2(OUT_DIR / name, FIGURES_DIR / name)
