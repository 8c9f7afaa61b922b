"""Small raw datasets with a public spec, shared by the domain unit tests."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.dp.data.preprocessing import CategoricalFeature, NumericFeature, PreprocessingSpec
from service.dp.data.projection import RandomProjection

COLORS = ("red", "green", "blue")


def spec(*, row_norm: str = "clip", projection: bool = False) -> PreprocessingSpec:
    base = PreprocessingSpec(
        features=(
            NumericFeature(column="age", lower=18.0, upper=90.0),
            CategoricalFeature(column="color", categories=COLORS),
            NumericFeature(column="income", lower=0.0, upper=1000.0),
        ),
        intercept=True,
        row_norm=row_norm,  # type: ignore[arg-type]
    )
    if not projection:
        return base
    return PreprocessingSpec(
        features=base.features,
        intercept=True,
        row_norm=base.row_norm,
        projection=RandomProjection(d_in=base.n_raw_features, k=4, seed=11),
    )


def rows(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], NDArray[np.float64]]:
    """``n`` raw rows (some outside the public bounds) and ±1 labels that depend on them."""
    rng = np.random.default_rng(seed)
    age = rng.integers(10, 100, size=n)
    color = rng.choice(COLORS, size=n)
    income = rng.normal(500.0, 400.0, size=n)
    logit = 0.04 * (age - 50) + np.where(color == "red", 1.0, -0.5) + 0.002 * (income - 500)
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-logit)), 1.0, -1.0)
    out = [
        {"age": int(a), "color": str(c), "income": float(i), "id": k}
        for k, (a, c, i) in enumerate(zip(age, color, income, strict=True))
    ]
    return out, y


def columns(data: list[dict[str, Any]]) -> dict[str, NDArray[Any]]:
    return {key: np.asarray([r[key] for r in data]) for key in ("age", "color", "income")}
