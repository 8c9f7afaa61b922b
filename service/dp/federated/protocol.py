"""The skeleton every federated protocol shares; each protocol supplies only its own steps.

A protocol (:class:`FederatedProtocol`) is

* ``calibrate(problem)``: public quantities only → a :class:`FederatedCalibration` whose
  ``plan`` is the protocol's typed, frozen plan (:mod:`service.dp.core.plan`) and whose
  ``details`` are the record rendered from that plan;
* ``party(problem, plan, k, X, y)``: site k over its own rows (the in-process fit and a node
  build it alike);
* ``coordinator(problem, plan)``: one run's :class:`Coordinator`, the protocol's own steps:
  what a site is asked in round t (:meth:`Coordinator.ask`), what the coordinator does with
  the round's answers (:meth:`Coordinator.combine`) and the vector it returns at the end
  (:meth:`Coordinator.result`);
* ``perform(site, plan, step, points, rng)``: a party's step on a node, from the public
  vectors the coordinator sent and the party's own plan.

What is common lives here once: :func:`run_rounds` (the T rounds, every site of a round at once
through :func:`~service.dp.federated._common.site_round`, a clock tick — progress and a possible
cancel — after each, the result), :meth:`FederatedProtocol.run_parties` (the coordinator over
local sites or proxies of sites on nodes) and :meth:`FederatedProtocol.run` (the in-process fit:
one local party per dataset). Every number ``run`` uses is read from the calibration's typed
plan, never from its ``details`` (a record for people; the plan is what runs).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar, cast

import numpy as np

from service.dp.core.plan import Plan
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    FloatArray,
    RoundClock,
    site_generators,
    site_round,
)

__all__ = ["Coordinator", "FederatedProtocol", "plan_of", "run_rounds"]

PlanT = TypeVar("PlanT", bound=Plan)


class Coordinator(ABC):
    """One run of a protocol's coordinator: its state between rounds and its own steps.

    ``rounds`` is T (public, fixed by the plan). ``site_streams``: whether each site draws its
    noise from its own child stream of the job's generator
    (:func:`~service.dp.federated._common.site_generators`); a protocol whose sites draw no
    noise (the trusted aggregator of ``noisy_average``) leaves the job's generator untouched
    for its own release.
    """

    site_streams: ClassVar[bool] = True

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    @abstractmethod
    def ask(self, t: int, k: int, party: Any, rng: np.random.Generator | None) -> Any:
        """Site k's step of round t (one task of the round; ``rng`` is site k's stream)."""

    @abstractmethod
    def combine(self, t: int, answers: list[Any], parties: Sequence[Any]) -> None:
        """The coordinator's step after round t, from the answers in site order."""

    @abstractmethod
    def result(self, rng: np.random.Generator | None) -> FloatArray:
        """The vector the run returns after the last round (before the release grid)."""


def run_rounds(
    coordinator: Coordinator,
    parties: Sequence[Any],
    *,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    """The skeleton of every protocol's run: T rounds, each asking every site at once and
    combining the answers in site order, the clock ticking (progress, a cancel) after each;
    then the coordinator's result. A failing site step propagates unchanged (nothing
    returned)."""
    rngs = site_generators(rng, len(parties)) if coordinator.site_streams else []
    for t in range(coordinator.rounds):

        def step(k: int, party: Any, t: int = t) -> Any:
            return coordinator.ask(t, k, party, rngs[k] if rngs else None)

        answers = site_round(parties, step)
        coordinator.combine(t, answers, parties)
        clock.tick()
    return coordinator.result(rng)


def plan_of(calibration: FederatedCalibration, kind: type[PlanT]) -> PlanT:
    """The calibration's typed plan, of the protocol's kind (``ValueError`` otherwise: a run
    never falls back to the record)."""
    plan = calibration.plan
    if not isinstance(plan, kind):
        raise ValueError(
            f"a {calibration.protocol} calibration must carry its {kind.kind} plan, "
            f"got {type(plan).__name__}"
        )
    return plan


class FederatedProtocol(ABC, Generic[PlanT]):
    """A federated protocol: its calibration, its parties and its coordinator's steps (module
    docstring); ``run`` and ``run_parties`` are the same for every protocol."""

    name: ClassVar[str]
    plan_type: ClassVar[type[Plan]]
    #: The steps a coordinator may ask a party on a node for (empty: not run on nodes).
    steps: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def calibrate(self, problem: FederatedProblem) -> FederatedCalibration:
        """Public quantities only: the costs, the typed plan and its record."""

    @abstractmethod
    def party(
        self, problem: FederatedProblem, plan: PlanT, index: int, X: FloatArray, y: FloatArray
    ) -> Any:
        """Site ``index`` over (X, y), already validated."""

    @abstractmethod
    def coordinator(self, problem: FederatedProblem, plan: PlanT) -> Coordinator:
        """A fresh coordinator for one run of ``plan``."""

    def perform(
        self,
        site: Any,
        plan: PlanT,
        step: str,
        points: list[FloatArray],
        rng: np.random.Generator | None,
    ) -> FloatArray | None:
        """A party's step on a node (``ValueError`` for a protocol not run on nodes)."""
        del site, plan, step, points, rng
        raise ValueError(f"{self.name} cannot run over separate parties")

    def plan(self, calibration: FederatedCalibration) -> PlanT:
        return cast(PlanT, plan_of(calibration, self.plan_type))

    def local_party(
        self,
        problem: FederatedProblem,
        calibration: FederatedCalibration,
        index: int,
        X: FloatArray,
        y: FloatArray,
    ) -> Any:
        return self.party(problem, self.plan(calibration), index, X, y)

    def run_parties(
        self,
        parties: Sequence[Any],
        problem: FederatedProblem,
        calibration: FederatedCalibration,
        *,
        rng: np.random.Generator | None,
        clock: RoundClock,
    ) -> FloatArray:
        """The coordinator over ``parties`` (local sites or proxies of sites that run
        elsewhere, in site order), with the calibration's plan."""
        coordinator = self.coordinator(problem, self.plan(calibration))
        return run_rounds(coordinator, parties, rng=rng, clock=clock)

    def run(
        self,
        data: Sequence[tuple[FloatArray, FloatArray]],
        problem: FederatedProblem,
        calibration: FederatedCalibration,
        *,
        rng: np.random.Generator | None,
        clock: RoundClock,
    ) -> FloatArray:
        """The in-process fit: one local party per dataset, then :meth:`run_parties`."""
        plan = self.plan(calibration)
        parties = [self.party(problem, plan, k, X, y) for k, (X, y) in enumerate(data)]
        return run_rounds(self.coordinator(problem, plan), parties, rng=rng, clock=clock)
