"""Registry of PrivFit's single-dataset fit mechanisms (docs/design.md §3), keyed by their API name.

Every entry implements :class:`service.dp.core.base.Mechanism`; its module docstring states the
mechanism's mathematics and privacy argument.
"""

from __future__ import annotations

from service.dp.core.base import Mechanism
from service.dp.core.validation import PrivacyParameterError
from service.dp.mechanisms import (
    adassp,
    dp_sgd,
    gaussian_objective,
    generalized_objective,
    noisy_gd,
    non_private,
    objective_perturbation,
    output_perturbation,
)
from service.dp.mechanisms.stacking.features import STACKING_FEATURES
from service.dp.mechanisms.stacking.samples import STACKING_SAMPLES

__all__ = ["MECHANISMS", "get_mechanism"]

MECHANISMS: dict[str, Mechanism] = {
    mechanism.name: mechanism
    for mechanism in (
        non_private.MECHANISM,
        output_perturbation.MECHANISM,
        objective_perturbation.MECHANISM,
        generalized_objective.MECHANISM,
        gaussian_objective.MECHANISM,
        dp_sgd.MECHANISM,
        noisy_gd.MECHANISM,
        adassp.MECHANISM,
        STACKING_SAMPLES,
        STACKING_FEATURES,
    )
}


def get_mechanism(name: str) -> Mechanism:
    """The mechanism called ``name``; ValueError listing the valid names otherwise."""
    try:
        return MECHANISMS[name]
    except (KeyError, TypeError):
        raise PrivacyParameterError(
            f"unknown mechanism {name!r}; choose one of {', '.join(sorted(MECHANISMS))}"
        ) from None
