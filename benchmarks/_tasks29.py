"""What issue 29's two side-by-side benchmarks share: PrivFit's λ per mechanism, a guard for
mechanisms that do not fit a task yet, the tally of every contender's per-run figures, and the
markdown tables (mean ± standard error, fit times and ratios).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from benchmarks._common import timed
from service.domain.ranges import MAX_REGULARIZATION, MIN_REGULARIZATION
from service.dp import PrivacyParameterError, fit
from service.dp.analysis.planning import plan_point
from service.dp.core.tasks import Task

__all__ = [
    "EPSILONS",
    "FIXED_LAMBDA",
    "FIXED_LAMBDAS",
    "SERVICE_LAMBDA_BOUNDS",
    "AutoChoice",
    "Band",
    "LambdaChoice",
    "Split",
    "Tally",
    "dp_source",
    "mean_se",
    "privfit_auto",
    "privfit_lambda",
    "privfit_refusal",
    "service_band",
    "timed_privfit",
    "write_json",
]

FloatArray = NDArray[np.float64]

EPSILONS: tuple[float, ...] = (0.1, 0.5, 1.0, 5.0)
#: λ of a mechanism that has no automatic rule for the task (public, fixed before any run).
FIXED_LAMBDA = 1e-3
#: ... except these: AdaSSP chooses its own ridge from a noisy λ_min(XᵀX) and adds nλ on top,
#: so a negligible λ keeps it Wang's algorithm (which has no other ridge).
FIXED_LAMBDAS: dict[str, float] = {"adassp": 1e-6}


#: The λ bounds the service clamps to, so the benchmark's λ is the service's.
SERVICE_LAMBDA_BOUNDS: tuple[float, float] = (MIN_REGULARIZATION, MAX_REGULARIZATION)


@dataclass(frozen=True)
class LambdaChoice:
    """PrivFit's λ for one (mechanism, ε), where it came from (shown in the output) and the
    rule's record as a fit's record would carry it (None for a fixed λ)."""

    value: float
    source: str
    record: Mapping[str, Any] | None = None


def privfit_lambda(
    mechanism: str,
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    task: Task,
    n_classes: int,
    params: Mapping[str, Any] | None = None,
) -> LambdaChoice:
    """λ ``"auto"`` as the service resolves it for a multi-class or regression fit
    (:func:`service.dp.analysis.regularization_tasks.auto_regularization_task`, the task-aware
    rule with R per task and mechanism, clamped to the service's bounds), from public n, d, K,
    ε, δ, the loss and its Huber width; for a mechanism without a rule (DP-SGD) the public
    :data:`FIXED_LAMBDAS` or :data:`FIXED_LAMBDA`, as a user must give one."""
    from service.dp.analysis.regularization_tasks import (
        TASK_RULE_MECHANISMS,
        auto_regularization_task,
        task_record,
    )

    if mechanism not in TASK_RULE_MECHANISMS.get(task, frozenset()):
        fixed = FIXED_LAMBDAS.get(mechanism, FIXED_LAMBDA)
        return LambdaChoice(fixed, f"fixed {fixed:g} (no automatic rule)")
    choice = auto_regularization_task(
        mechanism,
        task=task,
        n_classes=n_classes,
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        params=params,
        bounds=SERVICE_LAMBDA_BOUNDS,
    )
    R = choice.constants["R"]
    source = (
        "auto: the smallest accepted λ, AdaSSP's own ridge regularises"
        if mechanism == "adassp"
        else f"auto, task rule R = {R:g}"
    )
    return LambdaChoice(choice.regularization, source, task_record(choice))


@dataclass(frozen=True)
class AutoChoice:
    """``mechanism: "auto"`` as the service resolves it for the task: the mechanism, loss, λ
    and params of the first ranked candidate the dry run admits, and the rule's reason."""

    mechanism: str
    loss: str
    regularization: float
    params: Mapping[str, Any]
    reason: str


def privfit_auto(
    *,
    task: Task,
    n_classes: int,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    params: Mapping[str, Any] | None = None,
) -> AutoChoice:
    """:func:`service.dp.analysis.auto_tasks.rank_for_task` (the function the service's
    ``resolve_task_auto`` calls, no loss requested) and the first candidate PrivFit's dry run
    accepts, as the service keeps the first whose calibration it admits."""
    from service.dp.analysis.auto_tasks import rank_for_task

    given = dict(params or {})
    choice = rank_for_task(
        task,
        n_classes=n_classes,
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss=None,
        params=given,
        bounds=SERVICE_LAMBDA_BOUNDS,
    )
    for cand in choice.ranked:
        assert cand.loss is not None
        assert cand.regularization is not None
        own = given if cand.loss == "huber" else {}
        refusal = privfit_refusal(
            cand.mechanism,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=delta,
            loss=cand.loss,
            regularization=cand.regularization,
            task=task,
            n_classes=n_classes,
            params=own,
        )
        if refusal is None:
            return AutoChoice(cand.mechanism, cand.loss, cand.regularization, own, choice.reason)
    raise ValueError("auto: no candidate admitted")


@dataclass(frozen=True)
class Band:
    """The service's expected band of one configuration on the public reference: its mean,
    the trivial model's score on the reference, and whether the fit would carry the warning."""

    mean: float
    baseline: float
    warns: bool


def service_band(
    mechanism: str,
    *,
    reference_X: FloatArray,
    reference_y: FloatArray,
    task: Task,
    n_classes: int,
    n: int,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float,
    params: Mapping[str, Any] | None = None,
    half_range: float = 1.0,
) -> Band | None:
    """:func:`service.dp.analysis.expected_tasks.expected_task_band` (what
    ``service.domain.fits.expected_tasks.with_task_band`` calls for a site with a public
    reference) on the benchmark's public reference rows; None when the service would give no
    band (it raises: the fit runs without one)."""
    from service.dp.analysis.expected_tasks import expected_task_band
    from service.dp.optimize.solvers import ConvergenceError

    try:
        band = expected_task_band(
            mechanism,
            regularization=regularization,
            params=dict(params or {}),
            X=reference_X,
            y=reference_y,
            task=task,
            n_classes=n_classes,
            n=n,
            epsilon=epsilon,
            delta=delta,
            loss=loss,
            half_range=half_range,
        )
    except (ValueError, ConvergenceError):
        return None
    # A band on a public reference always has the reference's trivial-model score.
    assert band.baseline is not None
    return Band(band.mean, band.baseline, band.worse_than_baseline)


def privfit_refusal(
    mechanism: str,
    *,
    n: int,
    d: int,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float,
    task: Task,
    n_classes: int,
    params: Mapping[str, Any] | None = None,
) -> str | None:
    """None if PrivFit's dry run accepts the mechanism for this task (public inputs only),
    else the refusal's message: a mechanism that does not fit the task yet is reported as
    "not available" instead of failing the benchmark."""
    try:
        plan_point(
            mechanism,
            n=n,
            d=d,
            epsilon=epsilon,
            delta=delta,
            loss=loss,
            regularization=regularization,
            task=task,
            n_classes=n_classes,
            params=params or {},
        )
    except (PrivacyParameterError, ValueError, NotImplementedError, KeyError) as exc:
        return str(exc) or type(exc).__name__
    return None


class Split(Protocol):
    """A benchmark data set's training arrays and its test features."""

    @property
    def X(self) -> FloatArray: ...

    @property
    def y(self) -> FloatArray: ...

    @property
    def X_test(self) -> FloatArray: ...


def timed_privfit(
    data: Split,
    mechanism: str,
    *,
    epsilon: float,
    delta: float,
    loss: str,
    regularization: float,
    task: Task,
    n_classes: int,
    rng: np.random.Generator,
    params: Mapping[str, Any] | None = None,
) -> tuple[FloatArray, float]:
    """``service.dp.fit`` on the raw training arrays (its checks included, as a user's call)
    and its wall-clock seconds; returns the released model's scores on the test features."""
    result, seconds, _ = timed(
        lambda: fit(
            data.X,
            data.y,
            mechanism,
            epsilon=epsilon,
            delta=delta,
            loss=loss,
            regularization=regularization,
            task=task,
            n_classes=n_classes,
            rng=rng,
            **dict(params or {}),
        )
    )
    return np.asarray(result.model.decision_function(data.X_test), dtype=np.float64), seconds


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sd/√runs; 0 for a single run)."""
    arr = np.asarray(values, dtype=np.float64)
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else 0.0
    return float(arr.mean()), se


@dataclass
class Tally:
    """Per-ε, per-contender lists of the metric and of the fit seconds; contenders that are
    not available (with the reason) or failed in a run (with the error)."""

    contenders: tuple[str, ...]
    metric: str
    higher_is_better: bool
    values: dict[float, dict[str, list[float]]] = field(default_factory=dict)
    seconds: dict[float, dict[str, list[float]]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    lambdas: dict[float, dict[str, str]] = field(default_factory=dict)
    #: per ε and PrivFit contender: the service's band on the public reference (None: none)
    bands: dict[float, dict[str, dict[str, Any] | None]] = field(default_factory=dict)

    def add_band(self, eps: float, name: str, band: Band | None) -> None:
        self.bands.setdefault(eps, {})[name] = (
            None
            if band is None
            else {"mean": band.mean, "baseline": band.baseline, "warns": band.warns}
        )

    def band_table(self, digits: int = 3) -> str:
        """Per ε and PrivFit contender: the band's mean on the public reference, and whether
        the fit would carry the service's trivial-model warning."""
        names = list(next(iter(self.bands.values()), {}))
        lines = ["| ε | " + " | ".join(names) + " | trivial model on the reference |"]
        lines.append("|" + "---|" * (len(names) + 2))
        for eps in sorted(self.bands):
            cells, base = [], "—"
            for c in names:
                b = self.bands[eps].get(c)
                if b is None:
                    cells.append("no band")
                    continue
                base = f"{b['baseline']:.{digits}f}"
                cells.append(f"{b['mean']:.{digits}f}" + (" **warns**" if b["warns"] else ""))
            lines.append(f"| {eps:g} | " + " | ".join(cells) + f" | {base} |")
        return "\n".join(lines)

    def add(self, eps: float, name: str, value: float, seconds: float | None) -> None:
        self.values.setdefault(eps, {}).setdefault(name, []).append(float(value))
        if seconds is not None:
            self.seconds.setdefault(eps, {}).setdefault(name, []).append(float(seconds))

    def run(self, eps: float, name: str, fit_and_score: Callable[[], tuple[float, float]]) -> None:
        """Record one run of a contender; an error is counted (and shown), not fatal."""
        try:
            value, seconds = fit_and_score()
        except Exception as exc:  # reported in the output, per contender
            self.failures.setdefault(name, []).append(f"ε={eps:g}: {type(exc).__name__}: {exc}")
            return
        self.add(eps, name, value, seconds)

    def cell(self, eps: float, name: str, digits: int) -> str:
        if name in self.unavailable:
            return "not available"
        vals = self.values.get(eps, {}).get(name, [])
        if not vals:
            return "failed"
        m, se = mean_se(vals)
        fmt = ".2e" if abs(m) >= 1e5 else f".{digits}f"  # diffprivlib's unclipped RMSE
        return f"{m:{fmt}}" if se == 0.0 else f"{m:{fmt}} ± {se:{fmt}}"

    def metric_table(self, digits: int = 3) -> str:
        head = "| ε | " + " | ".join(self.contenders) + " |"
        lines = [head, "|" + "---|" * (len(self.contenders) + 1)]
        for eps in sorted(self.values):
            cells = [self.cell(eps, c, digits) for c in self.contenders]
            lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def median_seconds(self, eps: float, name: str) -> float | None:
        vals = self.seconds.get(eps, {}).get(name, [])
        return float(np.median(vals)) if vals else None

    def time_table(self, timed_names: Sequence[str], reference: str) -> str:
        """Median fit seconds per contender and, for the others, the median over runs of the
        per-run ratio to ``reference``'s time in the same run."""
        others = [c for c in timed_names if c != reference]
        titles = [f"{c} s" for c in timed_names] + [f"{c} / {reference}" for c in others]
        head = "| ε | " + " | ".join(titles) + " |"
        lines = [head, "|" + "---|" * (len(timed_names) + len(others) + 1)]
        for eps in sorted(self.seconds):
            cells = []
            for c in timed_names:
                s = self.median_seconds(eps, c)
                cells.append("—" if s is None else f"{s:.3f}")
            ref = self.seconds[eps].get(reference, [])
            for c in others:
                own = self.seconds[eps].get(c, [])
                if not own or not ref or len(own) != len(ref):
                    cells.append("—")
                else:
                    ratios = np.asarray(own) / np.maximum(np.asarray(ref), 1e-9)
                    cells.append(f"{float(np.median(ratios)):.2f}×")
            lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def lambda_table(self) -> str:
        """PrivFit's λ per ε and contender, and where each came from (one line per contender)."""
        names = list(next(iter(self.lambdas.values()), {}))
        lines = ["| ε | " + " | ".join(f"{c} λ" for c in names) + " |"]
        lines.append("|" + "---|" * (len(names) + 1))
        sources: dict[str, set[str]] = {c: set() for c in names}
        for eps in sorted(self.lambdas):
            cells = []
            for c in names:
                value, _, source = self.lambdas[eps][c].partition(" (")
                cells.append(value)
                sources[c].add(source[:-1] if source.endswith(")") else source)
            lines.append(f"| {eps:g} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += [f"- {c}: {'; '.join(sorted(src))}" for c, src in sources.items()]
        return "\n".join(lines)

    def verdict(self, ours: Sequence[str], peers: Sequence[str], trivial: str) -> list[str]:
        """One line per PrivFit contender: at which ε its mean beats the best peer's mean, and
        where it is worse than the trivial model (the goal of issue 29)."""
        sign = 1.0 if self.higher_is_better else -1.0
        lines = []
        for name in ours:
            if name in self.unavailable:
                lines.append(f"- {name}: not available ({self.unavailable[name]})")
                continue
            wins: list[str] = []
            losses: list[str] = []
            below: list[str] = []
            unwarned: list[str] = []
            false_alarms: list[str] = []
            for eps in sorted(self.values):
                vals = self.values[eps].get(name)
                if not vals:
                    continue
                m = float(np.mean(vals))
                peer = [
                    float(np.mean(self.values[eps][p]))
                    for p in peers
                    if self.values[eps].get(p) and p not in self.unavailable
                ]
                if peer:
                    best = max(peer) if self.higher_is_better else min(peer)
                    (wins if sign * (m - best) > 0 else losses).append(f"{eps:g}")
                triv = self.values[eps].get(trivial)
                band = self.bands.get(eps, {}).get(name)
                warns = bool(band and band["warns"])
                if triv and sign * (m - float(np.mean(triv))) < 0:
                    below.append(f"{eps:g}")
                    if not warns:
                        unwarned.append(f"{eps:g}")
                elif warns:
                    false_alarms.append(f"{eps:g}")
            line = (
                f"- {name}: better than the best diffprivlib column at ε ∈ {{{', '.join(wins)}}}"
                f"; not at ε ∈ {{{', '.join(losses)}}}; worse than {trivial} at ε ∈ "
                f"{{{', '.join(below)}}}"
            )
            if self.bands:
                line += (
                    f", of which without the service's warning at ε ∈ {{{', '.join(unwarned)}}}"
                    f"; warned although not worse at ε ∈ {{{', '.join(false_alarms)}}}"
                )
            lines.append(line)
        return lines

    def failure_lines(self) -> list[str]:
        """One line per contender that failed in some run (the first error shown)."""
        lines = []
        for name, errors in self.failures.items():
            lines.append(f"- {name} failed in {len(errors)} run(s), e.g. {errors[0]}")
        return lines

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any], *, higher_is_better: bool) -> Tally:
        """The tally :meth:`raw` wrote (to print a saved run's tables again)."""
        return cls(
            contenders=tuple(raw["contenders"]),
            metric=raw["metric"],
            higher_is_better=higher_is_better,
            values={float(e): v for e, v in raw["values"].items()},
            seconds={float(e): v for e, v in raw["seconds"].items()},
            unavailable=dict(raw["unavailable"]),
            failures=dict(raw["failures"]),
            lambdas={float(e): v for e, v in raw["lambdas"].items()},
            bands={float(e): v for e, v in raw.get("bands", {}).items()},
        )

    def raw(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "contenders": list(self.contenders),
            "values": {f"{e:g}": v for e, v in self.values.items()},
            "seconds": {f"{e:g}": v for e, v in self.seconds.items()},
            "unavailable": self.unavailable,
            "failures": self.failures,
            "lambdas": {f"{e:g}": v for e, v in self.lambdas.items()},
            "bands": {f"{e:g}": v for e, v in self.bands.items()},
        }


def dp_source() -> str:
    """Where the imported ``service.dp`` lives and a short hash of its source (the numbers
    name the DP core they measured, also when it is imported from another checkout)."""
    import hashlib

    import service.dp

    root = Path(service.dp.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return f"service/dp imported from {root} (source hash {digest.hexdigest()[:12]})"


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
