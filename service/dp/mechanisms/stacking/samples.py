"""``stacking_samples`` (PST-S, seed 003 Alg. 2): K low-level models on disjoint row blocks.

PST-S (``stacking_samples``). D^l is cut into K = ``n_models`` (default 5) disjoint blocks
S_1, …, S_K of near-equal size; low-level model k is PLR with the full ε on S_k (all columns);
the high level is PLR with the full ε on D^h. Privacy (seed 003 Prop. 3): S_1, …, S_K, D^h are
disjoint, so a replaced record falls into exactly one of them and changes the law of one
release only; the high level uses the low-level models only as fixed public functions.
Parallel composition: ε in total, no δ.
"""

from __future__ import annotations

from typing import Any

from service.dp.core.base import Problem
from service.dp.core.validation import PrivacyParameterError, check_int_in
from service.dp.mechanisms.stacking.levels import LowLevel, _Stacking
from service.dp.mechanisms.stacking.options import (
    _SAMPLES_PARAMS,
    CAPABILITIES,
    DEFAULT_N_MODELS,
    SamplesOptions,
)
from service.dp.mechanisms.stacking.plan import StackingSamplesPlan

__all__ = ["STACKING_SAMPLES", "StackingSamples"]


def _block_sizes(n: int, k: int) -> list[int]:
    q, r = divmod(n, k)
    return [q + 1] * r + [q] * (k - r)


class StackingSamples(_Stacking):
    """PST-S: K low-level PLRs on disjoint row blocks + a high-level PLR; ε in total."""

    name = "stacking_samples"
    method = "samples"
    options = SamplesOptions
    capabilities = CAPABILITIES
    allowed = _SAMPLES_PARAMS
    plan_class = StackingSamplesPlan

    def _own_params(self, problem: Problem, common: dict[str, Any]) -> dict[str, Any]:
        n_low = problem.n - int(common["_n_high"])
        K = check_int_in(problem.params.get("n_models", DEFAULT_N_MODELS), "n_models", 1, 10_000)
        if n_low < K:
            raise PrivacyParameterError(
                f"n_models = {K} needs at least {K} rows in the low-level part; use fewer "
                "models or a smaller high_level_fraction"
            )
        return {"n_models": K}

    def _low_level(self, problem: Problem, n_low: int) -> LowLevel:
        K = int(problem.params["n_models"])
        sizes = _block_sizes(n_low, K)
        subs = [
            self._sub_problem(
                problem, n=s, d=problem.d, epsilon=problem.epsilon, lam=problem.regularization
            )
            for s in sizes
        ]
        return tuple(sizes), None, None, subs


STACKING_SAMPLES = StackingSamples()
