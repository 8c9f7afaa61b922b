"""Pictures of privacy spend (needs the ``plot`` extra: matplotlib, drawn off screen).

    from privfit_client import plot
    plot.budget_over_time(client.budget(dataset_id), "budget.png")
    plot.study_spend(client.study(study_id), "study.svg")
    plot.plan_curve(client.plan(dataset_id, epsilons=[0.1, 0.5, 1.0]), "plan.png")

The file type follows the suffix (``.png``, ``.svg``, ``.pdf``); text stays text in SVG.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from privfit_client.models import BudgetRead, PlanRead, StudyRead

__all__ = ["budget_over_time", "plan_curve", "study_spend"]

#: Text stays text in SVG (searchable, and checked by the tests).
_RC: Any = {"svg.fonttype": "none", "figure.dpi": 100}


def _save(figure: Any, path: str | os.PathLike[str] | None) -> Any:
    if path is not None:
        figure.savefig(os.fspath(path), bbox_inches="tight")
        plt.close(figure)
    return figure


def _short(identifier: str) -> str:
    return identifier if len(identifier) <= 12 else identifier[:10] + "…"


def budget_over_time(
    budget: BudgetRead, path: str | os.PathLike[str] | None = None, *, title: str | None = None
) -> Any:
    """A dataset's ε and δ over time: each charge (refunded ones hollow), the cumulative
    spend as a step line, and the cap; saved to ``path`` if given. Returns the figure."""
    charges = sorted(budget.charges, key=lambda c: c.created_at)
    with plt.rc_context(_RC):
        figure, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
        rows: Sequence[tuple[str, str, float, float]] = (
            ("epsilon", "ε", budget.epsilon_total, budget.epsilon_remaining),
            ("delta", "δ", budget.delta_total, budget.delta_remaining),
        )
        for ax, (attr, symbol, total, remaining) in zip(axes, rows, strict=True):
            times, cumulative, spent = [], [], 0.0
            for charge in charges:
                amount = float(getattr(charge, attr))
                if charge.state == "charged":
                    spent += amount
                times.append(charge.created_at)
                cumulative.append(spent)
            if times:
                ax.step(times, cumulative, where="post", label=f"{symbol} spent (cumulative)")
                for charge in charges:
                    hollow = charge.state == "refunded"
                    ax.scatter(
                        [charge.created_at],
                        [float(getattr(charge, attr))],
                        marker="o",
                        facecolors="none" if hollow else "C1",
                        edgecolors="C1",
                        zorder=3,
                    )
                ax.scatter([], [], color="C1", label=f"{symbol} per job")
                if any(c.state == "refunded" for c in charges):
                    ax.scatter([], [], facecolors="none", edgecolors="C1", label="refunded")
            ax.axhline(total, color="C3", linestyle="--", label=f"{symbol} cap {total:g}")
            ax.set_ylim(0, total * 1.1 if total > 0 else None)
            ax.set_ylabel(symbol)
            ax.set_title(f"{symbol} remaining: {remaining:g} of {total:g}")
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        axes[-1].set_xlabel("time of charge (UTC)")
        figure.suptitle(title or f"Privacy budget of dataset {budget.dataset_id}")
        figure.autofmt_xdate()
        return _save(figure, path)


def study_spend(
    study: StudyRead,
    path: str | os.PathLike[str] | None = None,
    *,
    names: dict[str, str] | None = None,
    title: str | None = None,
) -> Any:
    """A study's ε granted and spent per member site (summed over its dataset grants), and
    how many models each contributed; ``names`` maps site ids to labels. Returns the figure."""
    labels = names or {}
    sites = [m.site_id for m in study.members]
    for contribution in study.contributions:
        if contribution.site_id not in sites:
            sites.append(contribution.site_id)
    granted = dict.fromkeys(sites, 0.0)
    spent = dict.fromkeys(sites, 0.0)
    models = dict.fromkeys(sites, 0)
    for c in study.contributions:
        if c.kind == "dataset":
            granted[c.site_id] += c.epsilon_cap or 0.0
            spent[c.site_id] += c.epsilon_spent or 0.0
        else:
            models[c.site_id] += 1
    roles = {m.site_id: m.role for m in study.members}
    ticks = [
        f"{labels.get(s, _short(s))}"
        + (" (coordinator)" if roles.get(s) == "coordinator" else "")
        + (f"\n{models[s]} model(s)" if models[s] else "")
        for s in sites
    ]
    with plt.rc_context(_RC):
        figure, ax = plt.subplots(figsize=(max(6, 1.6 * len(sites)), 4.5))
        xs = range(len(sites))
        ax.bar([x - 0.2 for x in xs], [granted[s] for s in sites], 0.4, label="ε granted")
        ax.bar([x + 0.2 for x in xs], [spent[s] for s in sites], 0.4, label="ε spent")
        ax.set_xticks(list(xs), ticks)
        ax.set_ylabel("ε")
        ax.legend()
        ax.set_title(title or f"Study {study.name}: privacy spend per member")
        return _save(figure, path)


def plan_curve(
    plan: PlanRead, path: str | os.PathLike[str] | None = None, *, title: str | None = None
) -> Any:
    """A privacy–utility plan against ε (log scale), one line per λ: the simulated test
    accuracy with its 10–90 % band when the plan has a reference dataset, else the expected
    noise norm; a dotted line at the target accuracy. Returns the figure."""
    points = plan.points
    simulated = bool(points) and "simulated_accuracy" in points[0]
    lambdas = sorted({float(p["regularization"]) for p in points})
    with plt.rc_context(_RC):
        figure, ax = plt.subplots(figsize=(7, 4.5))
        for lam in lambdas:
            mine = sorted(
                (p for p in points if float(p["regularization"]) == lam),
                key=lambda p: float(p["epsilon"]),
            )
            eps = [float(p["epsilon"]) for p in mine]
            if simulated:
                acc = [p["simulated_accuracy"] for p in mine]
                ax.plot(eps, [a["mean"] for a in acc], marker="o", label=f"λ = {lam:g}")
                ax.fill_between(eps, [a["p10"] for a in acc], [a["p90"] for a in acc], alpha=0.2)
            else:
                noise = [p["expected_noise_norm"] for p in mine]
                ax.plot(eps, noise, marker="o", label=f"λ = {lam:g}")
        if simulated:
            ax.set_ylabel("test accuracy (mean, 10–90 %)")
            if plan.target is not None and plan.target.get("accuracy") is not None:
                ax.axhline(
                    float(plan.target["accuracy"]),
                    linestyle=":",
                    color="C3",
                    label=f"target {float(plan.target['accuracy']):g}",
                )
        else:
            ax.set_ylabel("expected noise norm")
            ax.set_yscale("log")
        ax.set_xscale("log")
        ax.set_xlabel("ε")
        ax.legend(fontsize="small")
        ax.set_title(title or f"{plan.mechanism}: n = {plan.n}, d = {plan.d}")
        return _save(figure, path)
