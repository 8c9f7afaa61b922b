"""The options of PST-S and PST-F (:mod:`service.dp.core.options`), their defaults and the
parameter names each accepts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.dp.core.options import Capabilities, MechanismOptions, option

__all__ = [
    "CAPABILITIES",
    "DEFAULT_HIGH_LEVEL_FRACTION",
    "DEFAULT_N_MODELS",
    "FeaturesOptions",
    "SamplesOptions",
]

DEFAULT_N_MODELS = 5
DEFAULT_HIGH_LEVEL_FRACTION = 0.5
_COMMON = (
    "high_level_fraction",
    "meta_features",
    "high_level_intercept",
    "high_level_regularization",
)
_SAMPLES_PARAMS = ("n_models", *_COMMON)
_FEATURES_PARAMS = ("feature_groups", "importance", "n_models", *_COMMON)


@dataclass(frozen=True, slots=True)
class _CommonOptions(MechanismOptions):
    """The high level's options, shared by PST-S and PST-F."""

    high_level_fraction: float = option(
        DEFAULT_HIGH_LEVEL_FRACTION,
        "Share of the rows, drawn at random, that train the high-level model (the rest train "
        "the low-level models).",
        gt=0.0,
        lt=1.0,
    )
    meta_features: Literal["sigmoid", "centered_sigmoid"] = option(
        "sigmoid", "The high level's features: the low-level models' scores through σ."
    )
    high_level_intercept: bool = option(True, "Whether the high-level model has an intercept.")
    high_level_regularization: float | None = option(
        None,
        "λ of the high-level model.",
        gt=0.0,
        computed_default="the fit's `regularization`",
    )


@dataclass(frozen=True, slots=True)
class SamplesOptions(_CommonOptions):
    """PST-S: K low-level models on disjoint row blocks. Also checked with the dataset: K ≤ the
    low level's rows."""

    n_models: int = option(
        DEFAULT_N_MODELS, "Number K of low-level models (disjoint row blocks).", ge=1, le=10_000
    )


@dataclass(frozen=True, slots=True)
class FeaturesOptions(_CommonOptions):
    """PST-F: K low-level models on disjoint column groups. Also checked with the dataset: the
    groups are disjoint with columns in range, the weights sum to 1."""

    # JSON arrays; the default is None, never a shared list
    feature_groups: list[list[int]] | None = option(  # noqa: RUF009
        None,
        "Disjoint groups of column indices, one low-level model each (null: `n_models` "
        "near-equal groups of consecutive columns).",
    )
    importance: list[float] | None = option(  # noqa: RUF009
        None,
        "Public budget shares q_k > 0 of the groups, summing to 1 (null: equal shares).",
    )
    n_models: int | None = option(
        None,
        f"Number K of groups when `feature_groups` is not given (null: {DEFAULT_N_MODELS}, at "
        "most d).",
        ge=1,
        le=10_000,
    )


CAPABILITIES = Capabilities()
