"""The planner's curve as a picture: a hand-written SVG, or a PNG drawn by matplotlib
(:mod:`service.api.plan_png`) from the same :func:`plan_curves`.

x: ε on a log scale; y: the simulated mean accuracy with its 10–90 % band when the plan has a
reference dataset, else the expected noise norm (log scale). One line per λ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

__all__ = ["COLOURS", "HEIGHT", "WIDTH", "PlanCurves", "curve_label", "plan_curves", "plan_svg"]

WIDTH, HEIGHT = 640, 400
_W, _H, _L, _R, _T, _B = WIDTH, HEIGHT, 70, 20, 40, 50
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


@dataclass(frozen=True, slots=True)
class Curve:
    """One λ's line: its points in ε order, with the 10–90 % band when simulated."""

    regularization: float | str
    colour: str
    epsilons: tuple[float, ...]
    values: tuple[float, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class PlanCurves:
    """What both pictures draw: the title, the axes' ranges and labels, one curve per λ."""

    title: str
    simulated: bool
    y_label: str
    y_log: bool
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    x_ticks: tuple[float, ...]
    curves: tuple[Curve, ...]


def curve_label(curve: Curve) -> str:
    """ "λ = 0.001", or "λ = auto" for the rule's λ (one per ε)."""
    lam = curve.regularization
    return f"λ = {lam}" if isinstance(lam, str) else f"λ = {lam:g}"


def plan_curves(plan: Mapping[str, Any]) -> PlanCurves:
    """The curves of ``plan`` (the JSON of :meth:`service.domain.fits.plans.Plan.to_dict`)."""
    points: Sequence[Mapping[str, Any]] = plan["points"]
    simulated = bool(points) and "simulated_accuracy" in points[0]
    eps = [float(p["epsilon"]) for p in points] or [1.0]
    if simulated:
        values = [float(p["simulated_accuracy"]["mean"]) for p in points]
        lows = [float(p["simulated_accuracy"]["p10"]) for p in points]
        highs = [float(p["simulated_accuracy"]["p90"]) for p in points]
        y_lo, y_hi, y_log, label = min([*lows, 0.5]), 1.0, False, "test accuracy (mean, 10–90 %)"
    else:
        values = [float(p["expected_noise_norm"] or math.nan) for p in points]
        finite = [v for v in values if math.isfinite(v) and v > 0] or [1.0]
        lows = highs = values
        y_lo, y_hi, y_log, label = min(finite), max(finite) * 1.01, True, "expected noise norm"
    x_lo, x_hi = min(eps), max(eps)
    if x_hi <= x_lo:
        x_lo, x_hi = x_lo / 2, x_hi * 2
    curves = []

    def key(p: Mapping[str, Any]) -> float | str:
        # λ chosen by the public rule changes with ε: one "auto" curve
        return "auto" if p.get("regularization_rule") else float(p["regularization"])

    keys = [key(p) for p in points]
    lambdas = sorted({k for k in keys if not isinstance(k, str)})
    lambdas_and_auto: list[float | str] = [*lambdas, *(["auto"] if "auto" in keys else [])]
    for i, lam in enumerate(lambdas_and_auto):
        idx = [j for j, k in enumerate(keys) if k == lam]
        idx = [j for j in idx if math.isfinite(values[j]) and (not y_log or values[j] > 0)]
        curves.append(
            Curve(
                regularization=lam,
                colour=COLOURS[i % len(COLOURS)],
                epsilons=tuple(eps[j] for j in idx),
                values=tuple(values[j] for j in idx),
                lows=tuple(lows[j] for j in idx),
                highs=tuple(highs[j] for j in idx),
            )
        )
    return PlanCurves(
        title=f"{plan['mechanism']}, n = {plan['n']}, d = {plan['d']}",
        simulated=simulated,
        y_label=label,
        y_log=y_log,
        x_range=(x_lo, x_hi),
        y_range=(y_lo, y_hi if y_hi > y_lo else y_lo * 2),
        x_ticks=tuple(sorted(set(eps))),
        curves=tuple(curves),
    )


def _scale(lo: float, hi: float, a: float, b: float, log: bool) -> Any:
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    span = hi - lo or 1.0

    def f(v: float) -> float:
        v = math.log10(v) if log else v
        return a + (v - lo) / span * (b - a)

    return f


def plan_svg(plan: Mapping[str, Any]) -> str:
    """An SVG document of ``plan`` (the JSON of :meth:`service.domain.fits.plans.Plan.to_dict`)."""
    c = plan_curves(plan)
    fx = _scale(*c.x_range, _L, _W - _R, log=True)
    fy = _scale(*c.y_range, _H - _B, _T, log=c.y_log)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
        f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="12">',
        f"<title>{escape(str(plan['mechanism']))}: privacy–utility plan</title>",
        f'<rect width="{_W}" height="{_H}" fill="white"/>',
        f'<line x1="{_L}" y1="{_H - _B}" x2="{_W - _R}" y2="{_H - _B}" stroke="black"/>',
        f'<line x1="{_L}" y1="{_T}" x2="{_L}" y2="{_H - _B}" stroke="black"/>',
        f'<text x="{(_L + _W - _R) / 2}" y="{_H - 12}" text-anchor="middle">ε (log scale)</text>',
        f'<text x="16" y="{(_T + _H - _B) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {(_T + _H - _B) / 2})">{escape(c.y_label)}</text>',
        f'<text x="{_L}" y="24">{escape(c.title)}</text>',
    ]
    parts.extend(
        f'<text x="{fx(e):.1f}" y="{_H - _B + 16}" text-anchor="middle">{e:g}</text>'
        for e in c.x_ticks
    )
    parts.extend(
        f'<text x="{_L - 6}" y="{fy(v):.1f}" text-anchor="end">{v:.3g}</text>' for v in c.y_range
    )
    for i, curve in enumerate(c.curves):
        if not curve.epsilons:
            continue
        xs = [f"{fx(e):.1f}" for e in curve.epsilons]
        line = " ".join(f"{x},{fy(v):.1f}" for x, v in zip(xs, curve.values, strict=True))
        if c.simulated:
            band = [f"{x},{fy(v):.1f}" for x, v in zip(xs, curve.highs, strict=True)] + [
                f"{x},{fy(v):.1f}" for x, v in zip(reversed(xs), reversed(curve.lows), strict=True)
            ]
            parts.append(
                f'<polygon points="{" ".join(band)}" fill="{curve.colour}" fill-opacity="0.15"/>'
            )
        parts.append(
            f'<polyline points="{line}" fill="none" stroke="{curve.colour}" stroke-width="2"/>'
        )
        parts.append(
            f'<text x="{_W - _R - 4}" y="{_T + 14 * (i + 1)}" text-anchor="end" '
            f'fill="{curve.colour}">{curve_label(curve)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)
