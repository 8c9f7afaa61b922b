"""``admm``'s site graph: from ``topology`` or an explicit ``adjacency``; symmetric, without
self-loops and connected (ADMM reaches consensus only on a connected graph)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from service.dp.core.validation import PrivacyParameterError
from service.dp.federated._common import choice_param
from service.dp.federated.admm_calibration.params import TOPOLOGIES

__all__ = ["neighbours_from_params"]


def neighbours_from_params(params: Mapping[str, Any], sites: int) -> list[list[int]]:
    """The graph as sorted neighbour lists, from ``topology`` (``"complete"``, the default,
    or ``"ring"``) or an explicit ``adjacency``: a list of K neighbour lists, or a K×K 0/1
    matrix (recognised as such when every row has K entries, all 0 or 1). The graph must be
    symmetric, without self-loops and connected."""
    K = sites
    if "adjacency" in params:
        if "topology" in params:
            raise PrivacyParameterError("give either topology or adjacency, not both")
        graph = _parse_adjacency(params["adjacency"], K)
    else:
        topology = choice_param(params, "topology", "complete", TOPOLOGIES)
        if topology == "complete":
            graph = [[j for j in range(K) if j != p] for p in range(K)]
        else:
            graph = [sorted({(p - 1) % K, (p + 1) % K} - {p}) for p in range(K)]
    _check_connected(graph)
    return graph


def _parse_adjacency(value: object, K: int) -> list[list[int]]:
    if not isinstance(value, list | tuple) or len(value) != K:
        raise PrivacyParameterError(
            f"adjacency must list the neighbours of each of the {K} sites (or be a {K}×{K} "
            "0/1 matrix)"
        )
    rows: list[list[int]] = []
    for p, row in enumerate(value):
        if not isinstance(row, list | tuple) or any(
            isinstance(v, bool) or not isinstance(v, int | np.integer) for v in row
        ):
            raise PrivacyParameterError(f"adjacency row {p} must be a list of integers")
        rows.append([int(v) for v in row])
    if K > 1 and all(len(r) == K and all(v in (0, 1) for v in r) for r in rows):
        rows = [[j for j, v in enumerate(r) if v == 1] for r in rows]
    graph: list[list[int]] = []
    for p, row in enumerate(rows):
        if any(not 0 <= j < K for j in row):
            raise PrivacyParameterError(f"adjacency row {p} names a site outside 0..{K - 1}")
        if p in row:
            raise PrivacyParameterError(f"adjacency: site {p} cannot be its own neighbour")
        if len(set(row)) != len(row):
            raise PrivacyParameterError(f"adjacency row {p} repeats a neighbour")
        graph.append(sorted(row))
    for p, row in enumerate(graph):
        for j in row:
            if p not in graph[j]:
                raise PrivacyParameterError(
                    f"adjacency must be symmetric: site {p} lists {j} but {j} does not list {p}"
                )
    return graph


def _check_connected(graph: list[list[int]]) -> None:
    seen = {0}
    stack = [0]
    while stack:
        for j in graph[stack.pop()]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    if len(seen) != len(graph):
        raise PrivacyParameterError(
            "the site graph must be connected (ADMM reaches consensus only on a connected graph)"
        )
