"""The pictures: valid PNG and SVG files whose text names what they show (no pixels compared)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from privfit_client import plot
from privfit_client.models import (
    BudgetRead,
    ContributionRead,
    LedgerChargeRead,
    StudyMemberRead,
    StudyRead,
)

T0 = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)


def budget() -> BudgetRead:
    spends = [(1.0, 0.0, "charged"), (0.5, 1e-7, "charged"), (1.0, 0.0, "refunded")]
    charges = [
        LedgerChargeRead(
            id=f"charge-{i}",
            job_id=f"job-{i}",
            epsilon=epsilon,
            delta=delta,
            mechanism="objective_perturbation",
            state=state,  # type: ignore[arg-type]
            created_at=T0 + timedelta(minutes=5 * i),
            refunded_at=None,
        )
        for i, (epsilon, delta, state) in enumerate(spends)
    ]
    return BudgetRead(
        dataset_id="dataset-1",
        epsilon_total=4.0,
        epsilon_spent=1.5,
        epsilon_remaining=2.5,
        delta_total=1e-6,
        delta_spent=1e-7,
        delta_remaining=9e-7,
        charges=charges,
    )


def test_budget_picture_as_svg_and_png(tmp_path: Path) -> None:
    svg, png = tmp_path / "budget.svg", tmp_path / "budget.png"
    plot.budget_over_time(budget(), svg)
    plot.budget_over_time(budget(), png, title="Adult at St. Mary's")
    text = svg.read_text(encoding="utf-8")
    assert "<svg" in text
    for label in (
        "Privacy budget of dataset dataset-1",
        "ε remaining: 2.5 of 4",
        "δ remaining: 9e-07 of 1e-06",
        "ε per job",
        "refunded",
        "ε cap 4",
        "time of charge (UTC)",
    ):
        assert label in text, label
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_study_picture_names_members_and_roles(tmp_path: Path) -> None:
    def grant(i: int, site: str, cap: float, spent: float) -> ContributionRead:
        return ContributionRead(
            id=f"c{i}",
            site_id=site,
            kind="dataset",
            model_id=None,
            dataset_id=f"d{i}",
            epsilon_cap=cap,
            delta_cap=1e-6,
            epsilon_spent=spent,
            delta_spent=0.0,
            used=True,
            created_at=T0,
        )

    study = StudyRead(
        id="study-1",
        name="consortium",
        coordinator="site-a",
        members=[
            StudyMemberRead(site_id="site-a", role="coordinator"),
            StudyMemberRead(site_id="site-b", role="member"),
        ],
        spec={},
        feature_names=[],
        contributions=[grant(1, "site-a", 2.0, 1.0), grant(2, "site-b", 1.5, 0.5)],
        results=[],
        created_at=T0,
    )
    svg = tmp_path / "study.svg"
    plot.study_spend(study, svg, names={"site-a": "Hospital A"})
    text = svg.read_text(encoding="utf-8")
    for label in ("Study consortium", "Hospital A (coordinator)", "site-b", "ε granted", "ε spent"):
        assert label in text, label


def test_plan_picture_as_svg_and_png(tmp_path: Path) -> None:
    from privfit_client.models import PlanRead

    points = [
        {
            "epsilon": eps,
            "regularization": 1e-3,
            "expected_noise_norm": 10 / eps,
            "simulated_accuracy": {"mean": acc, "p10": acc - 0.02, "p90": acc + 0.01},
        }
        for eps, acc in ((0.1, 0.7), (0.5, 0.8), (1.0, 0.82))
    ]
    plan = PlanRead(
        dataset_id="dataset-1",
        mechanism="objective_perturbation",
        n=1000,
        d=10,
        reference_dataset_id="dataset-2",
        points=points,
        target={"accuracy": 0.8, "probability": 0.9, "smallest_epsilon": 1.0},
        notes=[],
        spent={"epsilon": 0.0, "delta": 0.0},
    )
    svg, png = tmp_path / "plan.svg", tmp_path / "plan.png"
    plot.plan_curve(plan, svg)
    plot.plan_curve(plan, png)
    text = svg.read_text(encoding="utf-8")
    for label in ("objective_perturbation: n = 1000, d = 10", "λ = 0.001", "target 0.8"):
        assert label in text, label
    assert png.read_bytes().startswith(b"\x89PNG")
