"""PST-H's feature groups resolved on a study's public features (seed 003, Alg. 4)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from service.domain.errors import (
    InvalidInputError,
)
from service.domain.ranges import MIN_EPSILON
from service.dp.data.preprocessing import CategoricalFeature, PreprocessingSpec


def resolve_groups(
    feature_names: Sequence[str],
    preprocessing: Mapping[str, Any],
    groups: Sequence[Sequence[str]] | None,
    importance: Sequence[float] | None,
) -> tuple[list[list[int]], list[list[str]], list[str], list[float] | None]:
    """Column indices, encoded names and unused names of the groups; normalised importance.

    A group entry is an encoded feature name of the study (``age``, ``color=red``,
    ``intercept``) or a categorical column name, which stands for its whole one-hot block.
    Groups must be non-empty and disjoint. The ``intercept`` column is a column like any
    other: in a group it gives that group's low-level model a bias; in no group it is unused
    (the high level has its own intercept). Importance weights are public, ≥ 0, one per group,
    not all zero; a zero weight is refused (the group would get no budget: leave it out).
    Any breach is an :class:`InvalidInputError` naming it (only names, never data)."""
    if groups is None:
        if importance is not None:
            raise InvalidInputError(
                "importance weights need feature_groups (one weight per group)",
                errors=[{"loc": ["body", "importance"], "msg": "needs feature_groups"}],
            )
        return [], [], [], None
    index = {name: i for i, name in enumerate(feature_names)}
    blocks: dict[str, list[str]] = {}
    spec = PreprocessingSpec.from_dict(preprocessing)
    if spec.projection is None:
        blocks = {
            f.column: list(f.names) for f in spec.features if isinstance(f, CategoricalFeature)
        }
    errors: list[dict[str, Any]] = []
    owner: dict[int, int] = {}
    resolved: list[list[int]] = []
    for k, group in enumerate(groups):
        if not group:
            errors.append({"loc": ["body", "feature_groups", k], "msg": f"group {k} is empty"})
        cols: list[int] = []
        for j, entry in enumerate(group):
            loc = ["body", "feature_groups", k, j]
            if entry in index:
                expanded = [entry]
            elif entry in blocks:
                expanded = blocks[entry]
            else:
                errors.append({"loc": loc, "msg": f"unknown feature {entry!r}"})
                continue
            for name in expanded:
                i = index[name]
                if i in owner:
                    where = "twice in group" if owner[i] == k else f"also in group {owner[i]} of"
                    errors.append(
                        {
                            "loc": loc,
                            "msg": f"feature {name!r} is {where} feature_groups: the groups "
                            "must be disjoint",
                        }
                    )
                    continue
                owner[i] = k
                cols.append(i)
        resolved.append(cols)
    if errors:
        raise InvalidInputError(
            "bad feature_groups: " + "; ".join(e["msg"] for e in errors[:10]),
            errors=errors,
        )
    named = [[feature_names[i] for i in cols] for cols in resolved]
    unused = [name for i, name in enumerate(feature_names) if i not in owner]
    if importance is None:
        return resolved, named, unused, None
    q = [float(v) for v in importance]
    loc = ["body", "importance"]
    if len(q) != len(resolved):
        raise InvalidInputError(
            f"importance needs one weight per feature group ({len(resolved)}), got {len(q)}",
            errors=[{"loc": loc, "msg": "one weight per feature group"}],
        )
    bad = [k for k, v in enumerate(q) if not math.isfinite(v) or v < 0.0]
    if bad:
        raise InvalidInputError(
            "importance weights must be finite and ≥ 0",
            errors=[{"loc": [*loc, k], "msg": "must be finite and ≥ 0"} for k in bad],
        )
    zero = [k for k, v in enumerate(q) if v == 0.0]
    if zero:
        raise InvalidInputError(
            "a feature group with importance 0 would get no privacy budget; leave it out of "
            "feature_groups instead (groups " + ", ".join(map(str, zero)) + ")",
            errors=[{"loc": [*loc, k], "msg": "importance 0"} for k in zero],
        )
    # q / max q first: the sum of weights near the largest double would overflow.
    largest = max(q)
    scaled = [v / largest for v in q]
    total = math.fsum(scaled)
    return resolved, named, unused, [v / total for v in scaled]


def check_group_budgets(importance: Sequence[float] | None, n_groups: int, epsilon: float) -> None:
    """Refuse (422, before any charge) importance weights so unequal that a group's share
    q_k·ε falls below the smallest documented ε (MIN_EPSILON): its noise scale ∝ 1/(q_k·ε)
    would overflow, or the share underflow to zero, while fitting after the charge."""
    shares = importance if importance is not None else [1.0 / max(n_groups, 1)] * n_groups
    small = [k for k, q in enumerate(shares) if not q * epsilon >= MIN_EPSILON]
    if small:
        raise InvalidInputError(
            f"each feature group's share q_k·ε of ε must be at least {MIN_EPSILON:g}; groups "
            + ", ".join(map(str, small))
            + " get less: use more even importance weights or a larger ε",
            errors=[
                {"loc": ["body", "importance", k], "msg": "share of ε below the minimum"}
                for k in small
            ],
        )
