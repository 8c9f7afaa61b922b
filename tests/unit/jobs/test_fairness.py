"""The scheduler's choice (service.runtime.fairness): pure, deterministic, checked by hand.

The cap c = max(1, ⌊share·slots⌋), the start tags S = max(V, S_prev + 1) and the choice of the
smallest eligible tag; then a whole run simulated with the same functions: two workers, site A
with three long jobs queued first, site B's short job starts at once."""

from __future__ import annotations

import pytest

from service.runtime.fairness import Waiting, choose_next, site_cap, start_tag


@pytest.mark.parametrize(
    ("slots", "share", "cap"),
    [(1, 0.5, 1), (2, 0.5, 1), (3, 0.5, 1), (4, 0.5, 2), (10, 0.3, 3), (8, 1.0, 8), (5, 0.01, 1)],
)
def test_a_site_may_hold_at_least_one_slot_and_at_most_its_share(
    slots: int, share: float, cap: int
) -> None:
    assert site_cap(slots, share) == cap


@pytest.mark.parametrize(("slots", "share"), [(0, 0.5), (2, 0.0), (2, 1.5)])
def test_bad_capacities_are_refused(slots: int, share: float) -> None:
    with pytest.raises(ValueError):
        site_cap(slots, share)


def test_start_tags() -> None:
    assert start_tag(7, None) == 7  # nothing queued or running: the current virtual time
    assert start_tag(7, 3) == 7  # its last job is long past
    assert start_tag(7, 9) == 10  # behind its own previous job


def test_nothing_starts_when_every_slot_is_taken() -> None:
    waiting = [Waiting("B", 0)]
    assert choose_next(waiting, {"A": 2}, slots=2, share=1.0) is None


def test_a_site_at_its_cap_waits_even_with_a_free_slot() -> None:
    waiting = [Waiting("A", 1), Waiting("A", 2)]
    assert choose_next(waiting, {"A": 1}, slots=2, share=0.5) is None
    # with share 1 (no reservation) it may take the second slot
    assert choose_next(waiting, {"A": 1}, slots=2, share=1.0) == 0


def test_another_sites_job_jumps_a_capped_sites_backlog() -> None:
    waiting = [Waiting("A", 1), Waiting("A", 2), Waiting("B", 0)]
    assert choose_next(waiting, {"A": 1}, slots=2, share=0.5) == 2


def test_the_smallest_tag_wins_and_arrival_breaks_ties() -> None:
    waiting = [Waiting("A", 1), Waiting("B", 0), Waiting("C", 0)]
    assert choose_next(waiting, {}, slots=1, share=1.0) == 1
    assert choose_next([Waiting("A", 0), Waiting("B", 0)], {}, slots=1, share=1.0) == 0


class Simulation:
    """A pool of ``slots`` run by the pure functions, as the runners run it."""

    def __init__(self, slots: int, share: float) -> None:
        self.slots, self.share = slots, share
        self.waiting: list[tuple[str, Waiting]] = []
        self.running: dict[str, int] = {}
        self.started: list[str] = []
        self.virtual_time = 0
        self.last_tag: dict[str, int] = {}

    def submit(self, job: str, site: str) -> None:
        tag = start_tag(self.virtual_time, self.last_tag.get(site))
        self.last_tag[site] = tag
        self.waiting.append((job, Waiting(site, tag)))
        self.dispatch()

    def finish(self, job: str) -> None:
        site = job[0]
        self.running[site] -= 1
        self.dispatch()

    def dispatch(self) -> None:
        while True:
            index = choose_next(
                [w for _, w in self.waiting], self.running, slots=self.slots, share=self.share
            )
            if index is None:
                return
            job, waiting = self.waiting.pop(index)
            self.running[waiting.site] = self.running.get(waiting.site, 0) + 1
            self.virtual_time = waiting.tag
            self.started.append(job)


def test_site_b_starts_at_once_behind_site_a_s_three_long_jobs() -> None:
    pool = Simulation(slots=2, share=0.5)
    for job in ("A1", "A2", "A3"):
        pool.submit(job, "A")
    assert pool.started == ["A1"]  # the second slot is kept for other sites
    pool.submit("B1", "B")
    assert pool.started == ["A1", "B1"]
    pool.finish("B1")
    assert pool.started == ["A1", "B1"]  # A still holds its share
    pool.finish("A1")
    assert pool.started == ["A1", "B1", "A2"]


def test_backlogged_sites_take_turns_one_job_each() -> None:
    pool = Simulation(slots=1, share=1.0)
    for job in ("A1", "A2", "A3"):
        pool.submit(job, "A")
    for job in ("B1", "B2", "B3"):
        pool.submit(job, "B")
    pool.submit("C1", "C")
    while len(pool.started) < 7:
        pool.finish(pool.started[-1])
    assert pool.started == ["A1", "B1", "C1", "A2", "B2", "A3", "B3"]


def test_first_in_first_out_without_fairness() -> None:
    """Today's behaviour when every job belongs to one site (or sites are unknown)."""
    pool = Simulation(slots=2, share=1.0)
    for job in ("A1", "A2", "A3", "A4"):
        pool.submit(job, "A")
    assert pool.started == ["A1", "A2"]
    pool.finish("A1")
    pool.finish("A2")
    assert pool.started == ["A1", "A2", "A3", "A4"]
