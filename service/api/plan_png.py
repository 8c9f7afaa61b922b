"""The planner's curve as a PNG: the picture of :func:`service.api.plan_svg.plan_svg` (same
size, axes, band and one line per λ, from the same :func:`~service.api.plan_svg.plan_curves`)
drawn by matplotlib's Agg renderer.

matplotlib is used without ``pyplot``: each call builds its own ``Figure`` on its own Agg
canvas, so there is no global state and concurrent requests do not share a figure. It is
imported on the first PNG asked for (about a second), not when the app starts.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from service.api.plan_svg import HEIGHT, WIDTH, curve_label, plan_curves

__all__ = ["DPI", "plan_png"]

#: WIDTH × HEIGHT pixels at this resolution (6.4 × 4 inches).
DPI = 100


def plan_png(plan: Mapping[str, Any]) -> bytes:
    """A WIDTH × HEIGHT PNG of ``plan`` (the JSON of
    :meth:`service.domain.fits.plans.Plan.to_dict`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, NullLocator

    c = plan_curves(plan)
    figure = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI, facecolor="white")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_xscale("log")
    if c.y_log:
        axes.set_yscale("log")
    for curve in c.curves:
        if not curve.epsilons:
            continue
        if c.simulated:
            axes.fill_between(
                curve.epsilons, curve.lows, curve.highs, color=curve.colour, alpha=0.15, lw=0
            )
        axes.plot(
            curve.epsilons,
            curve.values,
            color=curve.colour,
            linewidth=2,
            label=curve_label(curve),
        )
    axes.set_xlim(*c.x_range)
    axes.set_ylim(*c.y_range)
    axes.xaxis.set_major_locator(FixedLocator(list(c.x_ticks)))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xticklabels([f"{e:g}" for e in c.x_ticks])
    axes.set_xlabel("ε (log scale)")
    axes.set_ylabel(c.y_label)
    axes.set_title(c.title, loc="left", fontsize=10)
    if any(curve.epsilons for curve in c.curves):
        axes.legend(loc="best", frameon=False, fontsize=9)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, facecolor="white")
    return buffer.getvalue()
